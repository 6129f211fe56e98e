// Compiles GRAPH at tensor-parallel size TP into the training program OUT
// through the installed C API, as a C program: prints the world size, or
// the diagnostics and exits 1.
//
//   capi-compile GRAPH TP OUT

#include "fsdp-c/Compiler.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fputs("usage: capi-compile GRAPH TP OUT\n", stderr);
    return 2;
  }
  FsdpCompileOptions options = fsdpCompileOptionsDefault();
  options.input = argv[1];
  options.tp = atoll(argv[2]);
  options.sequence_parallel = FSDP_SETTING_ON;
  options.passes = "fsdp-build-train-step{lr=0.01}";
  options.output = argv[3];
  FsdpCompileResult result = fsdpCompile(&options);
  fputs(result.diagnostics.data, stderr);
  if (result.succeeded)
    printf("world size %lld\n", (long long)result.world_size);
  int status = result.succeeded ? 0 : 1;
  fsdpCompileResultDestroy(&result);
  return status;
}

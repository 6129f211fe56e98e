//===- embed-pipeline.cpp - fsdp-mlir as a step of another program --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// How a model export pipeline embeds the compiler through its one header,
// fsdp/Compiler.h (libFsdpMlir.so): import a graph, run the library's
// pipeline (the one fsdp-compile and fsdp-opt's fsdp-pipeline run) with
// options set in C++, and print the per-rank program as C++.
//
//   fsdp-embed-pipeline graph.json TP  > program.cpp
//
//===----------------------------------------------------------------------===//

#include "fsdp/Compiler.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

int main(int argc, char **argv) {
  if (argc != 3) {
    llvm::errs() << "usage: fsdp-embed-pipeline GRAPH.json TP\n";
    return 2;
  }
  std::unique_ptr<mlir::MLIRContext> context = fsdp::createContext();
  auto buffer = llvm::MemoryBuffer::getFile(argv[1]);
  if (!buffer) {
    llvm::errs() << argv[1] << ": " << buffer.getError().message() << "\n";
    return 1;
  }
  mlir::OwningOpRef<mlir::ModuleOp> module =
      fsdp::importGraphFile((*buffer)->getBuffer(), argv[1], context.get());
  if (!module)
    return 1;

  // The options fsdp-compile's flags set, here from C++.
  fsdp::PipelineOptions options;
  options.tp = std::atoll(argv[2]);
  options.sequenceParallel = fsdp::FromConfig::True;
  options.step = "fsdp-build-train-step{lr=0.01}";
  if (mlir::failed(fsdp::runPipeline(*module, options)))
    return 1;
  return mlir::failed(fsdp::emitProgram(*module, llvm::outs())) ? 1 : 0;
}

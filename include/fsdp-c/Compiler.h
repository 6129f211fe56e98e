//===-- fsdp-c/Compiler.h - The compiler, from C ------------------*- C -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// fsdp-compile as one C call, from libFsdpMlir.so, for bindings (the Python
// module fsdp_mlir._fsdp_mlir) and programs that do not speak C++: a graph
// in, an executable out, every diagnostic returned as text.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_C_COMPILER_H
#define FSDP_C_COMPILER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FSDP_CAPI_EXPORTED __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/// A NUL-terminated string the library allocated; release it with
/// fsdpStringDestroy.
typedef struct FsdpString {
  char *data;
  size_t length;
} FsdpString;

/// Frees `string`'s characters and empties it.
FSDP_CAPI_EXPORTED void fsdpStringDestroy(FsdpString *string);

/// An on/off option whose default is the parallel config's value.
typedef enum FsdpSetting {
  FSDP_SETTING_FROM_CONFIG = 0,
  FSDP_SETTING_ON = 1,
  FSDP_SETTING_OFF = 2,
} FsdpSetting;

/// What one compile takes: fsdp-compile's flags, by the same names. A NULL
/// string is a flag not given.
typedef struct FsdpCompileOptions {
  /// The graph.json or .mlir file (a name ending in .json is a graph); with
  /// `input_text`, only the name diagnostics give that text.
  const char *input;
  /// The graph.json text itself, or NULL to read `input`.
  const char *input_text;
  /// parallel.json (--parallel).
  const char *parallel;
  /// Ranks (--world-size); 0: the smallest world the config allows.
  int64_t world_size;
  /// Tensor-parallel size (--tp); 0: the config's tp_size.
  int64_t tp;
  /// Sequence parallelism (--sequence-parallel).
  FsdpSetting sequence_parallel;
  /// Passes run on the per-rank program (--passes), e.g.
  /// "fsdp-build-train-step{lr=1e-3}".
  const char *passes;
  /// Overlap FSDP's collectives with compute (--schedule; true by default).
  bool schedule;
  /// The executable to write (-o); NULL: a.out.
  const char *output;
  /// Keep the generated C++ here (--emit-source).
  const char *source;
  /// Write the plan, communication and memory reports here as one JSON
  /// object (--report-json; docs/python.md has its shape).
  const char *report_json;
  /// The runtime linked (--target): "cpu" or "cuda"; NULL: cpu.
  const char *target;
  /// A one-process program without MPI (--no-mpi; cuda only).
  bool no_mpi;
} FsdpCompileOptions;

/// fsdp-compile's defaults: every string NULL, sizes 0, the sequence
/// parallelism the config's, schedule on.
FSDP_CAPI_EXPORTED FsdpCompileOptions fsdpCompileOptionsDefault(void);

/// What a compile made.
typedef struct FsdpCompileResult {
  bool succeeded;
  /// The ranks the program runs on (mpirun -np), when it succeeded.
  int64_t world_size;
  /// Every error and warning, as fsdp-compile prints them: the file, line
  /// and column, the node, field or op, the message and the line quoted.
  FsdpString diagnostics;
} FsdpCompileResult;

/// Compiles `options->input` into the executable `options->output`, as
/// fsdp-compile does. Release the result with fsdpCompileResultDestroy.
FSDP_CAPI_EXPORTED FsdpCompileResult
fsdpCompile(const FsdpCompileOptions *options);

/// Frees what `result` holds.
FSDP_CAPI_EXPORTED void fsdpCompileResultDestroy(FsdpCompileResult *result);

#ifdef __cplusplus
}
#endif

#endif // FSDP_C_COMPILER_H

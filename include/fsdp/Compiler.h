//===- Compiler.h - The entry point for embedding programs -----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What a program that embeds fsdp-mlir (a model export pipeline) calls, from
// libFsdpMlir.so (`find_package(FsdpMlir)`, target FsdpMlir::FsdpMlir): make
// a context with the compiler's dialects, import a graph.json, run the
// pipeline that fsdp-compile runs, and print the per-rank program as C++;
// or all of fsdp-compile at once, `compileProgram`, which the tool and the C
// API (fsdp-c/Compiler.h) call.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_COMPILER_H
#define FSDP_COMPILER_H

#include "fsdp/Pipeline/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/LogicalResult.h"

#include <memory>
#include <optional>
#include <string>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace llvm {
class raw_ostream;
class SourceMgr;
} // namespace llvm

namespace fsdp {

/// A context that knows every dialect the pipeline uses, with its passes
/// registered (so a `step` pipeline string parses).
std::unique_ptr<mlir::MLIRContext> createContext();

/// Imports the graph.json text `json` (named `fileName` in diagnostics);
/// null after reporting the error.
mlir::OwningOpRef<mlir::ModuleOp> importGraphFile(llvm::StringRef json,
                                                  llvm::StringRef fileName,
                                                  mlir::MLIRContext *context);

/// The one entry point: runs the registered pipeline (`fsdp-pipeline`, what
/// fsdp-compile runs) with `options` on `module`, in place. Fails with the
/// diagnostics reported through the context.
llvm::LogicalResult runPipeline(mlir::ModuleOp module,
                                const PipelineOptions &options);

/// Prints the lowered `module` as the C++ program fsdp-compile compiles.
llvm::LogicalResult emitProgram(mlir::ModuleOp module, llvm::raw_ostream &os);

/// What fsdp-compile takes besides the pipeline's options.
struct CompileOptions {
  /// The graph.json or MLIR file; a name ending in .json is a graph.json.
  /// With `inputText`, only the name diagnostics give that text.
  std::string input;
  /// The graph.json text itself, when it is not read from `input`.
  std::optional<std::string> inputText;
  /// A replicated mesh for a program without one, "axis=size,..." (not
  /// with the pipeline's parallel options, which build their own).
  std::string mesh;
  /// The executable to write.
  std::string output = "a.out";
  /// Where to keep the generated C++ (empty: a temporary file, removed).
  std::string source;
  /// Stop after writing `source`.
  bool sourceOnly = false;
  /// Packed rows: the documents' length in tokens that the cost model and
  /// the simulator take for packed attention (0: one document a row); the
  /// length-weighted mean, E[len²] / E[len], of a corpus's documents.
  int64_t documentLength = 0;
  /// The runtime the executable links: "cpu" (oneDNN kernels, MPI
  /// collectives) or "cuda" (CUDA kernels, NCCL collectives; built where the
  /// CUDA toolkit is).
  std::string target = "cpu";
  /// Whether the executable uses MPI (mpirun, any rank count). Without it
  /// (cuda only) it runs as one process and needs no MPI library.
  bool mpi = true;
  /// The C++ compiler, an MPI wrapper (empty: the one the build found).
  std::string hostCompiler;
  /// Link the CPU runtime built with AddressSanitizer and
  /// UndefinedBehaviorSanitizer, and instrument the program the same way:
  /// the first report ends the run (cpu only).
  bool sanitize = false;
  /// The most the CPU kernels use: "all" (the best the machine has) or
  /// "avx2" (AVX-512 left out of the runtime's loops and oneDNN's GEMMs, so
  /// machines with and without it compute the same bits; cpu only). Empty:
  /// the environment's FSDP_MAX_CPU_ISA, else "all".
  std::string maxCpuIsa;
  /// When set, the host compiler's command line is printed here.
  llvm::raw_ostream *commandLog = nullptr;
  /// The program errors outside the IR name first ("fsdp-compile: error:
  /// ..."); none when empty.
  std::string programName;
};

/// What a compile made.
struct CompileResult {
  /// The ranks the program runs on (`mpirun -np`): its mesh's size, 1
  /// without one.
  int64_t worldSize = 1;
};

/// The whole of fsdp-compile: loads the input (its buffer goes into
/// `sourceMgr`, so that the diagnostics handler on `context` can quote it),
/// runs the pipeline `pipeline` describes, emits the C++ and builds the
/// executable against the runtime. Errors in the IR or the inputs are
/// diagnostics on `context`; the others (an option, a file, the host
/// compiler) are lines on `errors`, worded as fsdp-compile's flags
/// (`error: --tp must be >= 1, got -1`).
llvm::FailureOr<CompileResult> compileProgram(mlir::MLIRContext &context,
                                              llvm::SourceMgr &sourceMgr,
                                              const CompileOptions &options,
                                              const PipelineOptions &pipeline,
                                              llvm::raw_ostream &errors);

/// Compiles the C++ program in `source` with the host compiler and links it
/// against the runtime into `options.output`; errors go to `errors`.
llvm::LogicalResult linkProgram(llvm::StringRef source,
                                const CompileOptions &options,
                                llvm::raw_ostream &errors);

} // namespace fsdp

#endif // FSDP_COMPILER_H

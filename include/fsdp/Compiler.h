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
// pipeline that fsdp-compile runs, and print the per-rank program as C++.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_COMPILER_H
#define FSDP_COMPILER_H

#include "fsdp/Transforms/Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/LogicalResult.h"

#include <memory>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace llvm {
class raw_ostream;
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

} // namespace fsdp

#endif // FSDP_COMPILER_H

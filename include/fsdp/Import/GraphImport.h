//===- GraphImport.h - graph.json to nn dialect -----------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Reads the forward-graph format documented in docs/graph-format.md into a
// module holding `func.func @forward` of nn ops.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_IMPORT_GRAPHIMPORT_H
#define FSDP_IMPORT_GRAPHIMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace fsdp {

/// Imports the graph.json text `json` (read from `filename`, used in
/// diagnostics and locations). On error, emits a diagnostic naming the file,
/// node and field, and returns null. The nn and func dialects must be
/// loadable in `context`.
mlir::OwningOpRef<mlir::ModuleOp> importGraph(llvm::StringRef json,
                                              llvm::StringRef filename,
                                              mlir::MLIRContext *context);

/// Registers `--import-graph` (graph.json to MLIR) and `--param-table` (the
/// parameters of an imported module as a table) with mlir-translate.
void registerGraphTranslations();

} // namespace fsdp

#endif // FSDP_IMPORT_GRAPHIMPORT_H

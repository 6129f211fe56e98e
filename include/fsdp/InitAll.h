//===- InitAll.h - Register every fsdp-mlir dialect and pass ----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_INITALL_H
#define FSDP_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace fsdp {

/// Adds our dialects and the upstream ones our pipelines use to `registry`.
void registerAllDialects(mlir::DialectRegistry &registry);

/// Registers our passes and the upstream ones useful around them
/// (canonicalize, cse, symbol-dce, ...).
void registerAllPasses();

} // namespace fsdp

#endif // FSDP_INITALL_H

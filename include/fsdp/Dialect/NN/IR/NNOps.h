//===- NNOps.h - nn dialect operations --------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNOPS_H
#define FSDP_DIALECT_NN_IR_NNOPS_H

#include "fsdp/Dialect/NN/IR/NNDialect.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace fsdp::nn {
/// Checks an op's result types against its shape rule.
llvm::LogicalResult verifyShapeRule(mlir::Operation *op);
/// Creates op `name` on `operands` with `attributes` and the result types
/// its shape rule infers. When `name` has no shape rule, or the rule rejects
/// the operands (its error is emitted at `loc`), creates nothing and returns
/// null.
mlir::Operation *createWithShapeRule(mlir::OpBuilder &builder,
                                     mlir::Location loc,
                                     mlir::OperationName name,
                                     mlir::ValueRange operands,
                                     mlir::DictionaryAttr attributes);
} // namespace fsdp::nn

#include "fsdp/Dialect/NN/IR/NNInterfaces.h.inc"

#define GET_OP_CLASSES
#include "fsdp/Dialect/NN/IR/NNOps.h.inc"

#endif // FSDP_DIALECT_NN_IR_NNOPS_H

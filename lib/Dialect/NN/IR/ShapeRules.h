//===- ShapeRules.h - Helpers shared by the nn shape rules ------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef LIB_DIALECT_NN_IR_SHAPERULES_H
#define LIB_DIALECT_NN_IR_SHAPERULES_H

#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Traits.h"

namespace fsdp::nn::detail {

using namespace mlir;

/// Emits "'<op>' op <message>" at `loc` (when there is one) and fails.
template <typename OpTy, typename... Args>
LogicalResult reject(std::optional<Location> loc, Args &&...args) {
  return emitOptionalError(loc, "'", OpTy::getOperationName(), "' op ",
                           std::forward<Args>(args)...);
}

/// Requires `grad` to have the forward result type `expected`.
template <typename OpTy>
LogicalResult checkGrad(std::optional<Location> loc, Value grad,
                        Type expected) {
  if (grad.getType() == expected)
    return success();
  return reject<OpTy>(loc, "gradient ", grad.getType(),
                      " does not match the forward result ", expected);
}

/// The shard rule of an elementwise op (with trailing broadcast when
/// `broadcast`): the split carries over; a replicated operand that spans
/// the split dim is cut to the rank's block, one broadcast along it enters
/// whole.
FailureOr<ShardRule> elementwiseShardRule(Operation *op,
                                          ArrayRef<OperandShard> operands,
                                          bool broadcast);

/// Float operands of one op must share their element type.
template <typename OpTy>
LogicalResult sameElementType(std::optional<Location> loc, StringRef what,
                              Value a, Value b) {
  if (!b || tensorOf(a).getElementType() == tensorOf(b).getElementType())
    return success();
  return reject<OpTy>(loc, what, " element type ", tensorOf(b).getElementType(),
                      " differs from ", tensorOf(a).getElementType());
}

/// Requires `v` to be a scalar.
template <typename OpTy>
LogicalResult checkScalar(std::optional<Location> loc, StringRef what,
                          Value v) {
  if (tensorOf(v).getRank() == 0)
    return success();
  return reject<OpTy>(loc, what, " must be a scalar, got ", v.getType());
}

/// Maps `dim` in [-rank, rank) to [0, rank).
template <typename OpTy>
FailureOr<int64_t> normalizeDim(std::optional<Location> loc, int64_t dim,
                                int64_t rank) {
  if (dim < -rank || dim >= rank) {
    (void)reject<OpTy>(loc, "dim ", dim, " is out of range for rank ", rank);
    return failure();
  }
  return dim < 0 ? dim + rank : dim;
}

/// Result of an elementwise binary op with trailing-dimension broadcast.
template <typename OpTy>
LogicalResult inferBroadcast(std::optional<Location> loc, Value lhs, Value rhs,
                             SmallVectorImpl<Type> &results) {
  if (failed(sameElementType<OpTy>(loc, "rhs", lhs, rhs)))
    return failure();
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(tensorOf(lhs).getShape(),
                                          tensorOf(rhs).getShape(), shape))
    return reject<OpTy>(loc, "operands ", lhs.getType(), " and ", rhs.getType(),
                        " are not broadcast-compatible");
  results.push_back(
      RankedTensorType::get(shape, tensorOf(lhs).getElementType()));
  return success();
}

} // namespace fsdp::nn::detail

#endif // LIB_DIALECT_NN_IR_SHAPERULES_H

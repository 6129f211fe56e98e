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

/// The head of op `Op`'s shape rule, as NNOps.td's NN_ShapeRuleDeclaration
/// declares it: `context`, `loc`, `adaptor` and `results` are in scope.
#define NN_SHAPE_RULE(Op)                                                      \
  ::llvm::LogicalResult Op::inferTypes(                                        \
      ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,       \
      Op::Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &results)

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

// A backward op's rule runs its forward op's rule where it can (NNGradOps.cpp,
// NNMoE.cpp), so both report the same broken shape.

/// Forward op `FwdOp`'s adaptor on `operands` with the backward op's
/// attributes (its properties and its discardable attributes), which carry
/// the forward op's by name; `properties` holds them as `FwdOp`'s.
template <typename FwdOp, typename OpTy>
typename FwdOp::Adaptor forwardAdaptor(MLIRContext *context,
                                       ValueRange operands,
                                       typename OpTy::Adaptor adaptor,
                                       typename FwdOp::Properties &properties) {
  NamedAttrList attrs(cast_or_null<DictionaryAttr>(
      OpTy::getPropertiesAsAttr(context, adaptor.getProperties())));
  if (DictionaryAttr discardable = adaptor.getAttributes())
    attrs.append(discardable.getValue());
  DictionaryAttr all = attrs.getDictionary(context);
  FwdOp::populateDefaultProperties(
      OperationName(FwdOp::getOperationName(), context), properties);
  // A malformed attribute is the backward op's own verifier's to report.
  (void)FwdOp::setPropertiesFromAttr(properties, all,
                                     [] { return InFlightDiagnostic(); });
  return typename FwdOp::Adaptor(operands, all, properties);
}

/// Runs forward op `FwdOp`'s rule on `operands` with the backward op's
/// attributes and appends its result types to `results`.
template <typename FwdOp, typename OpTy>
LogicalResult forwardResults(MLIRContext *context, std::optional<Location> loc,
                             ValueRange operands,
                             typename OpTy::Adaptor adaptor,
                             SmallVectorImpl<Type> &results) {
  typename FwdOp::Properties properties;
  return FwdOp::inferTypes(
      context, loc,
      forwardAdaptor<FwdOp, OpTy>(context, operands, adaptor, properties),
      results);
}

/// The first result type of the forward op.
template <typename FwdOp, typename OpTy>
FailureOr<Type> forwardResult(MLIRContext *context, std::optional<Location> loc,
                              ValueRange operands,
                              typename OpTy::Adaptor adaptor) {
  SmallVector<Type> results;
  if (failed(forwardResults<FwdOp, OpTy>(context, loc, operands, adaptor,
                                         results)))
    return failure();
  return results.front();
}

/// The rule of a backward op whose `grad` is the gradient of forward op
/// `FwdOp`'s first result on `operands`: `grad` must have that result's type
/// (by the forward's rule, with the backward op's attributes); the results
/// are `gradients` (the types of the operands it differentiates).
template <typename FwdOp, typename OpTy>
LogicalResult gradientRule(MLIRContext *context, std::optional<Location> loc,
                           ValueRange operands, typename OpTy::Adaptor adaptor,
                           ArrayRef<Type> gradients,
                           SmallVectorImpl<Type> &results) {
  FailureOr<Type> forward =
      forwardResult<FwdOp, OpTy>(context, loc, operands, adaptor);
  if (failed(forward) ||
      failed(checkGrad<OpTy>(loc, adaptor.getGrad(), *forward)))
    return failure();
  results.append(gradients.begin(), gradients.end());
  return success();
}

} // namespace fsdp::nn::detail

#endif // LIB_DIALECT_NN_IR_SHAPERULES_H

//===- DistGradientRules.cpp - Reverse-mode rules of the dist ops ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// GradientOpInterface for the dist dialect, attached as external models so
// that the dist dialect does not depend on nn: each collective's gradient is
// its transpose (all_gather and reduce_scatter, all_slice and all_gather,
// copy and all_reduce are pairs). A gradient crosses ranks in the reduce
// dtype and comes back in its own.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/Gradient.h"

#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace fsdp;
using namespace fsdp::nn;

namespace {
/// `shape` with the element type of `like`.
RankedTensorType withElementsOf(Value like, RankedTensorType shape) {
  return RankedTensorType::get(shape.getShape(),
                               tensorOf(like).getElementType());
}

dist::ReductionKindAttr sumAttr(MLIRContext *context) {
  return dist::ReductionKindAttr::get(context, dist::ReductionKind::sum);
}

/// The result gradient of collective `op` when its input needs one; fails
/// on an asynchronous collective (differentiation comes before scheduling).
FailureOr<Value> collectiveGrad(dist::CollectiveOpInterface op,
                                GradientBuilder &grads) {
  if (op.isAsync())
    return op->emitOpError("in its asynchronous form has no gradient rule; "
                           "differentiate before scheduling");
  if (!grads.needsGrad(op.getInput()))
    return Value();
  return grads.grad(op->getResult(0));
}

/// Requires a sum reduction, the one whose transpose is a copy.
LogicalResult requireSum(Operation *op, dist::ReductionKind kind) {
  if (kind == dist::ReductionKind::sum)
    return success();
  return op->emitOpError("with a non-sum reduction has no gradient rule");
}

/// A rule written as `Rule(op, resultGrad, grads)`, run when the input
/// needs a gradient.
template <typename OpTy, LogicalResult (*Rule)(OpTy, Value, GradientBuilder &)>
struct CollectiveGradient
    : GradientOpInterface::ExternalModel<CollectiveGradient<OpTy, Rule>, OpTy> {
  LogicalResult buildGradient(Operation *op, GradientBuilder &grads) const {
    FailureOr<Value> dy = collectiveGrad(cast<OpTy>(op), grads);
    if (failed(dy))
      return failure();
    return *dy ? Rule(cast<OpTy>(op), *dy, grads) : success();
  }
};

/// all_gather's transpose: reduce_scatter (sum) along the same dim, or,
/// with `replicated_grad`, this rank's block of the whole gradient.
LogicalResult allGatherRule(dist::AllGatherOp op, Value dy,
                            GradientBuilder &grads) {
  if (const GradientBuilder::GatherHook &hook = grads.getGatherHook())
    if (!(dy = hook(op, dy)))
      return success();
  OpBuilder &b = grads.getBuilder();
  Value x = op.getInput();
  Type own = tensorOf(dy).getElementType();
  grads.noteCreated();
  if (op.getReplicatedGrad()) {
    grads.accumulate(x, dist::AllSliceOp::create(
                            b, grads.getLoc(), withElementsOf(dy, tensorOf(x)),
                            dy, op.getMeshAttr(), op.getMeshAxes(),
                            op.getGatherDimAttr()));
    return success();
  }
  Value g = grads.toReduce(dy);
  auto rs = dist::ReduceScatterOp::create(
      b, grads.getLoc(), withElementsOf(g, tensorOf(x)), g, op.getMeshAttr(),
      op.getMeshAxes(), sumAttr(b.getContext()), op.getGatherDimAttr());
  grads.accumulate(x, grads.castTo(rs.getResult(), own));
  return success();
}

LogicalResult reduceScatterRule(dist::ReduceScatterOp op, Value dy,
                                GradientBuilder &grads) {
  if (failed(requireSum(op, op.getReduction())))
    return failure();
  grads.noteCreated();
  grads.accumulate(
      op.getInput(),
      dist::AllGatherOp::create(grads.getBuilder(), grads.getLoc(),
                                withElementsOf(dy, op.getInput().getType()), dy,
                                op.getMeshAttr(), op.getMeshAxes(),
                                op.getScatterDimAttr()));
  return success();
}

/// Megatron's g: the reduced value is replicated and so is its gradient;
/// each rank's partial sum receives it unchanged.
LogicalResult allReduceRule(dist::AllReduceOp op, Value dy,
                            GradientBuilder &grads) {
  if (failed(requireSum(op, op.getReduction())))
    return failure();
  grads.accumulate(op.getInput(), dy);
  return success();
}

LogicalResult allToAllRule(dist::AllToAllOp op, Value dy,
                           GradientBuilder &grads) {
  grads.noteCreated();
  grads.accumulate(
      op.getInput(),
      dist::AllToAllOp::create(grads.getBuilder(), grads.getLoc(),
                               withElementsOf(dy, op.getInput().getType()), dy,
                               op.getMeshAttr(), op.getMeshAxes(),
                               op.getConcatDimAttr(), op.getSplitDimAttr()));
  return success();
}

LogicalResult permuteRule(dist::PermuteOp op, Value dy,
                          GradientBuilder &grads) {
  OpBuilder &b = grads.getBuilder();
  grads.noteCreated();
  grads.accumulate(
      op.getInput(),
      dist::PermuteOp::create(
          b, grads.getLoc(), dy.getType(), dy, op.getMeshAttr(),
          op.getMeshAxes(),
          b.getI64IntegerAttr(-static_cast<int64_t>(op.getOffset()))));
  return success();
}

/// Each rank kept its block of a replicated value: the value's gradient is
/// the blocks' gradients side by side.
struct AllSliceGradient
    : GradientOpInterface::ExternalModel<AllSliceGradient, dist::AllSliceOp> {
  LogicalResult buildGradient(Operation *op, GradientBuilder &grads) const {
    auto slice = cast<dist::AllSliceOp>(op);
    if (!grads.needsGrad(slice.getInput()))
      return success();
    Value dy = grads.grad(slice.getResult());
    grads.noteCreated();
    grads.accumulate(slice.getInput(),
                     dist::AllGatherOp::create(
                         grads.getBuilder(), grads.getLoc(),
                         withElementsOf(dy, slice.getInput().getType()), dy,
                         slice.getMeshAttr(), slice.getMeshAxes(),
                         slice.getSliceDimAttr()));
    return success();
  }
};

/// Megatron's f: the replicated input's gradient sums the ranks' parts.
struct CopyGradient
    : GradientOpInterface::ExternalModel<CopyGradient, dist::CopyOp> {
  LogicalResult buildGradient(Operation *op, GradientBuilder &grads) const {
    auto copy = cast<dist::CopyOp>(op);
    if (!grads.needsGrad(copy.getInput()))
      return success();
    Value dy = grads.grad(copy.getResult());
    Value g = grads.toReduce(dy);
    OpBuilder &b = grads.getBuilder();
    grads.noteCreated();
    auto ar = dist::AllReduceOp::create(b, grads.getLoc(), g.getType(), g,
                                        copy.getMeshAttr(), copy.getMeshAxes(),
                                        sumAttr(b.getContext()));
    grads.accumulate(
        copy.getInput(),
        grads.castTo(ar.getResult(), tensorOf(dy).getElementType()));
    return success();
  }
};
} // namespace

void fsdp::nn::registerDistGradientModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, dist::DistDialect *) {
    dist::AllGatherOp::attachInterface<
        CollectiveGradient<dist::AllGatherOp, allGatherRule>>(*context);
    dist::ReduceScatterOp::attachInterface<
        CollectiveGradient<dist::ReduceScatterOp, reduceScatterRule>>(*context);
    dist::AllReduceOp::attachInterface<
        CollectiveGradient<dist::AllReduceOp, allReduceRule>>(*context);
    dist::AllToAllOp::attachInterface<
        CollectiveGradient<dist::AllToAllOp, allToAllRule>>(*context);
    dist::PermuteOp::attachInterface<
        CollectiveGradient<dist::PermuteOp, permuteRule>>(*context);
    dist::AllSliceOp::attachInterface<AllSliceGradient>(*context);
    dist::CopyOp::attachInterface<CopyGradient>(*context);
  });
}

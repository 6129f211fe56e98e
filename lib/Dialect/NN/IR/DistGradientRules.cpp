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

/// Builds `OpTy` on `dy` with the shape of `input` and adds it to the
/// gradient of `input`.
template <typename OpTy, typename... Args>
LogicalResult transposeInto(GradientBuilder &grads, Value input, Value dy,
                            Args &&...args) {
  grads.noteCreated();
  grads.accumulate(input, OpTy::create(grads.getBuilder(), grads.getLoc(),
                                       withElementsOf(dy, tensorOf(input)), dy,
                                       std::forward<Args>(args)...));
  return success();
}

/// Requires a sum reduction, the one whose transpose is a copy.
LogicalResult requireSum(Operation *op, dist::ReductionKind kind) {
  if (kind == dist::ReductionKind::sum)
    return success();
  return op->emitOpError("with a non-sum reduction has no gradient rule");
}

/// A rule written as `Rule(op, resultGrad, grads)`, run when the op's
/// input needs a gradient. An asynchronous collective has none:
/// differentiation comes before scheduling.
template <typename OpTy, LogicalResult (*Rule)(OpTy, Value, GradientBuilder &)>
struct InputGradient
    : GradientOpInterface::ExternalModel<InputGradient<OpTy, Rule>, OpTy> {
  LogicalResult buildGradient(Operation *op, GradientBuilder &grads) const {
    if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op);
        collective && collective.isAsync())
      return op->emitOpError("in its asynchronous form has no gradient rule; "
                             "differentiate before scheduling");
    auto typed = cast<OpTy>(op);
    if (!grads.needsGrad(typed.getInput()))
      return success();
    return Rule(typed, grads.grad(op->getResult(0)), grads);
  }
};

/// all_gather's transpose: reduce_scatter (sum) along the same dim, or,
/// with `replicated_grad`, this rank's block of the whole gradient.
LogicalResult allGatherRule(dist::AllGatherOp op, Value dy,
                            GradientBuilder &grads) {
  if (const GradientBuilder::GatherHook &hook = grads.getGatherHook())
    if (!(dy = hook(op, dy)))
      return success();
  if (op.getReplicatedGrad())
    return transposeInto<dist::AllSliceOp>(grads, op.getInput(), dy,
                                           op.getMeshAttr(), op.getMeshAxes(),
                                           op.getGatherDimAttr());
  OpBuilder &b = grads.getBuilder();
  Value x = op.getInput();
  Type own = tensorOf(dy).getElementType();
  grads.noteCreated();
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
  return transposeInto<dist::AllGatherOp>(grads, op.getInput(), dy,
                                          op.getMeshAttr(), op.getMeshAxes(),
                                          op.getScatterDimAttr());
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
  return transposeInto<dist::AllToAllOp>(
      grads, op.getInput(), dy, op.getMeshAttr(), op.getMeshAxes(),
      op.getConcatDimAttr(), op.getSplitDimAttr());
}

/// Rows went out by send_counts and came in by recv_counts: their
/// gradients go back the same way, the counts swapped; rows that were not
/// sent get none.
LogicalResult allToAllVRule(dist::AllToAllVOp op, Value dy,
                            GradientBuilder &grads) {
  return transposeInto<dist::AllToAllVOp>(
      grads, op.getInput(), dy, op.getMeshAttr(), op.getMeshAxes(),
      op.getRecvCounts(), op.getSendCounts());
}

LogicalResult permuteRule(dist::PermuteOp op, Value dy,
                          GradientBuilder &grads) {
  return transposeInto<dist::PermuteOp>(
      grads, op.getInput(), dy, op.getMeshAttr(), op.getMeshAxes(),
      grads.getBuilder().getI64IntegerAttr(
          -static_cast<int64_t>(op.getOffset())));
}

/// Each rank kept its block of a replicated value: the value's gradient is
/// the blocks' gradients side by side.
LogicalResult allSliceRule(dist::AllSliceOp op, Value dy,
                           GradientBuilder &grads) {
  return transposeInto<dist::AllGatherOp>(grads, op.getInput(), dy,
                                          op.getMeshAttr(), op.getMeshAxes(),
                                          op.getSliceDimAttr());
}

/// Megatron's f: the replicated input's gradient sums the ranks' parts.
LogicalResult copyRule(dist::CopyOp op, Value dy, GradientBuilder &grads) {
  Value g = grads.toReduce(dy);
  OpBuilder &b = grads.getBuilder();
  grads.noteCreated();
  auto ar = dist::AllReduceOp::create(b, grads.getLoc(), g.getType(), g,
                                      op.getMeshAttr(), op.getMeshAxes(),
                                      sumAttr(b.getContext()));
  grads.accumulate(op.getInput(),
                   grads.castTo(ar.getResult(), tensorOf(dy).getElementType()));
  return success();
}
} // namespace

/// Attaches `Rule` to `OpTy` as its GradientOpInterface.
template <typename OpTy, LogicalResult (*Rule)(OpTy, Value, GradientBuilder &)>
static void attach(MLIRContext *context) {
  OpTy::template attachInterface<InputGradient<OpTy, Rule>>(*context);
}

void fsdp::nn::registerDistGradientModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *context, dist::DistDialect *) {
    attach<dist::AllGatherOp, allGatherRule>(context);
    attach<dist::ReduceScatterOp, reduceScatterRule>(context);
    attach<dist::AllReduceOp, allReduceRule>(context);
    attach<dist::AllToAllOp, allToAllRule>(context);
    attach<dist::AllToAllVOp, allToAllVRule>(context);
    attach<dist::PermuteOp, permuteRule>(context);
    attach<dist::AllSliceOp, allSliceRule>(context);
    attach<dist::CopyOp, copyRule>(context);
  });
}

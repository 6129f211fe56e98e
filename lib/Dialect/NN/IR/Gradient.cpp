//===- Gradient.cpp - The reverse-mode driver and its builder -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/Gradient.h"

#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace fsdp::nn;

void GradientBuilder::accumulate(Value v, Value g) {
  if (!g || !needsGrad(v))
    return;
  Value &slot = grads[v];
  slot = slot ? make<AddOp>(slot, g).getResult() : g;
}

Value ShapeRuleBuilder::fill(double v, RankedTensorType type) {
  noteCreated();
  return FillOp::create(builder, loc, v, type).getResult();
}

Value ShapeRuleBuilder::reshape(Value x, ArrayRef<int64_t> shape) {
  if (tensorOf(x).getShape() == shape)
    return x;
  return make<ReshapeOp>(x, shape).getResult();
}

Value ShapeRuleBuilder::sumTo(Value g, Type type) {
  if (!g || g.getType() == type)
    return g;
  return make<ReduceSumToOp>(g, cast<RankedTensorType>(type).getShape())
      .getResult();
}

Value ShapeRuleBuilder::rows(Value x) {
  RankedTensorType t = tensorOf(x);
  int64_t last = t.getShape().back();
  return reshape(x, {t.getNumElements() / last, last});
}

Value ShapeRuleBuilder::castTo(Value x, Type element) {
  if (!x || tensorOf(x).getElementType() == element)
    return x;
  return make<CastOp>(x, element).getResult();
}

namespace {

/// The gradient `g` of one side of `combine` when `g` reached the attention
/// only through it: the side's (result, logsumexp) and their gradients are
/// results of the same attention_combine_grad.
AttentionCombineGradOp combinedSide(AttentionGradOp g, unsigned &side) {
  auto combine = g.getGrad().getDefiningOp<AttentionCombineGradOp>();
  if (!combine || !g.getLogsumexpGrad() ||
      g.getLogsumexpGrad().getDefiningOp() != combine.getOperation())
    return {};
  unsigned result = cast<OpResult>(g.getGrad()).getResultNumber();
  unsigned stats = cast<OpResult>(g.getLogsumexpGrad()).getResultNumber();
  side = result / 2;
  if (result % 2 != 0 || stats != result + 1)
    return {};
  Value output = side ? combine.getResultB() : combine.getResultA();
  Value lse = side ? combine.getLogsumexpB() : combine.getLogsumexpA();
  if (g.getOutput() != output || g.getLogsumexp() != lse)
    return {};
  return combine;
}

/// Ring attention's backward from the merged attention. A partial attention
/// whose gradient reached it only through attention_combine has, block by
/// block, the gradient the merged result would give it: with
/// `w = exp(lse_part − lse)`, `exp(S − lse_part) · w = exp(S − lse)`, and the
/// combine's `w · (dLSE + grad · (result_part − result))` cancels the part's
/// own row sums, leaving `P · (dP − rowsum(grad ∘ result) + dLSE)` over the
/// merged statistics. So every step's attention_grad reads the merged result,
/// statistics and gradients (those of the last combine), the combines'
/// gradients die, and the backward keeps no step's partial result: the
/// layer's saved attention is one output and one logsumexp, as without a
/// ring (flash-attention's ring backward).
void mergeCombinedAttentionGradients(ArrayRef<Operation *> forward) {
  llvm::SetVector<Operation *> folded;
  for (Operation *op : forward) {
    auto attention = dyn_cast<AttentionOp>(op);
    if (!attention)
      continue;
    for (Operation *user : attention.getResult().getUsers()) {
      auto g = dyn_cast<AttentionGradOp>(user);
      if (!g || g.getOutput() != attention.getResult())
        continue;
      unsigned side = 0;
      while (AttentionCombineGradOp combine = combinedSide(g, side)) {
        g.getOutputMutable().assign(combine.getResult());
        g.getLogsumexpMutable().assign(combine.getLogsumexp());
        g.getGradMutable().assign(combine.getGrad());
        if (Value dLse = combine.getLogsumexpGrad())
          g.getLogsumexpGradMutable().assign(dLse);
        else
          g.getLogsumexpGradMutable().clear();
        folded.insert(combine);
      }
    }
  }
  // A combine's gradient feeds the one before it, which the backward
  // builds later: erase the last first.
  SmallVector<Operation *> dead = folded.takeVector();
  llvm::sort(dead,
             [](Operation *a, Operation *b) { return b->isBeforeInBlock(a); });
  for (Operation *combine : dead)
    if (combine->use_empty())
      combine->erase();
}

} // namespace

LogicalResult fsdp::nn::differentiate(ArrayRef<Operation *> forward,
                                      GradientBuilder &grads) {
  for (Operation *op : llvm::reverse(forward)) {
    // An op none of whose results has a gradient contributes nothing.
    if (llvm::none_of(op->getResults(),
                      [&](Value r) { return bool(grads.grad(r)); }))
      continue;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError("has no gradient rule");
    grads.setLoc(op->getLoc());
    if (failed(rule.buildGradient(grads)))
      return failure();
  }
  mergeCombinedAttentionGradients(forward);
  return success();
}

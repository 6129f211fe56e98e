//===- NNGradientRules.cpp - Reverse-mode rules of the nn ops -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// GradientOpInterface: for each op, the gradients of its operands from the
// gradients of its results, built with the ops' generated builders.
// `differentiate` (Gradient.cpp) calls a rule only when some result has a
// gradient.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/Gradient.h"

using namespace mlir;
using namespace fsdp::nn;

namespace {
/// `dim` in [0, rank).
int64_t positiveDim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

/// The gradient of the part [start, start + size) of `dim` of a tensor of
/// type `whole`: `g` padded with zeros around it.
Value padInto(GradientBuilder &grads, Value g, RankedTensorType whole,
              int64_t dim, int64_t start, int64_t size) {
  return grads.make<PadOp>(g, dim, start, whole.getDimSize(dim) - start - size)
      .getResult();
}

/// Adds the results of backward op `g` to the gradients of `operands`:
/// result i is the gradient of operand i.
LogicalResult accumulateResults(GradientBuilder &grads, Operation *g,
                                ValueRange operands) {
  for (auto [operand, result] : llvm::zip(operands, g->getResults()))
    grads.accumulate(operand, result);
  return success();
}
} // namespace

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getTable()))
    grads.accumulate(getTable(),
                     grads.make<EmbeddingGradOp>(
                         getIds(), grads.grad(getResult()), getShardIndex(),
                         getTable().getType().getDimSize(0)));
  return success();
}

LogicalResult LinearOp::buildGradient(GradientBuilder &grads) {
  Value x = getInput(), w = getWeight(), bias = getBias();
  Value dy = grads.grad(getResult());
  if (grads.needsGrad(x))
    grads.accumulate(x, grads.make<MatmulOp>(dy, w, /*transpose_a=*/false,
                                             /*transpose_b=*/false));
  if (grads.needsGrad(w))
    grads.accumulate(w, grads.make<MatmulOp>(grads.rows(dy), grads.rows(x),
                                             /*transpose_a=*/true,
                                             /*transpose_b=*/false));
  if (grads.needsGrad(bias))
    grads.accumulate(bias, grads.sumTo(dy, bias.getType()));
  return success();
}

/// C = A · op(B): dA = dC · op(B)ᵀ, d op(B) = Aᵀ · dC, for `nn.matmul`
/// (over all rows) and `nn.batch_matmul` (per batch).
template <typename OpTy>
static LogicalResult matmulGradient(OpTy op, GradientBuilder &grads,
                                    bool flatten) {
  if (op.getTransposeA())
    return op.emitOpError("with transpose_a has no gradient rule yet");
  Value a = op.getLhs(), b = op.getRhs(), dy = grads.grad(op.getResult());
  bool tb = op.getTransposeB();
  if (grads.needsGrad(a))
    grads.accumulate(a, grads.make<OpTy>(dy, b, /*transpose_a=*/false,
                                         /*transpose_b=*/!tb));
  if (grads.needsGrad(b)) {
    Value a2 = flatten ? grads.rows(a) : a;
    Value dy2 = flatten ? grads.rows(dy) : dy;
    grads.accumulate(b, tb ? grads.make<OpTy>(dy2, a2, /*transpose_a=*/true,
                                              /*transpose_b=*/false)
                           : grads.make<OpTy>(a2, dy2, /*transpose_a=*/true,
                                              /*transpose_b=*/false));
  }
  return success();
}

LogicalResult MatmulOp::buildGradient(GradientBuilder &grads) {
  return matmulGradient(*this, grads, /*flatten=*/true);
}

LogicalResult BatchMatmulOp::buildGradient(GradientBuilder &grads) {
  return matmulGradient(*this, grads, /*flatten=*/false);
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult AddOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  grads.accumulate(getLhs(), grads.sumTo(dy, getLhs().getType()));
  grads.accumulate(getRhs(), grads.sumTo(dy, getRhs().getType()));
  return success();
}

LogicalResult SubOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  grads.accumulate(getLhs(), grads.sumTo(dy, getLhs().getType()));
  if (grads.needsGrad(getRhs()))
    grads.accumulate(getRhs(),
                     grads.make<NegOp>(grads.sumTo(dy, getRhs().getType())));
  return success();
}

LogicalResult MulOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  if (grads.needsGrad(getLhs()))
    grads.accumulate(getLhs(), grads.sumTo(grads.make<MulOp>(dy, getRhs()),
                                           getLhs().getType()));
  if (grads.needsGrad(getRhs()))
    grads.accumulate(getRhs(), grads.sumTo(grads.make<MulOp>(dy, getLhs()),
                                           getRhs().getType()));
  return success();
}

LogicalResult NegOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(), grads.make<NegOp>(grads.grad(getResult())));
  return success();
}

LogicalResult ScaleOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.make<ScaleOp>(grads.grad(getResult()), getFactor()));
  return success();
}

LogicalResult GeluOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.make<GeluGradOp>(getInput(), grads.grad(getResult()),
                                            getApproximate()));
  return success();
}

LogicalResult CastOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.castTo(grads.grad(getResult()),
                                  getInput().getType().getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization, rotary embedding, attention, softmax
//===----------------------------------------------------------------------===//

LogicalResult RMSNormOp::buildGradient(GradientBuilder &grads) {
  auto g = grads.make<RMSNormGradOp>(getInput(), getWeight(),
                                     grads.grad(getResult()), getEps());
  return accumulateResults(grads, g, {getInput(), getWeight()});
}

LogicalResult LayerNormOp::buildGradient(GradientBuilder &grads) {
  auto g = grads.make<LayerNormGradOp>(getInput(), getWeight(),
                                       grads.grad(getResult()), getEps());
  return accumulateResults(grads, g, {getInput(), getWeight(), getBias()});
}

LogicalResult RotaryOp::buildGradient(GradientBuilder &grads) {
  // A rotation's transpose is the inverse rotation.
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.make<RotaryOp>(
                         grads.grad(getResult()), getPositions(), getTheta(),
                         /*inverse=*/!getInverse(), getInvFreqAttr(),
                         getAttentionScaling()));
  return success();
}

LogicalResult AttentionOp::buildGradient(GradientBuilder &grads) {
  // The statistics have a gradient when attention_combine read them (ring
  // attention).
  auto g = grads.make<AttentionGradOp>(
      getQuery(), getKey(), getValue(), getResult(), getLogsumexp(),
      grads.grad(getResult()), grads.grad(getLogsumexp()), getQueryPositions(),
      getKeyPositions(), getDocumentPositions(), getCausal(),
      getSlidingWindowAttr(), getScaleAttr());
  return accumulateResults(grads, g, {getQuery(), getKey(), getValue()});
}

LogicalResult AttentionCombineOp::buildGradient(GradientBuilder &grads) {
  auto g = grads.make<AttentionCombineGradOp>(
      getResultA(), getLogsumexpA(), getResultB(), getLogsumexpB(), getResult(),
      getLogsumexp(), grads.grad(getResult()), grads.grad(getLogsumexp()));
  return accumulateResults(
      grads, g, {getResultA(), getLogsumexpA(), getResultB(), getLogsumexpB()});
}

LogicalResult SoftmaxOp::buildGradient(GradientBuilder &grads) {
  if (grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.make<SoftmaxGradOp>(
                         getResult(), grads.grad(getResult()), getDim()));
  return success();
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyPartialOp::buildGradient(GradientBuilder &grads) {
  // The shift gets no gradient: it cancels out of the loss.
  if (!grads.needsGrad(getLogits()))
    return success();
  auto perPosition = tensorOf(getSumExp());
  Value dSum = grads.grad(getSumExp());
  Value dTarget = grads.grad(getTarget());
  if (!dSum)
    dSum = grads.fill(0.0, perPosition);
  if (!dTarget)
    dTarget = grads.fill(0.0, perPosition);
  grads.accumulate(getLogits(),
                   grads.make<CrossEntropyPartialGradOp>(
                       getLogits(), getLabels(), getShift(), getShardIndex(),
                       dSum, dTarget, getIgnoreIndex(), getNumClassesAttr()));
  return success();
}

LogicalResult CrossEntropyCombineOp::buildGradient(GradientBuilder &grads) {
  auto g = grads.make<CrossEntropyCombineGradOp>(
      getSumExp(), getLabels(), grads.grad(getResult()), getIgnoreIndex(),
      getReduction());
  return accumulateResults(grads, g, {getSumExp(), getTarget()});
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradient(GradientBuilder &grads) {
  grads.accumulate(getInput(), grads.reshape(grads.grad(getResult()),
                                             getInput().getType().getShape()));
  return success();
}

LogicalResult TransposeOp::buildGradient(GradientBuilder &grads) {
  if (!grads.needsGrad(getInput()))
    return success();
  SmallVector<int64_t> inverse(getPerm().size());
  for (auto [i, p] : llvm::enumerate(getPerm()))
    inverse[p] = i;
  grads.accumulate(getInput(),
                   grads.make<TransposeOp>(grads.grad(getResult()), inverse));
  return success();
}

LogicalResult SliceOp::buildGradient(GradientBuilder &grads) {
  if (!grads.needsGrad(getInput()))
    return success();
  RankedTensorType in = getInput().getType();
  grads.accumulate(getInput(), padInto(grads, grads.grad(getResult()), in,
                                       positiveDim(getDim(), in.getRank()),
                                       static_cast<int64_t>(getStart()),
                                       static_cast<int64_t>(getSize())));
  return success();
}

LogicalResult SplitOp::buildGradient(GradientBuilder &grads) {
  if (!grads.needsGrad(getInput()))
    return success();
  RankedTensorType in = getInput().getType();
  int64_t dim = positiveDim(getDim(), in.getRank());
  // Every part has a gradient (an FSDP unit's parameters): one concat.
  SmallVector<Value> parts;
  for (Value result : getResults())
    if (Value g = grads.grad(result))
      parts.push_back(g);
  if (parts.size() == getNumResults() && parts.size() > 1) {
    grads.accumulate(getInput(), grads.make<ConcatOp>(parts, dim));
    return success();
  }
  int64_t start = 0;
  for (auto [result, size] : llvm::zip(getResults(), getSizes())) {
    if (Value g = grads.grad(result))
      grads.accumulate(getInput(), padInto(grads, g, in, dim, start, size));
    start += size;
  }
  return success();
}

LogicalResult ConcatOp::buildGradient(GradientBuilder &grads) {
  int64_t dim = positiveDim(getDim(), tensorOf(getResult()).getRank());
  Value dy = grads.grad(getResult());
  int64_t start = 0;
  for (Value input : getInputs()) {
    int64_t size = tensorOf(input).getDimSize(dim);
    if (grads.needsGrad(input))
      grads.accumulate(input, grads.make<SliceOp>(dy, dim, start, size));
    start += size;
  }
  return success();
}

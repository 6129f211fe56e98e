//===- Gradient.cpp - The reverse-mode driver and its builder -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/Gradient.h"

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
  return success();
}

//===- NNTrainOps.cpp - Shape rules of the training-step ops --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

using namespace mlir;
using namespace fsdp::nn;
using namespace fsdp::nn::detail;

namespace {
/// Requires every state operand to have the parameter's type and the
/// gradient its shape.
template <typename OpTy>
LogicalResult checkUpdate(std::optional<Location> loc, Value param, Value grad,
                          ArrayRef<std::pair<StringRef, Value>> state,
                          Value step, Value scale, Value lrScale) {
  if (tensorOf(grad).getShape() != tensorOf(param).getShape())
    return reject<OpTy>(loc, "gradient ", grad.getType(),
                        " does not match the parameter ", param.getType());
  for (auto [name, value] : state)
    if (value.getType() != param.getType())
      return reject<OpTy>(loc, name, " ", value.getType(),
                          " does not match the parameter ", param.getType());
  return failure(
      failed(checkScalar<OpTy>(loc, "step", step)) ||
      failed(checkScalar<OpTy>(loc, "grad_scale", scale)) ||
      (lrScale && failed(checkScalar<OpTy>(loc, "lr_scale", lrScale))));
}
} // namespace

NN_SHAPE_RULE(FillOp) {
  Type dtype = adaptor.getDtype();
  if (!dtype.isF32() && !dtype.isBF16() && !dtype.isF16())
    return reject<FillOp>(loc, "dtype must be f32, bf16 or f16, got ", dtype);
  for (int64_t d : adaptor.getShape())
    if (d < 1)
      return reject<FillOp>(loc, "shape entries must be >= 1, got ", d);
  results.push_back(RankedTensorType::get(adaptor.getShape(), dtype));
  return success();
}

NN_SHAPE_RULE(ClipCoefficientOp) {
  if (failed(checkScalar<ClipCoefficientOp>(loc, "sum_of_squares",
                                            adaptor.getSumOfSquares())))
    return failure();
  if (!(adaptor.getMaxNorm().convertToDouble() > 0.0))
    return reject<ClipCoefficientOp>(loc, "max_norm must be > 0");
  results.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

NN_SHAPE_RULE(LrScheduleOp) {
  if (failed(checkScalar<LrScheduleOp>(loc, "step", adaptor.getStep())))
    return failure();
  int64_t warmup = adaptor.getWarmupSteps(), total = adaptor.getTotalSteps();
  double minRatio = adaptor.getMinRatio().convertToDouble();
  if (warmup < 0)
    return reject<LrScheduleOp>(loc, "warmup_steps must be >= 0, got ", warmup);
  if (adaptor.getSchedule() != LrSchedule::constant && total <= warmup)
    return reject<LrScheduleOp>(loc, "a decaying schedule needs total_steps (",
                                total, ") > warmup_steps (", warmup, ")");
  if (!(minRatio >= 0.0 && minRatio <= 1.0))
    return reject<LrScheduleOp>(loc, "min_ratio must be in [0, 1], got ",
                                minRatio);
  results.push_back(RankedTensorType::get({}, Float32Type::get(context)));
  return success();
}

NN_SHAPE_RULE(AdamWOp) {
  if (failed(checkUpdate<AdamWOp>(loc, adaptor.getParam(), adaptor.getGrad(),
                                  {{"exp_avg", adaptor.getExpAvg()},
                                   {"exp_avg_sq", adaptor.getExpAvgSq()}},
                                  adaptor.getStep(), adaptor.getGradScale(),
                                  adaptor.getLrScale())))
    return failure();
  Type param = adaptor.getParam().getType();
  results.append({param, param, param});
  return success();
}

NN_SHAPE_RULE(SGDOp) {
  if (failed(checkUpdate<SGDOp>(
          loc, adaptor.getParam(), adaptor.getGrad(),
          {{"momentum_buffer", adaptor.getMomentumBuffer()}}, adaptor.getStep(),
          adaptor.getGradScale(), adaptor.getLrScale())))
    return failure();
  Type param = adaptor.getParam().getType();
  results.append({param, param});
  return success();
}

// The new parameter first, then the state in operand order.
OpOperand &AdamWOp::getUpdatedOperand(unsigned result) {
  return result == 0   ? getParamMutable()
         : result == 1 ? getExpAvgMutable()
                       : getExpAvgSqMutable();
}

OpOperand &SGDOp::getUpdatedOperand(unsigned result) {
  return result == 0 ? getParamMutable() : getMomentumBufferMutable();
}

// The placement copies keep the type.
NN_SHAPE_RULE(ToDeviceOp) {
  results.push_back(adaptor.getInput().getType());
  return success();
}

NN_SHAPE_RULE(ToHostOp) {
  results.push_back(adaptor.getInput().getType());
  return success();
}

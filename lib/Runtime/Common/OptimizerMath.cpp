//===- OptimizerMath.cpp - The optimizer's arithmetic on the host ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// AdamW follows torch.optim's implementation operation by operation in f32,
// vectorized; SGD computes each element in double and stores f32; the
// squared sum adds each block in double, in independent lanes.
//
//===----------------------------------------------------------------------===//

#include "OptimizerMath.h"

#include "Float.h"

#include <cmath>

using namespace fsdp::rt;
using namespace fsdp::rt::optimizer;

namespace {
/// Elements converted to f32 at a time.
constexpr int64_t kConvert = 1024;

/// Calls fn(b, len, g) over elements [begin, end) of the gradient `grad` in
/// runs of at most kConvert, g the run's values in f32 (converted into a
/// scratch buffer when the gradient is bf16/f16).
template <typename Fn>
void gradientRuns(fsdp_rt_dtype gradDtype, const void *grad, int64_t begin,
                  int64_t end, Fn &&fn) {
  float scratch[kConvert];
  for (int64_t b = begin; b < end; b += kConvert) {
    int64_t len = std::min(kConvert, end - b);
    const float *g = static_cast<const float *>(grad) + b;
    if (gradDtype != FSDP_RT_F32) {
      toFloat(gradDtype, static_cast<const uint16_t *>(grad) + b, len, scratch);
      g = scratch;
    }
    fn(b, len, g);
  }
}

/// Σ x² over `n` elements in double, in independent lanes.
FSDP_VECTORIZE double sumSquaresF32(const float *x, int64_t n) {
  constexpr int64_t lanes = 8;
  double acc[lanes] = {};
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (int64_t l = 0; l < lanes; ++l)
      acc[l] += double(x[i + l]) * x[i + l];
  for (; i < n; ++i)
    acc[0] += double(x[i]) * x[i];
  double sum = 0;
  for (double a : acc)
    sum += a;
  return sum;
}

/// torch.optim.AdamW's update of elements [0, n), in f32, from (param, m,
/// v) to (newParam, newM, newV).
FSDP_VECTORIZE void adamwBlock(const float *param, const float *m,
                               const float *v, const float *g, float *newParam,
                               float *newM, float *newV, int64_t n,
                               AdamWCoefficients c) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * c.gradScale;
    float p = param[i] * c.decay;
    float mi = m[i] + (gi - m[i]) * (1.0f - c.beta1);
    float vi = v[i] * c.beta2 + (1.0f - c.beta2) * gi * gi;
    float denom = std::sqrt(vi) / c.correction2Sqrt + c.eps;
    newParam[i] = p - c.stepSize * (mi / denom);
    newM[i] = mi;
    newV[i] = vi;
  }
}
} // namespace

AdamWCoefficients
fsdp::rt::optimizer::adamwCoefficients(double lr, double beta1, double beta2,
                                       double eps, double weightDecay,
                                       double step, float gradScale) {
  AdamWCoefficients c;
  c.decay = float(1.0 - lr * weightDecay);
  c.beta1 = float(beta1);
  c.beta2 = float(beta2);
  c.stepSize = float(lr / (1.0 - std::pow(beta1, step)));
  c.correction2Sqrt = float(std::sqrt(1.0 - std::pow(beta2, step)));
  c.eps = float(eps);
  c.gradScale = gradScale;
  return c;
}

void fsdp::rt::optimizer::adamwRange(const fsdp_rt_adamw_tensor &x,
                                     fsdp_rt_dtype gradDtype, int64_t begin,
                                     int64_t end, const AdamWCoefficients &c) {
  gradientRuns(gradDtype, x.grad, begin, end,
               [&](int64_t b, int64_t len, const float *g) {
                 adamwBlock(x.param + b, x.exp_avg + b, x.exp_avg_sq + b, g,
                            x.new_param + b, x.new_exp_avg + b,
                            x.new_exp_avg_sq + b, len, c);
               });
}

std::vector<std::pair<int64_t, int64_t>>
fsdp::rt::optimizer::adamwPieces(int64_t count,
                                 const fsdp_rt_adamw_tensor *tensors) {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (int64_t t = 0; t < count; ++t)
    for (int64_t b = 0; b < tensors[t].numel; b += kAdamWPiece)
      pieces.emplace_back(t, b);
  return pieces;
}

double fsdp::rt::optimizer::sumSquaresBlock(fsdp_rt_dtype dtype, const void *x,
                                            int64_t numel, int64_t b) {
  int64_t begin = b * kSquaresBlock;
  int64_t len = std::min(kSquaresBlock, numel - begin);
  if (dtype == FSDP_RT_F32)
    return sumSquaresF32(static_cast<const float *>(x) + begin, len);
  thread_local std::vector<float> scratch;
  scratch.resize(size_t(len));
  toFloat(dtype, static_cast<const uint16_t *>(x) + begin, len, scratch.data());
  return sumSquaresF32(scratch.data(), len);
}

void fsdp::rt::optimizer::sgdRange(float *param, float *momentumBuffer,
                                   fsdp_rt_dtype gradDtype, const void *grad,
                                   int64_t begin, int64_t end,
                                   const SgdCoefficients &c) {
  gradientRuns(gradDtype, grad, begin, end,
               [&](int64_t b, int64_t len, const float *g) {
                 for (int64_t i = 0; i < len; ++i) {
                   float &p = param[b + i];
                   double gi = c.gradScale * g[i] + c.weightDecay * p;
                   if (c.momentum != 0.0) {
                     float &buffer = momentumBuffer[b + i];
                     gi = c.firstStep ? gi : c.momentum * buffer + gi;
                     buffer = float(gi);
                   }
                   p = float(p - c.lr * gi);
                 }
               });
}

//===- Optimizer.cpp - Gradient norm, AdamW and SGD -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The updates follow torch.optim's single-tensor implementations operation by
// operation; each element is computed in double and stored as f32, so the
// only rounding is that of the f32 state between steps.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>

using namespace fsdp::rt;

void fsdp_rt_sum_squares(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                         int64_t numel, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  FloatInput fx(dtype, x, numel);
  const float *px = fx.get();
  double sum = 0;
  for (int64_t i = 0; i < numel; ++i)
    sum += double(px[i]) * px[i];
  out[0] = float(sum);
}

void fsdp_rt_adamw(fsdp_rt_stream, float *param, float *exp_avg,
                   float *exp_avg_sq, fsdp_rt_dtype grad_dtype,
                   const void *grad, int64_t numel, double lr, double beta1,
                   double beta2, double eps, double weight_decay, int64_t step,
                   double grad_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  FloatInput fg(grad_dtype, grad, numel);
  const float *g = fg.get();
  double decay = 1.0 - lr * weight_decay;
  double stepSize = lr / (1.0 - std::pow(beta1, double(step)));
  double correction2Sqrt = std::sqrt(1.0 - std::pow(beta2, double(step)));
  for (int64_t i = 0; i < numel; ++i) {
    double gi = grad_scale * g[i];
    double m = beta1 * exp_avg[i] + (1.0 - beta1) * gi;
    double v = beta2 * exp_avg_sq[i] + (1.0 - beta2) * gi * gi;
    double denom = std::sqrt(v) / correction2Sqrt + eps;
    param[i] = float(param[i] * decay - stepSize * m / denom);
    exp_avg[i] = float(m);
    exp_avg_sq[i] = float(v);
  }
}

void fsdp_rt_sgd(fsdp_rt_stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay, int64_t step,
                 double grad_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  FloatInput fg(grad_dtype, grad, numel);
  const float *g = fg.get();
  for (int64_t i = 0; i < numel; ++i) {
    double gi = grad_scale * g[i] + weight_decay * param[i];
    if (momentum != 0.0) {
      gi = step == 1 ? gi : momentum * momentum_buffer[i] + gi;
      momentum_buffer[i] = float(gi);
    }
    param[i] = float(param[i] - lr * gi);
  }
}

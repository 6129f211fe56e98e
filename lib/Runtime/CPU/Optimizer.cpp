//===- Optimizer.cpp - Gradient norm, AdamW and SGD -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The optimizer's arithmetic is shared with the host layer's offloaded
// optimizer (Common/OptimizerMath.h); here it runs on the OpenMP threads.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "../Common/LrSchedule.h"
#include "../Common/OptimizerMath.h"

#include <algorithm>
#include <cmath>
#include <functional>

using namespace fsdp::rt;

namespace {
/// parallelFor as the shared optimizer arithmetic takes it.
void optimizerThreads(int64_t n,
                      const std::function<void(int64_t, int64_t)> &fn) {
  parallelFor(n, 1, fn);
}
} // namespace

void fsdp_rt_sum_squares(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                         int64_t numel, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  out[0] = optimizer::sumSquares(optimizerThreads, dtype, x, numel);
}

void fsdp_rt_adamw(fsdp_rt_stream, int64_t count,
                   const fsdp_rt_adamw_tensor *tensors,
                   fsdp_rt_dtype grad_dtype, double lr, double beta1,
                   double beta2, double eps, double weight_decay,
                   const float *step_count, const float *grad_scale,
                   const float *lr_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  optimizer::adamw(optimizerThreads, count, tensors, grad_dtype,
                   optimizer::adamwCoefficients(
                       optimizer::scaledLr(lr, lr_scale), beta1, beta2, eps,
                       weight_decay, step_count[0], grad_scale[0]));
}

void fsdp_rt_sgd(fsdp_rt_stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay,
                 const float *step, const float *grad_scale,
                 const float *lr_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  optimizer::sgd(optimizerThreads, param, momentum_buffer, grad_dtype, grad,
                 numel,
                 {optimizer::scaledLr(lr, lr_scale), momentum, weight_decay,
                  grad_scale[0], step[0] == 1.0f});
}

void fsdp_rt_lr_schedule(fsdp_rt_stream, const float *step,
                         fsdp_rt_lr_schedule_kind schedule,
                         int64_t warmup_steps, int64_t total_steps,
                         double min_ratio, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  out[0] = float(lrScheduleFactor(schedule, step[0], double(warmup_steps),
                                  double(total_steps), min_ratio));
}

void fsdp_rt_count_labels(fsdp_rt_stream, fsdp_rt_dtype labels_dtype,
                          const void *labels, int64_t numel,
                          int64_t ignore_index, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  int64_t count = 0;
  for (int64_t i = 0; i < numel; ++i)
    count += loadIndex(labels_dtype, labels, i) != ignore_index;
  out[0] = float(count);
}

void fsdp_rt_clip_coefficient(fsdp_rt_stream, const float *sum_of_squares,
                              double max_norm, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  double norm = std::sqrt(double(sum_of_squares[0]));
  out[0] = float(std::min(1.0, max_norm / (norm + 1e-6)));
}

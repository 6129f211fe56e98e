//===- Optimizer.cu - Gradient norm, clipping, AdamW and SGD --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Element by element as the CPU backend computes them: AdamW in f32,
// operation by operation as torch.optim does, SGD in double stored as f32.
// `grad_scale` and the step count are read by the kernels from device
// memory, so an update never waits for the host and a step's launches are
// the same at every step (what a CUDA graph replays). AdamW runs as the
// multi-tensor kernel of AdamWMulti.cuh, one launch per table of tensors. The
// squared-gradient sum adds fixed chunks in double (a block reduction per
// chunk, then the chunks by one block), so its bits do not depend on
// scheduling.
//
//===----------------------------------------------------------------------===//

#include "../Common/LrSchedule.h"
#include "AdamWMulti.cuh"
#include "Internal.cuh"

#include <cmath>

using namespace fsdp::rt::cuda;

namespace {
/// Elements per chunk of the squared-gradient sum.
constexpr int64_t kSquaresChunk = 1 << 16;
constexpr int kReduceThreads = 1024;

/// partial[c] = Σ x² over chunk c, in double.
template <typename E>
__global__ void sumSquaresChunkKernel(const typename E::T *x, int64_t n,
                                      int64_t chunks, double *partial) {
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    int64_t end = (c + 1) * kSquaresChunk < n ? (c + 1) * kSquaresChunk : n;
    double sum = 0;
    for (int64_t i = c * kSquaresChunk + threadIdx.x; i < end;
         i += blockDim.x) {
      double v = E::load(x, i);
      sum += v * v;
    }
    sum = blockReduce(sum, SumOp{});
    if (threadIdx.x == 0)
      partial[c] = sum;
  }
}

/// out[0] = Σ partial (one block).
__global__ void sumChunksKernel(const double *partial, int64_t chunks,
                                float *out) {
  double sum = 0;
  for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x)
    sum += partial[c];
  sum = blockReduce(sum, SumOp{});
  if (threadIdx.x == 0)
    out[0] = float(sum);
}

template <typename E>
__global__ void
sgdKernel(float *param, float *buffer, const typename E::T *grad,
          const float *gradScale, int64_t n, double lr, double momentum,
          double weightDecay, const float *step, const float *lrScale) {
  double scale = gradScale[0];
  if (lrScale)
    lr *= double(lrScale[0]);
  bool first = step[0] == 1.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    double gi = scale * E::load(grad, i) + weightDecay * param[i];
    if (momentum != 0.0) {
      gi = first ? gi : momentum * buffer[i] + gi;
      buffer[i] = float(gi);
    }
    param[i] = float(param[i] - lr * gi);
  }
}

/// out[0] = the schedule's factor at step step[0] (LrSchedule.h).
__global__ void lrScheduleKernel(const float *step,
                                 fsdp_rt_lr_schedule_kind schedule,
                                 int64_t warmup, int64_t total, double minRatio,
                                 float *out) {
  out[0] = float(fsdp::rt::lrScheduleFactor(schedule, step[0], double(warmup),
                                            double(total), minRatio));
}

/// torch.nn.utils.clip_grad_norm_'s min(1, max_norm / (norm + 1e-6)), with
/// std::min's treatment of NaN (1).
__global__ void clipCoefficientKernel(const float *sumOfSquares, double maxNorm,
                                      float *out) {
  double norm = sqrt(double(sumOfSquares[0]));
  double ratio = maxNorm / (norm + 1e-6);
  out[0] = float(ratio < 1.0 ? ratio : 1.0);
}
} // namespace

void fsdp_rt_sum_squares(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *x, int64_t numel, float *out) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_sum_squares");
  cudaStream_t s = scope.stream();
  int64_t chunks = (numel + kSquaresChunk - 1) / kSquaresChunk;
  Temp<double> partial(chunks, s, scope.name());
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (chunks > 0)
      sumSquaresChunkKernel<E><<<gridFor(chunks, 1), kThreads, 0, s>>>(
          asIn<E>(x), numel, chunks, partial.get());
  });
  // With no elements the sum is 0.
  sumChunksKernel<<<1, kReduceThreads, 0, s>>>(partial.get(), chunks, out);
}

void fsdp_rt_adamw(fsdp_rt_stream stream, int64_t count,
                   const fsdp_rt_adamw_tensor *tensors,
                   fsdp_rt_dtype grad_dtype, double lr, double beta1,
                   double beta2, double eps, double weight_decay,
                   const float *step, const float *grad_scale,
                   const float *lr_scale) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_adamw");
  adamw::Hyper hyper = {lr, beta1, beta2, eps, weight_decay};
  for (int64_t first = 0; first < count; first += adamw::kTable) {
    adamw::Table table;
    int64_t chunks = adamw::fillTable(
        table, tensors + first,
        int(count - first < adamw::kTable ? count - first : adamw::kTable));
    if (chunks == 0)
      continue;
    dispatchFloat(grad_dtype, scope.name(), [&](auto e) {
      using E = decltype(e);
      adamw::adamwMulti<Portable<E>>
          <<<adamw::adamwGrid(chunks), adamw::kAdamWThreads, 0,
             scope.stream()>>>(table, hyper, step, grad_scale, lr_scale);
    });
  }
}

void fsdp_rt_sgd(fsdp_rt_stream stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay,
                 const float *step, const float *grad_scale,
                 const float *lr_scale) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_sgd");
  if (numel == 0)
    return;
  dispatchFloat(grad_dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    sgdKernel<E><<<gridFor(numel), kThreads, 0, scope.stream()>>>(
        param, momentum_buffer, asIn<E>(grad), grad_scale, numel, lr, momentum,
        weight_decay, step, lr_scale);
  });
}

void fsdp_rt_lr_schedule(fsdp_rt_stream stream, const float *step,
                         fsdp_rt_lr_schedule_kind schedule,
                         int64_t warmup_steps, int64_t total_steps,
                         double min_ratio, float *out) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_lr_schedule");
  lrScheduleKernel<<<1, 1, 0, scope.stream()>>>(step, schedule, warmup_steps,
                                                total_steps, min_ratio, out);
}

void fsdp_rt_clip_coefficient(fsdp_rt_stream stream,
                              const float *sum_of_squares, double max_norm,
                              float *out) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream,
                    "fsdp_rt_clip_coefficient");
  clipCoefficientKernel<<<1, 1, 0, scope.stream()>>>(sum_of_squares, max_norm,
                                                     out);
}

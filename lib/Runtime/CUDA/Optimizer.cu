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
// the same at every step (what a CUDA graph replays): AdamW's bias
// corrections are computed on the device, in double as the CPU backend
// does, by one thread before the update. The squared-gradient sum adds fixed chunks in
// double (a block reduction per chunk, then the chunks by one block), so
// its bits do not depend on scheduling.
//
//===----------------------------------------------------------------------===//

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

/// The step's constants of torch.optim.AdamW, in f32.
struct AdamWCoefficients {
  float decay, beta1, beta2, stepSize, correction2Sqrt, eps;
};

/// The coefficients of step `step[0]` (1-based).
__global__ void adamwCoefficientsKernel(const float *step, double lr,
                                        double beta1, double beta2, double eps,
                                        double weightDecay,
                                        AdamWCoefficients *out) {
  double t = step[0];
  AdamWCoefficients c;
  c.decay = float(1.0 - lr * weightDecay);
  c.beta1 = float(beta1);
  c.beta2 = float(beta2);
  c.stepSize = float(lr / (1.0 - pow(beta1, t)));
  c.correction2Sqrt = float(sqrt(1.0 - pow(beta2, t)));
  c.eps = float(eps);
  *out = c;
}

template <typename E>
__global__ void adamwKernel(const float *param, const float *m, const float *v,
                            const typename E::T *grad, const float *gradScale,
                            int64_t n, const AdamWCoefficients *coefficients,
                            float *newParam, float *newM, float *newV) {
  float scale = gradScale[0];
  AdamWCoefficients c = *coefficients;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float gi = E::load(grad, i) * scale;
    float p = param[i] * c.decay;
    float mi = m[i] + (gi - m[i]) * (1.0f - c.beta1);
    float vi = v[i] * c.beta2 + (1.0f - c.beta2) * gi * gi;
    float denom = sqrtf(vi) / c.correction2Sqrt + c.eps;
    newParam[i] = p - c.stepSize * (mi / denom);
    newM[i] = mi;
    newV[i] = vi;
  }
}

template <typename E>
__global__ void sgdKernel(float *param, float *buffer,
                          const typename E::T *grad, const float *gradScale,
                          int64_t n, double lr, double momentum,
                          double weightDecay, const float *step) {
  double scale = gradScale[0];
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

void fsdp_rt_adamw(fsdp_rt_stream stream, const float *param,
                   const float *exp_avg, const float *exp_avg_sq,
                   float *new_param, float *new_exp_avg, float *new_exp_avg_sq,
                   fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                   double lr, double beta1, double beta2, double eps,
                   double weight_decay, const float *step,
                   const float *grad_scale) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_adamw");
  if (numel == 0)
    return;
  cudaStream_t s = scope.stream();
  Temp<AdamWCoefficients> c(1, s, scope.name());
  adamwCoefficientsKernel<<<1, 1, 0, s>>>(step, lr, beta1, beta2, eps,
                                          weight_decay, c.get());
  dispatchFloat(grad_dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    adamwKernel<E><<<gridFor(numel), kThreads, 0, s>>>(
        param, exp_avg, exp_avg_sq, asIn<E>(grad), grad_scale, numel, c.get(),
        new_param, new_exp_avg, new_exp_avg_sq);
  });
}

void fsdp_rt_sgd(fsdp_rt_stream stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay,
                 const float *step, const float *grad_scale) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream, "fsdp_rt_sgd");
  if (numel == 0)
    return;
  dispatchFloat(grad_dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    sgdKernel<E><<<gridFor(numel), kThreads, 0, scope.stream()>>>(
        param, momentum_buffer, asIn<E>(grad), grad_scale, numel, lr, momentum,
        weight_decay, step);
  });
}

void fsdp_rt_clip_coefficient(fsdp_rt_stream stream,
                              const float *sum_of_squares, double max_norm,
                              float *out) {
  KernelScope scope(FSDP_RT_KERNEL_OPTIMIZER, stream,
                    "fsdp_rt_clip_coefficient");
  clipCoefficientKernel<<<1, 1, 0, scope.stream()>>>(sum_of_squares, max_norm,
                                                     out);
}

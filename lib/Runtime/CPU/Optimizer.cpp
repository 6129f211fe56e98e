//===- Optimizer.cpp - Gradient norm, AdamW and SGD -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// AdamW follows torch.optim's implementation operation by operation in f32,
// as torch computes it, vectorized and on the threads; SGD computes each
// element in double and stores f32. The squared-gradient sum adds fixed
// blocks in double, in order, so its bits do not depend on the threads.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace fsdp::rt;

namespace {
/// Σ x² over one block in double, in independent lanes.
FSDP_VECTORIZE double sumSquares(const float *x, int64_t n) {
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

struct AdamWCoefficients {
  float decay, beta1, beta2, stepSize, correction2Sqrt, eps, gradScale;
};

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

void fsdp_rt_sum_squares(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                         int64_t numel, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  constexpr int64_t block = 1 << 16;
  int64_t blocks = (numel + block - 1) / block;
  std::vector<double> sums(blocks);
  parallelFor(blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(dtype == FSDP_RT_F32 ? 0 : block);
    for (int64_t b = begin; b < end; ++b) {
      int64_t len = std::min(block, numel - b * block);
      const float *px = static_cast<const float *>(x) + b * block;
      if (dtype != FSDP_RT_F32) {
        toFloat(dtype, static_cast<const uint16_t *>(x) + b * block, len,
                scratch.data());
        px = scratch.data();
      }
      sums[b] = sumSquares(px, len);
    }
  });
  double sum = 0;
  for (double s : sums)
    sum += s;
  out[0] = float(sum);
}

void fsdp_rt_adamw(fsdp_rt_stream, int64_t count,
                   const fsdp_rt_adamw_tensor *tensors,
                   fsdp_rt_dtype grad_dtype, double lr, double beta1,
                   double beta2, double eps, double weight_decay,
                   const float *step_count, const float *grad_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  double step = step_count[0];
  AdamWCoefficients c;
  c.decay = float(1.0 - lr * weight_decay);
  c.beta1 = float(beta1);
  c.beta2 = float(beta2);
  c.stepSize = float(lr / (1.0 - std::pow(beta1, step)));
  c.correction2Sqrt = float(std::sqrt(1.0 - std::pow(beta2, step)));
  c.eps = float(eps);
  c.gradScale = *grad_scale;
  // One parallel loop over every tensor's pieces, so that many small
  // tensors share the threads as one large one would.
  constexpr int64_t piece = 8 * kBlock;
  std::vector<std::pair<int64_t, int64_t>> pieces; // (tensor, first element)
  for (int64_t t = 0; t < count; ++t)
    for (int64_t b = 0; b < tensors[t].numel; b += piece)
      pieces.emplace_back(t, b);
  parallelFor(int64_t(pieces.size()), 1, [&](int64_t first, int64_t last) {
    float scratch[kBlock];
    for (int64_t k = first; k < last; ++k) {
      auto [t, start] = pieces[size_t(k)];
      const fsdp_rt_adamw_tensor &x = tensors[t];
      int64_t end = std::min(start + piece, x.numel);
      for (int64_t b = start; b < end; b += kBlock) {
        int64_t len = std::min(kBlock, end - b);
        const float *g = static_cast<const float *>(x.grad) + b;
        if (grad_dtype != FSDP_RT_F32) {
          toFloat(grad_dtype, static_cast<const uint16_t *>(x.grad) + b, len,
                  scratch);
          g = scratch;
        }
        adamwBlock(x.param + b, x.exp_avg + b, x.exp_avg_sq + b, g,
                   x.new_param + b, x.new_exp_avg + b, x.new_exp_avg_sq + b,
                   len, c);
      }
    }
  });
}

void fsdp_rt_sgd(fsdp_rt_stream, float *param, float *momentum_buffer,
                 fsdp_rt_dtype grad_dtype, const void *grad, int64_t numel,
                 double lr, double momentum, double weight_decay,
                 const float *step, const float *grad_scale) {
  KernelTimer timer(FSDP_RT_KERNEL_OPTIMIZER);
  bool first = step[0] == 1.0f;
  FloatInput fg(grad_dtype, grad, numel);
  const float *g = fg.get();
  double scale = *grad_scale;
  for (int64_t i = 0; i < numel; ++i) {
    double gi = scale * g[i] + weight_decay * param[i];
    if (momentum != 0.0) {
      gi = first ? gi : momentum * momentum_buffer[i] + gi;
      momentum_buffer[i] = float(gi);
    }
    param[i] = float(param[i] - lr * gi);
  }
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

//===- OptimizerMath.h - The optimizer's arithmetic on the host -*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// AdamW, SGD and the squared-gradient sum as the host's cores compute them.
// Two callers share them: the CPU backend's kernels, and the host layer
// when CPU offload places the optimizer in host memory on a backend whose
// kernels run elsewhere (CUDA), where they run in stream order as host
// functions. Each caller brings its own threads as a `ParallelFor`, a
// callable (n, fn) that calls fn(begin, end) over pieces covering [0, n).
// Every result is independent of how the pieces are split: AdamW and SGD
// are element by element, and the sum adds fixed blocks in order.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_OPTIMIZERMATH_H
#define FSDP_LIB_RUNTIME_COMMON_OPTIMIZERMATH_H

#include "fsdp/Runtime/Runtime.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fsdp::rt::optimizer {

/// torch.optim.AdamW's per-step constants, in f32 as torch computes them.
struct AdamWCoefficients {
  float decay, beta1, beta2, stepSize, correction2Sqrt, eps, gradScale;
};

/// The learning rate `lr` times the schedule's factor `lrScale` (a device
/// scalar; null: none).
inline double scaledLr(double lr, const float *lrScale) {
  return lrScale ? lr * double(lrScale[0]) : lr;
}

AdamWCoefficients adamwCoefficients(double lr, double beta1, double beta2,
                                    double eps, double weightDecay, double step,
                                    float gradScale);

/// AdamW on elements [begin, end) of `x`.
void adamwRange(const fsdp_rt_adamw_tensor &x, fsdp_rt_dtype gradDtype,
                int64_t begin, int64_t end, const AdamWCoefficients &c);

/// The pieces of one parallel loop over every tensor, as (tensor, first
/// element): many small tensors share the threads as one large one would.
std::vector<std::pair<int64_t, int64_t>>
adamwPieces(int64_t count, const fsdp_rt_adamw_tensor *tensors);
/// Elements per piece.
constexpr int64_t kAdamWPiece = 8 * 1024;

/// Elements per block of the squared sum.
constexpr int64_t kSquaresBlock = 1 << 16;
/// Σ x² over block `b` of `x`, in double.
double sumSquaresBlock(fsdp_rt_dtype dtype, const void *x, int64_t numel,
                       int64_t b);

/// torch.optim.SGD's constants for one step.
struct SgdCoefficients {
  double lr, momentum, weightDecay, gradScale;
  /// The momentum buffer starts as the first step's gradient.
  bool firstStep;
};

/// torch.optim.SGD on elements [begin, end), in double stored as f32.
void sgdRange(float *param, float *momentumBuffer, fsdp_rt_dtype gradDtype,
              const void *grad, int64_t begin, int64_t end,
              const SgdCoefficients &c);
/// Elements per piece of SGD's parallel loop.
constexpr int64_t kSgdPiece = 1 << 16;

/// fsdp_rt_adamw's arithmetic, on `parallelFor`'s threads.
template <typename ParallelFor>
void adamw(ParallelFor &&parallelFor, int64_t count,
           const fsdp_rt_adamw_tensor *tensors, fsdp_rt_dtype gradDtype,
           const AdamWCoefficients &c) {
  std::vector<std::pair<int64_t, int64_t>> pieces = adamwPieces(count, tensors);
  parallelFor(int64_t(pieces.size()), [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      auto [t, start] = pieces[size_t(k)];
      adamwRange(tensors[t], gradDtype, start,
                 std::min(start + kAdamWPiece, tensors[t].numel), c);
    }
  });
}

/// fsdp_rt_sgd's arithmetic on `numel` elements, on `parallelFor`'s
/// threads.
template <typename ParallelFor>
void sgd(ParallelFor &&parallelFor, float *param, float *momentumBuffer,
         fsdp_rt_dtype gradDtype, const void *grad, int64_t numel,
         const SgdCoefficients &c) {
  int64_t pieces = (numel + kSgdPiece - 1) / kSgdPiece;
  parallelFor(pieces, [&](int64_t first, int64_t last) {
    sgdRange(param, momentumBuffer, gradDtype, grad, first * kSgdPiece,
             std::min(last * kSgdPiece, numel), c);
  });
}

/// fsdp_rt_sum_squares's arithmetic, on `parallelFor`'s threads.
template <typename ParallelFor>
float sumSquares(ParallelFor &&parallelFor, fsdp_rt_dtype dtype, const void *x,
                 int64_t numel) {
  int64_t blocks = (numel + kSquaresBlock - 1) / kSquaresBlock;
  std::vector<double> sums(static_cast<size_t>(blocks));
  parallelFor(blocks, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b)
      sums[size_t(b)] = sumSquaresBlock(dtype, x, numel, b);
  });
  double sum = 0;
  for (double s : sums)
    sum += s;
  return float(sum);
}

} // namespace fsdp::rt::optimizer

#endif // FSDP_LIB_RUNTIME_COMMON_OPTIMIZERMATH_H

//===- LossRows.cuh - Cross-entropy row kernels -----------------*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The row kernels of fsdp_rt_cross_entropy and fsdp_rt_cross_entropy_grad
// (Loss.cu): a block of kRowThreads per row of logits [rows, vocab].
//
// The row's maximum m and Σ exp(x - m) come from one pass: each thread keeps
// an online pair (m, s) over its elements, rescaling s when m grows, and the
// pairs merge by (max(m1, m2), s1·e^(m1-m) + s2·e^(m2-m)), first across a
// warp's lanes (a butterfly, which leaves the same bits in every lane) and
// then across the warps in order. A row whose start is 16-byte aligned is
// read 16 bytes per thread and step (8 bf16/f16 or 4 f32 elements); the
// gradient writes the same way. The old kernels read a row three times
// (max, sum, then the gradient), 2 bytes per thread and step; on the H200
// they took 3.5 and 7.7 ms per step at Llama-3.2-1B's 8192 × 128256 bf16
// logits, several times the memory time. Exponentials use the CPU
// backend's range (0 below -87.3, the argument clamped at 88).
//
// Written against Portable.cuh, so CI runs them on the emulator
// (emulated-kernels.test).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_LOSSROWS_CUH
#define FSDP_LIB_RUNTIME_CUDA_LOSSROWS_CUH

#include "Portable.cuh"
#include "fsdp/Runtime/Runtime.h"

namespace fsdp::rt::cuda::loss {

using namespace portable;

/// Threads per row block.
constexpr int kRowThreads = 256;

PORTABLE_DEVICE int64_t labelAt(fsdp_rt_dtype dtype, const void *labels,
                                int64_t i) {
  if (dtype == FSDP_RT_I32)
    return static_cast<const int32_t *>(labels)[i];
  return static_cast<const int64_t *>(labels)[i];
}

PORTABLE_DEVICE float expRange(float x) {
  return x < -87.3f ? 0.0f : expf(fminf(x, 88.0f));
}

/// A running maximum and the sum of exp(x - max) over the values seen.
struct MaxSum {
  float m, s;
};
PORTABLE_DEVICE void absorb(MaxSum &st, float x) {
  if (x > st.m) {
    st.s = st.s * expRange(st.m - x) + 1.0f;
    st.m = x;
  } else {
    st.s += expRange(x - st.m);
  }
}
/// Symmetric in its arguments, bit for bit.
PORTABLE_DEVICE MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY)
    return {m, 0.0f};
  return {m, a.s * expRange(a.m - m) + b.s * expRange(b.m - m)};
}

/// The row's maximum and Σ exp(x - max), the same in every thread.
template <typename E>
PORTABLE_DEVICE MaxSum rowStats(const typename E::T *x, int64_t n) {
  MaxSum st = {-INFINITY, 0.0f};
  visitElements<E>(x, nullptr, nullptr, n, aligned16(x), threadIdx.x,
                   blockDim.x, nullptr, [&](int64_t, float v, float, float) {
                     absorb(st, v);
                     return 0.0f;
                   });
  for (int mask = 16; mask > 0; mask >>= 1)
    st = merge(st, MaxSum{shflXor(st.m, mask), shflXor(st.s, mask)});
  PORTABLE_SHARED_ARRAY(MaxSum, partial, 32);
  // The previous row's readers are done before the slots are rewritten.
  barrier();
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = st;
  barrier();
  MaxSum total = partial[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w)
    total = merge(total, partial[w]);
  return total;
}

/// losses[r] = max + log Σ exp(x - max) - x[label] (double; 0 for an
/// ignored row); with `none`, also none[r] in f32. Grid-stride over rows.
template <typename E>
PORTABLE_KERNEL(kRowThreads)
void crossEntropyRows(const typename E::T *logits, fsdp_rt_dtype labelsDtype,
                      const void *labels, int64_t rows, int64_t vocab,
                      int64_t ignore, double *losses, float *none) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = labelAt(labelsDtype, labels, r);
    double loss = 0;
    if (label != ignore) {
      const typename E::T *x = logits + r * vocab;
      MaxSum st = rowStats<E>(x, vocab);
      loss = double(st.m) + log(double(st.s)) - double(toFloat<E>(x[label]));
    }
    if (threadIdx.x == 0) {
      losses[r] = loss;
      if (none)
        none[r] = float(loss);
    }
  }
}

/// The loss gradient g_r of a row: dloss[r] for NONE, dloss[0] for SUM,
/// dloss[0] / count for MEAN.
PORTABLE_DEVICE double lossGradient(fsdp_rt_reduction reduction,
                                    const float *dloss, const int64_t *count,
                                    int64_t r) {
  if (reduction == FSDP_RT_REDUCTION_NONE)
    return dloss[r];
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    return double(dloss[0]) / double(count[0]);
  return dloss[0];
}

/// dlogits[r] = g_r · (softmax(logits[r]) - onehot(label)), zero for an
/// ignored row.
template <typename E>
PORTABLE_KERNEL(kRowThreads)
void crossEntropyGradRows(const typename E::T *logits,
                          fsdp_rt_dtype labelsDtype, const void *labels,
                          int64_t rows, int64_t vocab, int64_t ignore,
                          fsdp_rt_reduction reduction, const float *dloss,
                          const int64_t *count, typename E::T *dlogits) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = labelAt(labelsDtype, labels, r);
    const typename E::T *x = logits + r * vocab;
    typename E::T *dx = dlogits + r * vocab;
    bool vectors = aligned16(x) && aligned16(dx);
    if (label == ignore) {
      visitElements<E>(x, nullptr, nullptr, vocab, vectors, threadIdx.x,
                       blockDim.x, dx,
                       [](int64_t, float, float, float) { return 0.0f; });
      continue;
    }
    double g = lossGradient(reduction, dloss, count, r);
    MaxSum st = rowStats<E>(x, vocab);
    float factor = float(g / double(st.s)), fg = float(g), m = st.m;
    visitElements<E>(x, nullptr, nullptr, vocab, vectors, threadIdx.x,
                     blockDim.x, dx, [&](int64_t i, float v, float, float) {
                       float p = expRange(v - m) * factor;
                       return i == label ? p - fg : p;
                     });
  }
}

} // namespace fsdp::rt::cuda::loss

#endif // FSDP_LIB_RUNTIME_CUDA_LOSSROWS_CUH

//===- AttentionCombine.cuh - Two partial attentions as one ----*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// fsdp_rt_attention_combine(_grad)'s kernels: a thread per row (batch,
// query, head) of [b, s, nq, dv] results, whose statistic is [b, nq, s].
// lse = log(e^a + e^b); out = e^(a - lse)·out_a + e^(b - lse)·out_b, a row
// that neither saw keeping -inf and zeros; the gradient gives out_x
// w_x·dout and lse_x w_x·(dlse + Σ dout·(out_x - out)). Written against
// Portable.cuh, so that the CPU emulator runs them in CI.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_ATTENTIONCOMBINE_CUH
#define FSDP_LIB_RUNTIME_CUDA_ATTENTIONCOMBINE_CUH

#include "Portable.cuh"

namespace fsdp::rt::cuda::combine {

using namespace portable;

constexpr int kThreads = 128;

/// The statistic of row `row` of [b, s, nq, dv] results.
PORTABLE_DEVICE int64_t statisticOf(int64_t row, int64_t s, int64_t nq) {
  int64_t bi = row / (s * nq), i = row / nq % s, h = row % nq;
  return (bi * nq + h) * s + i;
}

/// e^(l - total), 0 for a partial attention that saw no key.
PORTABLE_DEVICE float weight(float l, float total) {
  return l == -INFINITY ? 0.0f : expf(l - total);
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void forwardKernel(const typename E::T *a, const float *lseA,
                   const typename E::T *b, const float *lseB, int64_t rows,
                   int64_t s, int64_t nq, int64_t dv, typename E::T *out,
                   float *lse) {
  for (int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * kThreads) {
    int64_t at = statisticOf(row, s, nq);
    float la = lseA[at], lb = lseB[at], m = fmaxf(la, lb);
    float total =
        m == -INFINITY ? m : m + logf(expf(la - m) + expf(lb - m));
    float wa = weight(la, total), wb = weight(lb, total);
    lse[at] = total;
    for (int64_t e = row * dv; e < (row + 1) * dv; ++e)
      out[e] = fromFloat<E>(wa * toFloat<E>(a[e]) + wb * toFloat<E>(b[e]));
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void backwardKernel(const typename E::T *a, const float *lseA,
                    const typename E::T *b, const float *lseB,
                    const typename E::T *out, const float *lse,
                    const typename E::T *dout, const float *dlse, int64_t rows,
                    int64_t s, int64_t nq, int64_t dv, typename E::T *da,
                    float *dlseA, typename E::T *db, float *dlseB) {
  for (int64_t row = int64_t(blockIdx.x) * kThreads + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * kThreads) {
    int64_t at = statisticOf(row, s, nq);
    float wa = weight(lseA[at], lse[at]), wb = weight(lseB[at], lse[at]);
    double dotA = dlse ? dlse[at] : 0.0, dotB = dotA;
    for (int64_t e = row * dv; e < (row + 1) * dv; ++e) {
      float g = toFloat<E>(dout[e]), o = toFloat<E>(out[e]);
      dotA += double(g) * (toFloat<E>(a[e]) - o);
      dotB += double(g) * (toFloat<E>(b[e]) - o);
      da[e] = fromFloat<E>(wa * g);
      db[e] = fromFloat<E>(wb * g);
    }
    dlseA[at] = wa * float(dotA);
    dlseB[at] = wb * float(dotB);
  }
}

/// Blocks for `rows` rows, at most 4096.
inline unsigned blocksFor(int64_t rows) {
  int64_t blocks = (rows + kThreads - 1) / kThreads;
  return unsigned(blocks < 4096 ? blocks : 4096);
}

} // namespace fsdp::rt::cuda::combine

#endif // FSDP_LIB_RUNTIME_CUDA_ATTENTIONCOMBINE_CUH

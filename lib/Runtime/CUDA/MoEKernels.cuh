//===- MoEKernels.cuh - Mixture-of-experts kernels ----------------*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The kernels behind MoE.cu, written over Portable.cuh so that the emulator
// runs them against the CPU backend (emulated-kernels.test). Routing counts
// and indices are read on the device only: nothing waits for the host.
//
// - Routing: one thread per token (softmax statistics, top-k by repeated
//   scans, ties to the lower expert, as the CPU backend).
// - Expert order: one block assigns every slot its row (a counting sort:
//   each thread owns experts, counts their slots, then numbers them in
//   slot order); copies and sums then run one element per thread.
// - Grouped products: 16 x 16 output tiles over (column tile, row tile,
//   segment); a tile past its segment's rows exits. The weight gradient
//   tiles (n, k) per expert and walks the expert's segments.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_MOEKERNELS_CUH
#define FSDP_LIB_RUNTIME_CUDA_MOEKERNELS_CUH

#include "../Common/Routing.h"
#include "Portable.cuh"

namespace fsdp::rt::cuda::moe {

using portable::fromFloat;
using portable::toFloat;

constexpr int kThreads = 256;
constexpr int kTile = 16;
/// The most experts a token routes to (registers per thread).
constexpr int kMaxTopK = 32;

/// Softmax statistics of one token's logits: the max and 1 / Σ e^(l - max).
template <typename E>
PORTABLE_DEVICE void softmaxStats(const typename E::T *logits, int64_t experts,
                                  float &max, float &inv) {
  max = toFloat<E>(logits[0]);
  for (int64_t e = 1; e < experts; ++e) {
    float l = toFloat<E>(logits[e]);
    max = l > max ? l : max;
  }
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += expf(toFloat<E>(logits[e]) - max);
  inv = float(1.0 / sum);
}

template <typename E>
PORTABLE_DEVICE float prob(const typename E::T *logits, int64_t e, float max,
                           float inv) {
  return expf(toFloat<E>(logits[e]) - max) * inv;
}

/// The k most probable experts, descending, ties to the lower index.
template <typename E>
PORTABLE_DEVICE void topK(const typename E::T *logits, int64_t experts,
                          int64_t k, float max, float inv, int64_t *chosen,
                          float *value) {
  topExperts([&](int64_t e) { return prob<E>(logits, e, max, inv); }, experts,
             k, chosen, value);
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void router(const typename E::T *logits, int64_t tokens, int64_t experts,
            int64_t k, int normalize, typename E::T *weights,
            int64_t *indices) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    const typename E::T *l = logits + t * experts;
    float max, inv, value[kMaxTopK];
    softmaxStats<E>(l, experts, max, inv);
    topK<E>(l, experts, k, max, inv, indices + t * k, value);
    float sum = 0;
    for (int64_t j = 0; j < k; ++j)
      sum += value[j];
    for (int64_t j = 0; j < k; ++j)
      weights[t * k + j] = fromFloat<E>(normalize ? value[j] / sum : value[j]);
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void routerGrad(const typename E::T *logits, const int64_t *indices,
                const typename E::T *dweights, int64_t tokens, int64_t experts,
                int64_t k, int normalize, typename E::T *dlogits) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    const typename E::T *l = logits + t * experts;
    const int64_t *chosen = indices + t * k;
    float max, inv, p[kMaxTopK], dv[kMaxTopK];
    softmaxStats<E>(l, experts, max, inv);
    float s = 0, gw = 0;
    for (int64_t j = 0; j < k; ++j) {
      p[j] = prob<E>(l, chosen[j], max, inv);
      s += p[j];
    }
    for (int64_t j = 0; j < k; ++j)
      gw += toFloat<E>(dweights[t * k + j]) * p[j] / s;
    for (int64_t j = 0; j < k; ++j) {
      float g = toFloat<E>(dweights[t * k + j]);
      dv[j] = normalize ? (g - gw) / s : g;
    }
    double dot = 0;
    for (int64_t j = 0; j < k; ++j)
      dot += double(p[j]) * dv[j];
    for (int64_t e = 0; e < experts; ++e) {
      float dp = 0;
      for (int64_t j = 0; j < k; ++j)
        dp += chosen[j] == e ? dv[j] : 0.0f;
      dlogits[t * experts + e] =
          fromFloat<E>(prob<E>(l, e, max, inv) * (dp - float(dot)));
    }
  }
}

/// One block: row[s] = the row of slot s in expert order; counts[e] its
/// expert's rows (`start` is scratch of `experts` entries). Slots routed
/// outside [0, experts) get row -1 and are left out.
PORTABLE_KERNEL(kThreads)
void slotRows(const int64_t *indices, int64_t slots, int64_t experts,
              int64_t *counts, int64_t *start, int64_t *row) {
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t c = 0;
    for (int64_t s = 0; s < slots; ++s)
      c += indices[s] == e;
    counts[e] = c;
  }
  portable::barrier();
  if (threadIdx.x == 0) {
    int64_t next = 0;
    for (int64_t e = 0; e < experts; ++e) {
      start[e] = next;
      next += counts[e];
    }
  }
  portable::barrier();
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x)
    if (indices[s] < 0 || indices[s] >= experts)
      row[s] = -1;
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t r = start[e];
    for (int64_t s = 0; s < slots; ++s)
      if (indices[s] == e)
        row[s] = r++;
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void permute(const typename E::T *x, const int64_t *row, int64_t slots,
             int64_t hidden, int64_t k, typename E::T *rows) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < slots * hidden; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t s = i / hidden, h = i % hidden;
    if (row[s] >= 0)
      rows[row[s] * hidden + h] = x[(s / k) * hidden + h];
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void unpermute(const typename E::T *rows, const int64_t *row,
               const typename E::T *weights, int64_t tokens, int64_t hidden,
               int64_t k, typename E::T *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < tokens * hidden; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = i / hidden, h = i % hidden;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t r = row[t * k + j];
      float w = weights ? toFloat<E>(weights[t * k + j]) : 1.0f;
      acc += r >= 0 ? w * toFloat<E>(rows[r * hidden + h]) : 0.0f;
    }
    out[i] = fromFloat<E>(acc);
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void unpermuteGradRows(const int64_t *row, const typename E::T *weights,
                       const typename E::T *dy, int64_t slots, int64_t hidden,
                       int64_t k, typename E::T *drows) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < slots * hidden; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t s = i / hidden, h = i % hidden;
    if (row[s] >= 0)
      drows[row[s] * hidden + h] = fromFloat<E>(
          toFloat<E>(weights[s]) * toFloat<E>(dy[(s / k) * hidden + h]));
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void unpermuteGradWeights(const typename E::T *rows, const int64_t *row,
                          const typename E::T *dy, int64_t slots,
                          int64_t hidden, int64_t k, typename E::T *dweights) {
  for (int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; s < slots;
       s += int64_t(gridDim.x) * blockDim.x) {
    double dot = 0;
    for (int64_t h = 0; row[s] >= 0 && h < hidden; ++h)
      dot += double(toFloat<E>(rows[row[s] * hidden + h])) *
             toFloat<E>(dy[(s / k) * hidden + h]);
    dweights[s] = fromFloat<E>(float(dot));
  }
}

/// One thread (any others of a launch return): start[g] = Σ counts before
/// segment g; start[segments] = all.
PORTABLE_KERNEL(1)
void segmentStarts(const int64_t *counts, int64_t segments, int64_t *start) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  int64_t next = 0;
  for (int64_t g = 0; g < segments; ++g) {
    start[g] = next;
    next += counts[g] > 0 ? counts[g] : 0;
  }
  start[segments] = next;
}

/// out[r, c] = Σ_j a[r, j] · B(j, c) over segment blockIdx.z's rows, B the
/// segment's expert's [cols, inner] matrix (w [E, cols, inner]) transposed
/// when `transB`, else its [inner, cols] one (w [E, inner, cols]).
template <typename E>
PORTABLE_KERNEL(kTile *kTile)
void groupedProduct(const typename E::T *a, const int64_t *counts,
                    const int64_t *start, const typename E::T *w,
                    int64_t experts, int64_t inner, int64_t cols, bool transB,
                    typename E::T *out) {
  PORTABLE_SHARED_ARRAY(float, as, kTile *kTile);
  PORTABLE_SHARED_ARRAY(float, bs, kTile *kTile);
  int64_t g = blockIdx.z, m = counts[g], first = start[g];
  const typename E::T *we = w + (g % experts) * inner * cols;
  int ty = threadIdx.x / kTile, tx = threadIdx.x % kTile;
  int64_t c = int64_t(blockIdx.x) * kTile + tx;
  for (int64_t r0 = int64_t(blockIdx.y) * kTile; r0 < m;
       r0 += int64_t(gridDim.y) * kTile) {
    float acc = 0;
    for (int64_t j0 = 0; j0 < inner; j0 += kTile) {
      int64_t r = r0 + ty, j = j0 + tx;
      as[ty * kTile + tx] =
          r < m && j < inner ? toFloat<E>(a[(first + r) * inner + j]) : 0.0f;
      // bs[jj][cc] = B(j0 + jj, c0 + cc).
      int64_t bj = j0 + ty, bc = int64_t(blockIdx.x) * kTile + tx;
      float bv = 0;
      if (bj < inner && bc < cols)
        bv = toFloat<E>(transB ? we[bc * inner + bj] : we[bj * cols + bc]);
      bs[ty * kTile + tx] = bv;
      portable::barrier();
      for (int jj = 0; jj < kTile; ++jj)
        acc += as[ty * kTile + jj] * bs[jj * kTile + tx];
      portable::barrier();
    }
    if (r0 + ty < m && c < cols)
      out[(first + r0 + ty) * cols + c] = fromFloat<E>(acc);
  }
}

/// Zeroes rows [start[segments], rows) of out [rows, cols].
template <typename E>
PORTABLE_KERNEL(kThreads)
void zeroTail(const int64_t *start, int64_t segments, int64_t rows,
              int64_t cols, typename E::T *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       i < rows * cols; i += int64_t(gridDim.x) * blockDim.x)
    if (i / cols >= start[segments])
      out[i] = fromFloat<E>(0.0f);
}

/// dw[e][n][kk] = Σ over expert e's segments' rows r of dy[r, n] · x[r, kk];
/// tiles of (kk, n) over (blockIdx.x, blockIdx.y), expert blockIdx.z.
template <typename E>
PORTABLE_KERNEL(kTile *kTile)
void groupedWeightGrad(const typename E::T *x, const typename E::T *dy,
                       const int64_t *counts, const int64_t *start,
                       int64_t segments, int64_t experts, int64_t k, int64_t n,
                       typename E::T *dw) {
  PORTABLE_SHARED_ARRAY(float, ds, kTile *kTile);
  PORTABLE_SHARED_ARRAY(float, xs, kTile *kTile);
  int64_t e = blockIdx.z;
  int ty = threadIdx.x / kTile, tx = threadIdx.x % kTile;
  int64_t nOut = int64_t(blockIdx.y) * kTile + ty;
  int64_t kOut = int64_t(blockIdx.x) * kTile + tx;
  float acc = 0;
  for (int64_t g = e; g < segments; g += experts) {
    int64_t m = counts[g], first = start[g];
    for (int64_t r0 = 0; r0 < m; r0 += kTile) {
      // ds[rr][nn] = dy[r0 + rr, n0 + nn]; xs[rr][kk] = x[r0 + rr, k0 + kk].
      int64_t r = r0 + ty;
      int64_t dn = int64_t(blockIdx.y) * kTile + tx;
      ds[ty * kTile + tx] =
          r < m && dn < n ? toFloat<E>(dy[(first + r) * n + dn]) : 0.0f;
      xs[ty * kTile + tx] =
          r < m && kOut < k ? toFloat<E>(x[(first + r) * k + kOut]) : 0.0f;
      portable::barrier();
      for (int rr = 0; rr < kTile; ++rr)
        acc += ds[rr * kTile + ty] * xs[rr * kTile + tx];
      portable::barrier();
    }
  }
  if (nOut < n && kOut < k)
    dw[(e * n + nOut) * k + kOut] = fromFloat<E>(acc);
}

PORTABLE_KERNEL(1)
void rankCounts(const int64_t *counts, int64_t total, int64_t ranks,
                int64_t *out) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    sumBlocks(counts, total, ranks, out);
}

/// Per token: the softmax statistics (max, 1 / sum) and the top-k.
template <typename E>
PORTABLE_KERNEL(kThreads)
void routeStats(const typename E::T *logits, int64_t tokens, int64_t experts,
                int64_t k, float *stats, int64_t *chosen) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    const typename E::T *l = logits + t * experts;
    float value[kMaxTopK];
    softmaxStats<E>(l, experts, stats[2 * t], stats[2 * t + 1]);
    topK<E>(l, experts, k, stats[2 * t], stats[2 * t + 1], chosen + t * k,
            value);
  }
}

/// The load-balancing statistics from routeStats': per expert (one thread
/// each) its selections and its probabilities summed over the tokens in
/// order, in double.
template <typename E>
PORTABLE_KERNEL(kThreads)
void auxStats(const typename E::T *logits, const float *stats,
              const int64_t *chosen, int64_t tokens, int64_t experts,
              int64_t k, float *out) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < experts;
       e += int64_t(gridDim.x) * blockDim.x) {
    double count = 0, sum = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < k; ++j)
        count += chosen[t * k + j] == e;
      sum += prob<E>(logits + t * experts, e, stats[2 * t], stats[2 * t + 1]);
    }
    out[e] = float(count);
    out[experts + e] = float(sum);
    if (e == 0)
      out[2 * experts] = float(tokens);
  }
}

template <typename E>
PORTABLE_KERNEL(kThreads)
void auxStatsGrad(const typename E::T *logits, const float *dstats,
                  int64_t tokens, int64_t experts, typename E::T *dlogits) {
  const float *dp = dstats + experts;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < tokens;
       t += int64_t(gridDim.x) * blockDim.x) {
    const typename E::T *l = logits + t * experts;
    float max, inv;
    softmaxStats<E>(l, experts, max, inv);
    double dot = 0;
    for (int64_t e = 0; e < experts; ++e)
      dot += double(prob<E>(l, e, max, inv)) * dp[e];
    for (int64_t e = 0; e < experts; ++e)
      dlogits[t * experts + e] =
          fromFloat<E>(prob<E>(l, e, max, inv) * (dp[e] - float(dot)));
  }
}

PORTABLE_KERNEL(1)
void auxCombine(const float *stats, int64_t experts, float *out) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  out[0] = auxLoss(stats, experts);
}

PORTABLE_KERNEL(1)
void auxCombineGrad(const float *stats, int64_t experts, const float *dy,
                    float *dstats) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    auxLossGrad(stats, experts, dy[0], dstats);
}

/// Blocks for a grid-stride loop over `n` items of kThreads each.
inline unsigned gridOf(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 1 ? 1 : blocks < (1 << 20) ? blocks : (1 << 20));
}

/// Row tiles of a grouped product: enough for the buffer's rows, within
/// the grid's y limit (the kernel strides over the rest).
inline unsigned rowTiles(int64_t rows) {
  int64_t tiles = (rows + kTile - 1) / kTile;
  return unsigned(tiles < 1 ? 1 : tiles < 65535 ? tiles : 65535);
}

} // namespace fsdp::rt::cuda::moe

#endif // FSDP_LIB_RUNTIME_CUDA_MOEKERNELS_CUH

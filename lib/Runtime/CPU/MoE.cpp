//===- MoE.cpp - Mixture-of-experts kernels on the CPU --------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Routing (softmax and top-k per token), the permutation of token copies
// into expert order and back, the grouped products over experts (one
// oneDNN product per segment) and the load-balancing statistics. Every sum
// runs in a fixed order, so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "../Common/Routing.h"
#include "Internal.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace fsdp::rt;

namespace {

constexpr int64_t kTokenGrain = 16;

/// One token's probabilities softmax(logits) in f32 into `p`.
void probabilities(const float *logits, int64_t experts, float *p) {
  float m = logits[0];
  for (int64_t e = 1; e < experts; ++e)
    m = std::max(m, logits[e]);
  double sum = 0;
  for (int64_t e = 0; e < experts; ++e) {
    p[e] = std::exp(logits[e] - m);
    sum += p[e];
  }
  float inv = float(1.0 / sum);
  for (int64_t e = 0; e < experts; ++e)
    p[e] *= inv;
}

/// The logits' gradient of softmax probabilities `p` whose gradient is
/// `dp`: p · (dp − Σ p·dp).
void softmaxBackward(const float *p, const float *dp, int64_t experts,
                     float *out) {
  double dot = 0;
  for (int64_t e = 0; e < experts; ++e)
    dot += double(p[e]) * dp[e];
  for (int64_t e = 0; e < experts; ++e)
    out[e] = p[e] * (dp[e] - float(dot));
}

/// The `topK` largest of p, descending, ties to the lower index.
void topK(const float *p, int64_t experts, int64_t k, int64_t *chosen) {
  topExperts([p](int64_t e) { return p[e]; }, experts, k, chosen, nullptr);
}

/// The row in expert order of every slot: slots ordered by expert, then by
/// slot index (a stable counting sort); fills counts [experts].
std::vector<int64_t> slotRows(const int64_t *indices, int64_t slots,
                              int64_t experts, int64_t *counts) {
  std::vector<int64_t> count(experts, 0);
  for (int64_t s = 0; s < slots; ++s) {
    int64_t e = indices[s];
    if (e < 0 || e >= experts) {
      std::fprintf(stderr,
                   "fsdp runtime error: moe_permute: expert index %lld of "
                   "slot %lld is outside [0, %lld)\n",
                   (long long)e, (long long)s, (long long)experts);
      std::abort();
    }
    ++count[e];
  }
  std::vector<int64_t> next(experts, 0);
  for (int64_t e = 1; e < experts; ++e)
    next[e] = next[e - 1] + count[e - 1];
  std::vector<int64_t> row(slots);
  for (int64_t s = 0; s < slots; ++s)
    row[s] = next[indices[s]]++;
  if (counts)
    std::copy(count.begin(), count.end(), counts);
  return row;
}

const char *at(const void *base, int64_t element, fsdp_rt_dtype dtype) {
  return static_cast<const char *>(base) +
         element * int64_t(fsdp_rt_dtype_size(dtype));
}
char *at(void *base, int64_t element, fsdp_rt_dtype dtype) {
  return static_cast<char *>(base) +
         element * int64_t(fsdp_rt_dtype_size(dtype));
}

/// Σ counts, which must fit in `rows`.
int64_t segmentRows(const int64_t *counts, int64_t segments, int64_t rows,
                    const char *kernel) {
  int64_t total = 0;
  for (int64_t g = 0; g < segments; ++g) {
    if (counts[g] < 0) {
      std::fprintf(stderr, "fsdp runtime error: %s: segment %lld count %lld\n",
                   kernel, (long long)g, (long long)counts[g]);
      std::abort();
    }
    total += counts[g];
  }
  if (total > rows) {
    std::fprintf(stderr,
                 "fsdp runtime error: %s: the segments hold %lld rows, more "
                 "than the %lld the buffer has\n",
                 kernel, (long long)total, (long long)rows);
    std::abort();
  }
  return total;
}

} // namespace

void fsdp_rt_moe_router(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *logits,
                        int64_t tokens, int64_t experts, int64_t top_k,
                        int normalize, void *weights, int64_t *indices) {
  KernelTimer timer(FSDP_RT_KERNEL_SOFTMAX);
  FloatInput x(dtype, logits, tokens * experts);
  FloatOutput w(dtype, weights, tokens * top_k);
  parallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> p(experts);
    for (int64_t t = begin; t < end; ++t) {
      probabilities(x.get() + t * experts, experts, p.data());
      int64_t *chosen = indices + t * top_k;
      topK(p.data(), experts, top_k, chosen);
      float sum = 0;
      for (int64_t j = 0; j < top_k; ++j)
        sum += p[chosen[j]];
      for (int64_t j = 0; j < top_k; ++j)
        w.get()[t * top_k + j] = normalize ? p[chosen[j]] / sum : p[chosen[j]];
    }
  });
  w.finish();
}

void fsdp_rt_moe_router_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                             const void *logits, const int64_t *indices,
                             const void *dweights, int64_t tokens,
                             int64_t experts, int64_t top_k, int normalize,
                             void *dlogits) {
  KernelTimer timer(FSDP_RT_KERNEL_SOFTMAX);
  FloatInput x(dtype, logits, tokens * experts);
  FloatInput dw(dtype, dweights, tokens * top_k);
  FloatOutput dx(dtype, dlogits, tokens * experts);
  parallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> p(experts), dp(experts);
    for (int64_t t = begin; t < end; ++t) {
      probabilities(x.get() + t * experts, experts, p.data());
      const int64_t *chosen = indices + t * top_k;
      const float *g = dw.get() + t * top_k;
      std::fill(dp.begin(), dp.end(), 0.0f);
      if (normalize) {
        // w_j = p_j / s: dp_j = (g_j - Σ_i g_i w_i) / s.
        float s = 0, gw = 0;
        for (int64_t j = 0; j < top_k; ++j)
          s += p[chosen[j]];
        for (int64_t j = 0; j < top_k; ++j)
          gw += g[j] * p[chosen[j]] / s;
        for (int64_t j = 0; j < top_k; ++j)
          dp[chosen[j]] += (g[j] - gw) / s;
      } else {
        for (int64_t j = 0; j < top_k; ++j)
          dp[chosen[j]] += g[j];
      }
      softmaxBackward(p.data(), dp.data(), experts, dx.get() + t * experts);
    }
  });
  dx.finish();
}

void fsdp_rt_moe_permute(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                         const int64_t *indices, int64_t tokens, int64_t hidden,
                         int64_t top_k, int64_t experts, void *rows,
                         int64_t *counts) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  int64_t slots = tokens * top_k;
  std::vector<int64_t> row = slotRows(indices, slots, experts, counts);
  size_t bytes = size_t(hidden) * fsdp_rt_dtype_size(dtype);
  parallelFor(slots, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s)
      std::memcpy(at(rows, row[s] * hidden, dtype),
                  at(x, (s / top_k) * hidden, dtype), bytes);
  });
}

void fsdp_rt_moe_unpermute(fsdp_rt_stream, fsdp_rt_dtype dtype,
                           const void *rows, const int64_t *indices,
                           const void *weights, int64_t tokens, int64_t hidden,
                           int64_t top_k, int64_t experts, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  std::vector<int64_t> row =
      slotRows(indices, tokens * top_k, experts, nullptr);
  FloatInput w(dtype, weights, tokens * top_k);
  parallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> in(hidden), acc(hidden);
    for (int64_t t = begin; t < end; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        int64_t r = row[t * top_k + j];
        toFloat(dtype, at(rows, r * hidden, dtype), hidden, in.data());
        float scale = weights ? w.get()[t * top_k + j] : 1.0f;
        for (int64_t h = 0; h < hidden; ++h)
          acc[h] += scale * in[h];
      }
      fromFloat(dtype, acc.data(), hidden, at(out, t * hidden, dtype));
    }
  });
}

void fsdp_rt_moe_unpermute_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                                const void *rows, const int64_t *indices,
                                const void *weights, const void *dy,
                                int64_t tokens, int64_t hidden, int64_t top_k,
                                int64_t experts, void *drows, void *dweights) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  std::vector<int64_t> row =
      slotRows(indices, tokens * top_k, experts, nullptr);
  FloatInput w(dtype, weights, tokens * top_k);
  FloatOutput dw(dtype, dweights, tokens * top_k);
  parallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> g(hidden), in(hidden), scaled(hidden);
    for (int64_t t = begin; t < end; ++t) {
      toFloat(dtype, at(dy, t * hidden, dtype), hidden, g.data());
      for (int64_t j = 0; j < top_k; ++j) {
        int64_t s = t * top_k + j, r = row[s];
        toFloat(dtype, at(rows, r * hidden, dtype), hidden, in.data());
        double dot = 0;
        for (int64_t h = 0; h < hidden; ++h) {
          dot += double(in[h]) * g[h];
          scaled[h] = w.get()[s] * g[h];
        }
        dw.get()[s] = float(dot);
        fromFloat(dtype, scaled.data(), hidden, at(drows, r * hidden, dtype));
      }
    }
  });
  dw.finish();
}

void fsdp_rt_grouped_linear(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                            int64_t rows, int64_t k, const int64_t *counts,
                            int64_t segments, const void *w, int64_t experts,
                            int64_t n, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  int64_t used = segmentRows(counts, segments, rows, "grouped_linear");
  int64_t start = 0;
  for (int64_t g = 0; g < segments; ++g) {
    int64_t m = counts[g];
    if (m > 0)
      gemm(dtype, /*transA=*/false, /*transB=*/true, m, n, k,
           at(x, start * k, dtype), k, at(w, (g % experts) * n * k, dtype), k,
           nullptr, 0.0f, at(out, start * n, dtype), n);
    start += m;
  }
  std::memset(at(out, used * n, dtype), 0,
              size_t((rows - used) * n) * fsdp_rt_dtype_size(dtype));
}

void fsdp_rt_grouped_linear_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                                 const void *x, int64_t rows, int64_t k,
                                 const int64_t *counts, int64_t segments,
                                 const void *w, int64_t experts, int64_t n,
                                 const void *dy, void *dx, void *dw) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  int64_t used = segmentRows(counts, segments, rows, "grouped_linear_grad");
  // dx = dy · w[e] per segment; dw[e] sums dyᵀ · x over e's segments in
  // f32, rounded once.
  FloatInput fx(dtype, x, rows * k), fdy(dtype, dy, rows * n);
  FloatOutput fdw(dtype, dw, experts * n * k);
  std::vector<bool> written(experts, false);
  int64_t start = 0;
  for (int64_t g = 0; g < segments; ++g) {
    int64_t m = counts[g], e = g % experts;
    if (m > 0) {
      gemm(dtype, false, false, m, k, n, at(dy, start * n, dtype), n,
           at(w, e * n * k, dtype), k, nullptr, 0.0f, at(dx, start * k, dtype),
           k);
      sgemm(true, false, n, k, m, 1.0f, fdy.get() + start * n, n,
            fx.get() + start * k, k, nullptr, written[e] ? 1.0f : 0.0f,
            fdw.get() + e * n * k, k);
      written[e] = true;
    }
    start += m;
  }
  std::memset(at(dx, used * k, dtype), 0,
              size_t((rows - used) * k) * fsdp_rt_dtype_size(dtype));
  for (int64_t e = 0; e < experts; ++e)
    if (!written[e])
      std::fill(fdw.get() + e * n * k, fdw.get() + (e + 1) * n * k, 0.0f);
  fdw.finish();
}

void fsdp_rt_moe_rank_counts(fsdp_rt_stream, const int64_t *counts, int64_t n,
                             int64_t ranks, int64_t *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  sumBlocks(counts, n, ranks, out);
}

void fsdp_rt_moe_aux_stats(fsdp_rt_stream, fsdp_rt_dtype dtype,
                           const void *logits, int64_t tokens, int64_t experts,
                           int64_t top_k, float *stats) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput x(dtype, logits, tokens * experts);
  // Sequential over tokens: the sums are the same on any thread count.
  std::vector<double> counts(experts, 0), probs(experts, 0);
  std::vector<float> p(experts);
  std::vector<int64_t> chosen(top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    probabilities(x.get() + t * experts, experts, p.data());
    topK(p.data(), experts, top_k, chosen.data());
    for (int64_t j = 0; j < top_k; ++j)
      counts[chosen[j]] += 1;
    for (int64_t e = 0; e < experts; ++e)
      probs[e] += p[e];
  }
  for (int64_t e = 0; e < experts; ++e) {
    stats[e] = float(counts[e]);
    stats[experts + e] = float(probs[e]);
  }
  stats[2 * experts] = float(tokens);
}

void fsdp_rt_moe_aux_stats_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                                const void *logits, int64_t tokens,
                                int64_t experts, const float *dstats,
                                void *dlogits) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput x(dtype, logits, tokens * experts);
  FloatOutput dx(dtype, dlogits, tokens * experts);
  const float *dp = dstats + experts;
  parallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> p(experts);
    for (int64_t t = begin; t < end; ++t) {
      probabilities(x.get() + t * experts, experts, p.data());
      softmaxBackward(p.data(), dp, experts, dx.get() + t * experts);
    }
  });
  dx.finish();
}

void fsdp_rt_moe_aux_combine(fsdp_rt_stream, const float *stats,
                             int64_t experts, float *out) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  out[0] = auxLoss(stats, experts);
}

void fsdp_rt_moe_aux_combine_grad(fsdp_rt_stream, const float *stats,
                                  int64_t experts, const float *dy,
                                  float *dstats) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  auxLossGrad(stats, experts, dy[0], dstats);
}

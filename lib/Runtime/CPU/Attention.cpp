//===- Attention.cpp - Scaled dot-product attention with GQA, and grad ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Blocked over query rows: a block of kRows queries sees only keys
// [first, last) (the causal prefix, within the sliding window; with query
// positions, the union of the rows' ranges), so the
// scores, softmax and products skip the masked part (about half of a causal
// matrix). Per (batch, KV group) on the OpenMP threads, the query heads of a
// group in turn (they add into the same dK and dV); heads are picked out by
// leading-dimension strides, never transposed. The forward keeps each
// query's log-sum-exp; the backward recomputes a block's scores and turns
// them into probabilities in one pass with it (flash-attention style), then
// runs the four gradient products on the visible keys only.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "../Common/Counters.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace fsdp::rt;

namespace {
/// Query rows per block.
constexpr int64_t kRows = 64;

/// The keys [first, last) a block of queries [i0, i1) sees, or one query.
struct KeyRange {
  int64_t first, last;
};

/// Which keys each query of one batch row sees: query i sits at key index
/// p_i (its position when the call has positions, else i); a causal mask
/// shows it keys j <= p_i, a window further needs p_i - j < window, and a
/// packed row (the queries' document positions d_i) keys j >= p_i - d_i,
/// its document's first token.
struct Mask {
  int64_t skv;
  // This batch row's, or null.
  const int64_t *positions, *keyPositions, *documents;
  int causal;
  int64_t window;

  /// The first key whose position is at least `p`, or past it with `after`.
  int64_t firstKey(int64_t p, bool after) const {
    if (!keyPositions)
      return std::clamp<int64_t>(after ? p + 1 : p, 0, skv);
    const int64_t *end = keyPositions + skv;
    return (after ? std::upper_bound(keyPositions, end, p)
                  : std::lower_bound(keyPositions, end, p)) -
           keyPositions;
  }
  KeyRange of(int64_t i) const {
    int64_t p = positions ? positions[i] : i;
    int64_t lo = window > 0 ? firstKey(p - window + 1, false) : 0;
    if (documents)
      lo = std::max(lo, firstKey(p - documents[i], false));
    int64_t hi = causal ? firstKey(p, true) : skv;
    return {lo, std::max(lo, hi)};
  }
  /// The union of the ranges of queries [i0, i1); empty if all are.
  KeyRange of(int64_t i0, int64_t i1) const {
    KeyRange keys{skv, 0};
    for (int64_t i = i0; i < i1; ++i) {
      KeyRange own = of(i);
      if (own.first == own.last)
        continue;
      keys.first = std::min(keys.first, own.first);
      keys.last = std::max(keys.last, own.last);
    }
    return keys.first < keys.last ? keys : KeyRange{0, 0};
  }
};

/// Turns a block's scores [i1 - i0, last - first] into probabilities in
/// place, each row over the keys its query sees, and writes each row's
/// log Σ exp(score) to lse[i - i0] (-inf for a query that sees no key).
FSDP_VECTORIZE void maskedSoftmax(float *scores, int64_t i0, int64_t i1,
                                  KeyRange keys, const Mask &mask, float *lse) {
  int64_t width = keys.last - keys.first;
  for (int64_t i = i0; i < i1; ++i) {
    float *row = scores + (i - i0) * width;
    KeyRange own = mask.of(i);
    int64_t lo = std::max<int64_t>(0, own.first - keys.first),
            hi = std::max(lo, std::min(width, own.last - keys.first));
    float maxScore = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j < hi; ++j)
      maxScore = std::max(maxScore, row[j]);
    if (lo == hi) {
      std::fill(row, row + width, 0.0f);
      lse[i - i0] = maxScore;
      continue;
    }
    float sum = 0;
    for (int64_t j = 0; j < width; ++j) {
      float e = fastExp(row[j] - maxScore);
      row[j] = (j >= lo && j < hi) ? e : 0.0f;
      sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int64_t j = lo; j < hi; ++j)
      row[j] *= inv;
    lse[i - i0] = maxScore + std::log(sum);
  }
}

/// The probabilities of a block from its scores and the forward's
/// log-sum-exp per row: exp(score - lse) on the visible keys, 0 elsewhere.
FSDP_VECTORIZE void probabilities(float *scores, int64_t i0, int64_t i1,
                                  KeyRange keys, const Mask &mask,
                                  const float *lse) {
  int64_t width = keys.last - keys.first;
  for (int64_t i = i0; i < i1; ++i) {
    float *row = scores + (i - i0) * width;
    KeyRange own = mask.of(i);
    int64_t lo = own.first - keys.first, hi = own.last - keys.first;
    float shift = lse[i - i0];
    for (int64_t j = 0; j < width; ++j) {
      float e = (j >= lo && j < hi) ? fastExp(row[j] - shift) : 0.0f;
      row[j] = e;
    }
  }
}

/// dS = P · (dP - Δ + dLSE) per row, in place of dP, with Δ = Σ_j P·dP =
/// Σ_d dO·O read from the forward's output (`out` and `dout` rows `stride`
/// apart): over all the keys the output saw, so that a ring step given the
/// merged attention's output and statistics gets its share of the merged
/// gradient. dlse: the rows' statistics gradients, or null. Masked keys have
/// P = 0 and get no gradient.
FSDP_VECTORIZE void softmaxGrad(const float *probs, float *dprobs, int64_t rows,
                                int64_t width, const float *out,
                                const float *dout, int64_t stride, int64_t dv,
                                const float *dlse) {
  for (int64_t i = 0; i < rows; ++i) {
    const float *p = probs + i * width;
    float *dp = dprobs + i * width;
    double dot = 0;
    for (int64_t d = 0; d < dv; ++d)
      dot += double(out[i * stride + d]) * dout[i * stride + d];
    if (dlse)
      dot -= dlse[i];
    for (int64_t j = 0; j < width; ++j)
      dp[j] = p[j] * (dp[j] - float(dot));
  }
}

/// The geometry of one call: queries [B, S, heads, D], keys and values
/// [B, Skv, heads, D].
struct Heads {
  int64_t b, s, skv, nq, nkv, d, dv;
  const int64_t *positions, *keyPositions, *documents;
  int causal;
  int64_t window;
  float scale;
  /// The elements of q, k, v and out.
  int64_t qElems() const { return b * s * nq * d; }
  int64_t kElems() const { return b * skv * nkv * d; }
  int64_t vElems() const { return b * skv * nkv * dv; }
  int64_t oElems() const { return b * s * nq * dv; }
  int64_t group() const { return nq / nkv; }
  int64_t qOffset(int64_t bi, int64_t h) const { return (bi * s * nq + h) * d; }
  int64_t kOffset(int64_t bi, int64_t g) const {
    return (bi * skv * nkv + g) * d;
  }
  int64_t vOffset(int64_t bi, int64_t g) const {
    return (bi * skv * nkv + g) * dv;
  }
  int64_t oOffset(int64_t bi, int64_t h) const {
    return (bi * s * nq + h) * dv;
  }
  /// Row 0 of head h's statistics, [b, nq, s].
  int64_t lseOffset(int64_t bi, int64_t h) const { return (bi * nq + h) * s; }
  Mask mask(int64_t bi) const {
    return {skv,
            positions ? positions + bi * s : nullptr,
            keyPositions ? keyPositions + bi * skv : nullptr,
            documents ? documents + bi * s : nullptr,
            causal,
            window};
  }
};

Heads headsOf(int64_t b, int64_t s, int64_t skv, int64_t nq, int64_t nkv,
              int64_t d, int64_t dv, const int64_t *positions,
              const int64_t *keyPositions, const int64_t *documents, int causal,
              int64_t window, double scale) {
  Heads h = {};
  h.b = b, h.s = s, h.skv = skv, h.nq = nq, h.nkv = nkv, h.d = d, h.dv = dv;
  h.positions = positions, h.keyPositions = keyPositions;
  h.documents = documents;
  h.causal = causal, h.window = window, h.scale = float(scale);
  return h;
}

/// Runs fn(batch, group) for every (batch, KV group) on the threads.
template <typename Fn> void forEachGroup(const Heads &h, Fn fn) {
  parallelFor(h.b * h.nkv, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      fn(t / h.nkv, t % h.nkv);
  });
}
} // namespace

void fsdp_rt_attention(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *q,
                       const void *k, const void *v, int64_t b, int64_t s,
                       int64_t skv, int64_t nq, int64_t nkv, int64_t d,
                       int64_t dv, const int64_t *positions,
                       const int64_t *key_positions,
                       const int64_t *document_positions, int causal,
                       int64_t sliding_window, double scale, void *out,
                       float *lse) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  const Heads hd = headsOf(b, s, skv, nq, nkv, d, dv, positions, key_positions,
                           document_positions, causal, sliding_window, scale);
  FloatInput fq(dtype, q, hd.qElems()), fk(dtype, k, hd.kElems()),
      fv(dtype, v, hd.vElems());
  FloatOutput fo(dtype, out, hd.oElems());
  const float *pq = fq.get(), *pk = fk.get(), *pv = fv.get();
  float *po = fo.get();
  forEachGroup(hd, [&](int64_t bi, int64_t g) {
    std::vector<float> scores(kRows * skv);
    Mask mask = hd.mask(bi);
    for (int64_t h = g * hd.group(); h < (g + 1) * hd.group(); ++h) {
      const float *qh = pq + hd.qOffset(bi, h), *kh = pk + hd.kOffset(bi, g),
                  *vh = pv + hd.vOffset(bi, g);
      float *oh = po + hd.oOffset(bi, h);
      for (int64_t i0 = 0; i0 < s; i0 += kRows) {
        int64_t i1 = std::min(s, i0 + kRows), rows = i1 - i0;
        KeyRange keys = mask.of(i0, i1);
        int64_t width = keys.last - keys.first;
        float *rowLse = lse + hd.lseOffset(bi, h) + i0;
        if (width == 0) {
          // No query of the block sees a key: zero rows, lse -inf.
          for (int64_t i = 0; i < rows; ++i) {
            std::fill_n(oh + (i0 + i) * nq * dv, dv, 0.0f);
            rowLse[i] = -std::numeric_limits<float>::infinity();
          }
          continue;
        }
        sgemm(false, true, rows, width, d, hd.scale, qh + i0 * nq * d, nq * d,
              kh + keys.first * nkv * d, nkv * d, nullptr, 0.0f, scores.data(),
              width);
        maskedSoftmax(scores.data(), i0, i1, keys, mask, rowLse);
        sgemm(false, false, rows, dv, width, 1.0f, scores.data(), width,
              vh + keys.first * nkv * dv, nkv * dv, nullptr, 0.0f,
              oh + i0 * nq * dv, nq * dv);
      }
    }
  });
  fo.finish();
  // The pairs the masks showed, for the load-balance report.
  int64_t pairs = 0;
  for (int64_t bi = 0; bi < b; ++bi) {
    Mask mask = hd.mask(bi);
    for (int64_t i = 0; i < s; ++i) {
      KeyRange own = mask.of(i);
      pairs += own.last - own.first;
    }
  }
  fsdp::rt::counters::addAttentionPairs(pairs * nq);
}

void fsdp_rt_attention_grad(
    fsdp_rt_stream, fsdp_rt_dtype dtype, const void *q, const void *k,
    const void *v, const void *out, const float *lse, const void *dout,
    const float *dlse, int64_t b, int64_t s, int64_t skv, int64_t nq,
    int64_t nkv, int64_t d, int64_t dv, const int64_t *positions,
    const int64_t *key_positions, const int64_t *document_positions, int causal,
    int64_t sliding_window, double scale, void *dq, void *dk, void *dvalue) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  const Heads hd = headsOf(b, s, skv, nq, nkv, d, dv, positions, key_positions,
                           document_positions, causal, sliding_window, scale);
  FloatInput fq(dtype, q, hd.qElems()), fk(dtype, k, hd.kElems()),
      fv(dtype, v, hd.vElems()), fdo(dtype, dout, hd.oElems()),
      fo(dtype, out, hd.oElems());
  FloatOutput fdq(dtype, dq, hd.qElems()), fdk(dtype, dk, hd.kElems()),
      fdv(dtype, dvalue, hd.vElems());
  // The query heads of a group add into the same dk and dvalue; a query
  // that sees no key gets a zero gradient.
  std::fill(fdk.get(), fdk.get() + hd.kElems(), 0.0f);
  std::fill(fdv.get(), fdv.get() + hd.vElems(), 0.0f);
  std::fill(fdq.get(), fdq.get() + hd.qElems(), 0.0f);
  const float *pq = fq.get(), *pk = fk.get(), *pv = fv.get(), *pdo = fdo.get(),
              *po = fo.get();
  forEachGroup(hd, [&](int64_t bi, int64_t g) {
    std::vector<float> probs(kRows * skv), dprobs(kRows * skv);
    Mask mask = hd.mask(bi);
    const float *kh = pk + hd.kOffset(bi, g), *vh = pv + hd.vOffset(bi, g);
    float *dkh = fdk.get() + hd.kOffset(bi, g);
    float *dvh = fdv.get() + hd.vOffset(bi, g);
    for (int64_t h = g * hd.group(); h < (g + 1) * hd.group(); ++h) {
      const float *qh = pq + hd.qOffset(bi, h), *doh = pdo + hd.oOffset(bi, h),
                  *oh = po + hd.oOffset(bi, h);
      float *dqh = fdq.get() + hd.qOffset(bi, h);
      for (int64_t i0 = 0; i0 < s; i0 += kRows) {
        int64_t i1 = std::min(s, i0 + kRows), rows = i1 - i0;
        KeyRange keys = mask.of(i0, i1);
        int64_t width = keys.last - keys.first;
        if (width == 0)
          continue;
        const float *kv = kh + keys.first * nkv * d,
                    *vv = vh + keys.first * nkv * dv;
        sgemm(false, true, rows, width, d, hd.scale, qh + i0 * nq * d, nq * d,
              kv, nkv * d, nullptr, 0.0f, probs.data(), width);
        probabilities(probs.data(), i0, i1, keys, mask,
                      lse + hd.lseOffset(bi, h) + i0);
        // dV += Pᵀ·dO and dP = dO·Vᵀ on the visible keys.
        sgemm(true, false, width, dv, rows, 1.0f, probs.data(), width,
              doh + i0 * nq * dv, nq * dv, nullptr, 1.0f,
              dvh + keys.first * nkv * dv, nkv * dv);
        sgemm(false, true, rows, width, dv, 1.0f, doh + i0 * nq * dv, nq * dv,
              vv, nkv * dv, nullptr, 0.0f, dprobs.data(), width);
        softmaxGrad(probs.data(), dprobs.data(), rows, width, oh + i0 * nq * dv,
                    doh + i0 * nq * dv, nq * dv, dv,
                    dlse ? dlse + hd.lseOffset(bi, h) + i0 : nullptr);
        // dQ = scale·dS·K and dK += scale·dSᵀ·Q.
        sgemm(false, false, rows, d, width, hd.scale, dprobs.data(), width, kv,
              nkv * d, nullptr, 0.0f, dqh + i0 * nq * d, nq * d);
        sgemm(true, false, width, d, rows, hd.scale, dprobs.data(), width,
              qh + i0 * nq * d, nq * d, nullptr, 1.0f,
              dkh + keys.first * nkv * d, nkv * d);
      }
    }
  });
  fdq.finish();
  fdk.finish();
  fdv.finish();
}

void fsdp_rt_attention_combine(fsdp_rt_stream, fsdp_rt_dtype dtype,
                               const void *out_a, const float *lse_a,
                               const void *out_b, const float *lse_b, int64_t b,
                               int64_t s, int64_t nq, int64_t dv, void *out,
                               float *lse) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  int64_t n = b * s * nq * dv;
  FloatInput fa(dtype, out_a, n), fb(dtype, out_b, n);
  FloatOutput fo(dtype, out, n);
  const float *pa = fa.get(), *pb = fb.get();
  float *po = fo.get();
  // Row (bi, i, h) of the results; statistic [bi, h, i].
  parallelFor(b * s * nq, 256, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t bi = row / (s * nq), i = row / nq % s, h = row % nq;
      int64_t at = (bi * nq + h) * s + i;
      float la = lse_a[at], lb = lse_b[at], m = std::max(la, lb);
      float total = m == -std::numeric_limits<float>::infinity()
                        ? m
                        : m + std::log(std::exp(la - m) + std::exp(lb - m));
      float wa = la == -std::numeric_limits<float>::infinity()
                     ? 0.0f
                     : std::exp(la - total),
            wb = lb == -std::numeric_limits<float>::infinity()
                     ? 0.0f
                     : std::exp(lb - total);
      lse[at] = total;
      for (int64_t e = row * dv; e < (row + 1) * dv; ++e)
        po[e] = wa * pa[e] + wb * pb[e];
    }
  });
  fo.finish();
}

void fsdp_rt_attention_combine_grad(
    fsdp_rt_stream, fsdp_rt_dtype dtype, const void *out_a, const float *lse_a,
    const void *out_b, const float *lse_b, const void *out, const float *lse,
    const void *dout, const float *dlse, int64_t b, int64_t s, int64_t nq,
    int64_t dv, void *dout_a, float *dlse_a, void *dout_b, float *dlse_b) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  int64_t n = b * s * nq * dv;
  FloatInput fa(dtype, out_a, n), fb(dtype, out_b, n), fo(dtype, out, n),
      fd(dtype, dout, n);
  FloatOutput fda(dtype, dout_a, n), fdb(dtype, dout_b, n);
  const float *pa = fa.get(), *pb = fb.get(), *po = fo.get(), *pd = fd.get();
  float *pda = fda.get(), *pdb = fdb.get();
  parallelFor(b * s * nq, 256, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      int64_t bi = row / (s * nq), i = row / nq % s, h = row % nq;
      int64_t at = (bi * nq + h) * s + i;
      float total = lse[at];
      auto weight = [&](float l) {
        return l == -std::numeric_limits<float>::infinity()
                   ? 0.0f
                   : std::exp(l - total);
      };
      float wa = weight(lse_a[at]), wb = weight(lse_b[at]);
      double dotA = dlse ? dlse[at] : 0.0, dotB = dotA;
      for (int64_t e = row * dv; e < (row + 1) * dv; ++e) {
        dotA += double(pd[e]) * (pa[e] - po[e]);
        dotB += double(pd[e]) * (pb[e] - po[e]);
        pda[e] = wa * pd[e];
        pdb[e] = wb * pd[e];
      }
      dlse_a[at] = wa * float(dotA);
      dlse_b[at] = wb * float(dotB);
    }
  });
  fda.finish();
  fdb.finish();
}

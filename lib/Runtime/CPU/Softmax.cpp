//===- Softmax.cpp - softmax and cross_entropy, and their grads -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Both subtract the row maximum before exponentiating so that large logits
// cannot overflow.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace fsdp::rt;

namespace {
/// Independent accumulators of the row loops: lane l sums elements l, l +
/// kLanes, ..., so the loops vectorize without reassociating, and the lanes
/// combine in a fixed order (the same bits with any thread count).
constexpr int64_t kLanes = 16;

FSDP_VECTORIZE float maxOf(const float *x, int64_t n) {
  float acc[kLanes];
  std::fill(acc, acc + kLanes, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      acc[l] = std::max(acc[l], x[i + l]);
  for (; i < n; ++i)
    acc[0] = std::max(acc[0], x[i]);
  return *std::max_element(acc, acc + kLanes);
}

/// Σ e^(x - shift), writing each term to `terms` when it is not null.
FSDP_VECTORIZE float sumExp(const float *x, int64_t n, float shift,
                            float *terms) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      float e = fastExp(x[i + l] - shift);
      if (terms)
        terms[i + l] = e;
      acc[l] += e;
    }
  for (; i < n; ++i) {
    float e = fastExp(x[i] - shift);
    if (terms)
      terms[i] = e;
    acc[0] += e;
  }
  float sum = 0;
  for (float a : acc)
    sum += a;
  return sum;
}

FSDP_VECTORIZE void scaleInPlace(float *x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i)
    x[i] *= factor;
}

/// The max and Σ e^(x - max) of a row in one pass over it, block by block
/// with a running max (the sum so far rescaled when the max grows). With
/// `terms`, also writes e^(x - max of the blocks so far) and each block's
/// max to `blockMax`, which finishTerms turns into e^(x - max).
struct RowStats {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0;

  void add(const float *x, int64_t n, float *terms, float *blockMax) {
    for (int64_t b = 0, k = 0; b < n; b += kBlock, ++k) {
      int64_t len = std::min(kBlock, n - b);
      float next = std::max(max, maxOf(x + b, len));
      float rescale = sum == 0 ? 0.0f : fastExp(max - next);
      sum =
          sum * rescale + sumExp(x + b, len, next, terms ? terms + b : nullptr);
      max = next;
      if (blockMax)
        blockMax[k] = next;
    }
  }

  /// Scales the terms add() wrote by factor · e^(block max - max).
  void finishTerms(float *terms, int64_t n, const float *blockMax,
                   float factor) const {
    for (int64_t b = 0, k = 0; b < n; b += kBlock, ++k)
      scaleInPlace(terms + b, std::min(kBlock, n - b),
                   factor * fastExp(blockMax[k] - max));
  }
};

/// Row r of a [rows, n] operand as f32: in place for f32, else converted
/// into `scratch` (n floats).
const float *rowOf(fsdp_rt_dtype dtype, const void *x, int64_t r, int64_t n,
                   float *scratch) {
  if (dtype == FSDP_RT_F32)
    return static_cast<const float *>(x) + r * n;
  toFloat(dtype, static_cast<const uint16_t *>(x) + r * n, n, scratch);
  return scratch;
}

/// Row r of a [rows, n] result: in place for f32, else `scratch`, which
/// storeRow narrows into it.
float *outRowOf(fsdp_rt_dtype dtype, void *out, int64_t r, int64_t n,
                float *scratch) {
  return dtype == FSDP_RT_F32 ? static_cast<float *>(out) + r * n : scratch;
}

void storeRow(fsdp_rt_dtype dtype, const float *row, void *out, int64_t r,
              int64_t n) {
  if (dtype != FSDP_RT_F32)
    fromFloat(dtype, row, n, static_cast<uint16_t *>(out) + r * n);
}

/// Rows per thread below which a row loop stays on one thread.
constexpr int64_t kRowGrain = 8;
} // namespace

void fsdp_rt_softmax(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                     const int64_t *shape, int rank, int dim, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_SOFTMAX);
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, len = v.len, inner = v.inner;
  int64_t n = outer * len * inner;
  if (inner == 1) {
    // Along the last dim: contiguous rows, on the threads.
    parallelFor(outer, kRowGrain, [&](int64_t begin, int64_t end) {
      bool narrow = dtype != FSDP_RT_F32;
      std::vector<float> in(narrow ? len : 0), result(narrow ? len : 0);
      for (int64_t r = begin; r < end; ++r) {
        const float *xr = rowOf(dtype, x, r, len, in.data());
        float *orow = outRowOf(dtype, out, r, len, result.data());
        float sum = sumExp(xr, len, maxOf(xr, len), orow);
        scaleInPlace(orow, len, 1.0f / sum);
        storeRow(dtype, orow, out, r, len);
      }
    });
    return;
  }
  FloatInput fx(dtype, x, n);
  FloatOutput fo(dtype, out, n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      // Elements of one softmax are `inner` apart.
      const float *xr = fx.get() + o * len * inner + in;
      float *or_ = fo.get() + o * len * inner + in;
      float maxVal = xr[0];
      for (int64_t i = 1; i < len; ++i)
        maxVal = std::max(maxVal, xr[i * inner]);
      double sum = 0;
      for (int64_t i = 0; i < len; ++i) {
        float e = std::exp(xr[i * inner] - maxVal);
        or_[i * inner] = e;
        sum += e;
      }
      float inv = float(1.0 / sum);
      for (int64_t i = 0; i < len; ++i)
        or_[i * inner] *= inv;
    }
  }
  fo.finish();
}

void fsdp_rt_cross_entropy(fsdp_rt_stream, fsdp_rt_dtype dtype,
                           const void *logits, fsdp_rt_dtype labels_dtype,
                           const void *labels, int64_t rows, int64_t vocab,
                           int64_t ignore_index, fsdp_rt_reduction reduction,
                           float *out, int64_t *count) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  // -log softmax[label] = max + log Σ e^(x - max) - x[label], per row on the
  // threads; the rows add up in order afterwards.
  std::vector<double> losses(rows, 0.0);
  std::vector<char> counts(rows, 0);
  parallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(dtype == FSDP_RT_F32 ? 0 : vocab);
    for (int64_t r = begin; r < end; ++r) {
      int64_t label = loadIndex(labels_dtype, labels, r);
      if (label == ignore_index)
        continue;
      const float *xr = rowOf(dtype, logits, r, vocab, scratch.data());
      RowStats stats;
      stats.add(xr, vocab, nullptr, nullptr);
      losses[r] = double(stats.max) + std::log(double(stats.sum)) - xr[label];
      counts[r] = 1;
    }
  });
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (reduction == FSDP_RT_REDUCTION_NONE)
      out[r] = float(losses[r]);
    total += losses[r];
    counted += counts[r];
  }
  // A mean over no counted position is 0/0 = NaN, as in PyTorch.
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    out[0] = float(total / double(counted));
  else if (reduction == FSDP_RT_REDUCTION_SUM)
    out[0] = float(total);
  if (count)
    *count = counted;
}

void fsdp_rt_softmax_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *y,
                          const void *dy, const int64_t *shape, int rank,
                          int dim, void *dx) {
  KernelTimer timer(FSDP_RT_KERNEL_SOFTMAX);
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, len = v.len, inner = v.inner;
  int64_t n = outer * len * inner;
  FloatInput fy(dtype, y, n), fdy(dtype, dy, n);
  FloatOutput fo(dtype, dx, n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      int64_t base = o * len * inner + in;
      const float *yr = fy.get() + base, *dyr = fdy.get() + base;
      float *or_ = fo.get() + base;
      double dot = 0;
      for (int64_t i = 0; i < len; ++i)
        dot += double(yr[i * inner]) * dyr[i * inner];
      for (int64_t i = 0; i < len; ++i)
        or_[i * inner] = yr[i * inner] * (dyr[i * inner] - float(dot));
    }
  }
  fo.finish();
}

void fsdp_rt_cross_entropy_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                                const void *logits, fsdp_rt_dtype labels_dtype,
                                const void *labels, int64_t rows, int64_t vocab,
                                int64_t ignore_index,
                                fsdp_rt_reduction reduction, const float *dloss,
                                void *dlogits) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += loadIndex(labels_dtype, labels, r) != ignore_index;
  // g · (softmax - onehot(label)): each e^x is computed once, in the pass
  // that finds the max, and scaled into place afterwards.
  parallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    bool narrow = dtype != FSDP_RT_F32;
    std::vector<float> in(narrow ? vocab : 0), result(narrow ? vocab : 0),
        blockMax((vocab + kBlock - 1) / kBlock);
    for (int64_t r = begin; r < end; ++r) {
      int64_t label = loadIndex(labels_dtype, labels, r);
      float *dr = outRowOf(dtype, dlogits, r, vocab, result.data());
      if (label == ignore_index) {
        std::fill(dr, dr + vocab, 0.0f);
        storeRow(dtype, dr, dlogits, r, vocab);
        continue;
      }
      double g = reduction == FSDP_RT_REDUCTION_NONE ? dloss[r]
                 : reduction == FSDP_RT_REDUCTION_MEAN
                     ? dloss[0] / double(counted)
                     : dloss[0];
      const float *xr = rowOf(dtype, logits, r, vocab, in.data());
      RowStats stats;
      stats.add(xr, vocab, dr, blockMax.data());
      stats.finishTerms(dr, vocab, blockMax.data(), float(g / stats.sum));
      dr[label] -= float(g);
      storeRow(dtype, dr, dlogits, r, vocab);
    }
  });
}

void fsdp_rt_reduce_max(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                        int64_t rows, int64_t n, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput fx(dtype, x, rows * n);
  FloatOutput fo(dtype, out, rows);
  for (int64_t r = 0; r < rows; ++r)
    fo.get()[r] = *std::max_element(fx.get() + r * n, fx.get() + (r + 1) * n);
  fo.finish();
}

namespace {
/// The classes of a block [first, first + vocab) below `num_classes` (all
/// when it is <= 0): the others are a padded vocabulary's.
int64_t validClasses(int64_t vocab, int64_t first, int64_t numClasses) {
  if (numClasses <= 0)
    return vocab;
  return std::max<int64_t>(0, std::min(vocab, numClasses - first));
}
} // namespace

void fsdp_rt_cross_entropy_partial(
    fsdp_rt_stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, float *sum_exp, float *target) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput fshift(dtype, shift, rows);
  int64_t valid = validClasses(vocab, first_class, num_classes);
  parallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(dtype == FSDP_RT_F32 ? 0 : vocab);
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = rowOf(dtype, logits, r, vocab, scratch.data());
      float m = fshift.get()[r];
      sum_exp[r] = sumExp(xr, valid, m, nullptr);
      int64_t label = loadIndex(labels_dtype, labels, r);
      int64_t local = label - first_class;
      target[r] = label != ignore_index && local >= 0 && local < vocab
                      ? xr[local] - m
                      : 0.0f;
    }
  });
}

void fsdp_rt_cross_entropy_partial_grad(
    fsdp_rt_stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, const float *dsum_exp, const float *dtarget,
    void *dlogits) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput fshift(dtype, shift, rows);
  int64_t valid = validClasses(vocab, first_class, num_classes);
  parallelFor(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    bool narrow = dtype != FSDP_RT_F32;
    std::vector<float> in(narrow ? vocab : 0), result(narrow ? vocab : 0);
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = rowOf(dtype, logits, r, vocab, in.data());
      float *dr = outRowOf(dtype, dlogits, r, vocab, result.data());
      sumExp(xr, valid, fshift.get()[r], dr);
      scaleInPlace(dr, valid, dsum_exp[r]);
      std::fill(dr + valid, dr + vocab, 0.0f);
      int64_t label = loadIndex(labels_dtype, labels, r);
      int64_t local = label - first_class;
      if (label != ignore_index && local >= 0 && local < vocab)
        dr[local] += dtarget[r];
      storeRow(dtype, dr, dlogits, r, vocab);
    }
  });
}

void fsdp_rt_cross_entropy_combine(fsdp_rt_stream, const float *sum_exp,
                                   const float *target,
                                   fsdp_rt_dtype labels_dtype,
                                   const void *labels, int64_t rows,
                                   int64_t ignore_index,
                                   fsdp_rt_reduction reduction, float *out,
                                   int64_t *count) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool counts = loadIndex(labels_dtype, labels, r) != ignore_index;
    double loss = counts ? std::log(double(sum_exp[r])) - target[r] : 0.0;
    if (reduction == FSDP_RT_REDUCTION_NONE)
      out[r] = float(loss);
    total += loss;
    counted += counts;
  }
  if (count)
    *count = counted;
  if (reduction == FSDP_RT_REDUCTION_SUM)
    *out = float(total);
  else if (reduction == FSDP_RT_REDUCTION_MEAN)
    *out = float(total / double(counted));
}

void fsdp_rt_cross_entropy_combine_grad(fsdp_rt_stream, const float *sum_exp,
                                        fsdp_rt_dtype labels_dtype,
                                        const void *labels, int64_t rows,
                                        int64_t ignore_index,
                                        fsdp_rt_reduction reduction,
                                        const float *dloss, float *dsum_exp,
                                        float *dtarget) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += loadIndex(labels_dtype, labels, r) != ignore_index;
  for (int64_t r = 0; r < rows; ++r) {
    double g = reduction == FSDP_RT_REDUCTION_NONE ? dloss[r]
               : reduction == FSDP_RT_REDUCTION_SUM
                   ? dloss[0]
                   : dloss[0] / double(counted);
    if (loadIndex(labels_dtype, labels, r) == ignore_index)
      g = 0.0;
    dsum_exp[r] = float(g / double(sum_exp[r]));
    dtarget[r] = float(-g);
  }
}

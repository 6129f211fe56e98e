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

using namespace fsdp::rt;

void fsdp_rt_softmax(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                     const int64_t *shape, int rank, int dim, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_SOFTMAX);
  if (dim < 0)
    dim += rank;
  int64_t outer = numElements(shape, dim), len = shape[dim],
          inner = numElements(shape + dim + 1, rank - dim - 1);
  int64_t n = outer * len * inner;
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
  FloatInput fx(dtype, logits, rows * vocab);
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = loadIndex(labels_dtype, labels, r);
    if (label == ignore_index) {
      if (reduction == FSDP_RT_REDUCTION_NONE)
        out[r] = 0.0f;
      continue;
    }
    const float *xr = fx.get() + r * vocab;
    float maxVal = *std::max_element(xr, xr + vocab);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i)
      sum += std::exp(double(xr[i] - maxVal));
    // -log softmax[label] = logsumexp - logit[label].
    double loss = maxVal + std::log(sum) - xr[label];
    if (reduction == FSDP_RT_REDUCTION_NONE)
      out[r] = float(loss);
    total += loss;
    ++counted;
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
  if (dim < 0)
    dim += rank;
  int64_t outer = numElements(shape, dim), len = shape[dim],
          inner = numElements(shape + dim + 1, rank - dim - 1);
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
  FloatInput fx(dtype, logits, rows * vocab);
  FloatOutput fo(dtype, dlogits, rows * vocab);
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r)
    counted += loadIndex(labels_dtype, labels, r) != ignore_index;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = loadIndex(labels_dtype, labels, r);
    float *or_ = fo.get() + r * vocab;
    if (label == ignore_index) {
      std::fill(or_, or_ + vocab, 0.0f);
      continue;
    }
    double g = reduction == FSDP_RT_REDUCTION_NONE ? dloss[r]
               : reduction == FSDP_RT_REDUCTION_MEAN
                   ? dloss[0] / double(counted)
                   : dloss[0];
    const float *xr = fx.get() + r * vocab;
    float maxVal = *std::max_element(xr, xr + vocab);
    double sum = 0;
    for (int64_t i = 0; i < vocab; ++i)
      sum += std::exp(double(xr[i] - maxVal));
    double scale = g / sum;
    for (int64_t i = 0; i < vocab; ++i)
      or_[i] = float(std::exp(double(xr[i] - maxVal)) * scale);
    or_[label] = float(std::exp(double(xr[label] - maxVal)) * scale - g);
  }
  fo.finish();
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
  FloatInput fx(dtype, logits, rows * vocab);
  FloatInput fshift(dtype, shift, rows);
  int64_t valid = validClasses(vocab, first_class, num_classes);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = fx.get() + r * vocab;
    float m = fshift.get()[r];
    double sum = 0;
    for (int64_t i = 0; i < valid; ++i)
      sum += std::exp(double(xr[i] - m));
    sum_exp[r] = float(sum);
    int64_t label = loadIndex(labels_dtype, labels, r);
    int64_t local = label - first_class;
    target[r] = label != ignore_index && local >= 0 && local < vocab
                    ? xr[local] - m
                    : 0.0f;
  }
}

void fsdp_rt_cross_entropy_partial_grad(
    fsdp_rt_stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, const float *dsum_exp, const float *dtarget,
    void *dlogits) {
  KernelTimer timer(FSDP_RT_KERNEL_LOSS);
  FloatInput fx(dtype, logits, rows * vocab);
  FloatInput fshift(dtype, shift, rows);
  FloatOutput fo(dtype, dlogits, rows * vocab);
  int64_t valid = validClasses(vocab, first_class, num_classes);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = fx.get() + r * vocab;
    float *dr = fo.get() + r * vocab;
    float m = fshift.get()[r];
    double g = dsum_exp[r];
    for (int64_t i = 0; i < vocab; ++i)
      dr[i] = i < valid ? float(std::exp(double(xr[i] - m)) * g) : 0.0f;
    int64_t label = loadIndex(labels_dtype, labels, r);
    int64_t local = label - first_class;
    if (label != ignore_index && local >= 0 && local < vocab)
      dr[local] += dtarget[r];
  }
  fo.finish();
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

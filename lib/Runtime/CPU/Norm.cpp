//===- Norm.cpp - rms_norm and layer_norm ---------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Row statistics are summed in double: a row is only a few thousand values,
// and it keeps the result independent of the hidden size. Rows run on the
// threads; weight gradients add fixed chunks of kNormRows rows in order, so
// their bits do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>

using namespace fsdp::rt;

namespace {
/// Rows per chunk of the weight-gradient sums.
constexpr int64_t kNormRows = 32;

/// Σ x² in double.
double sumSquares(const float *x, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += double(x[i]) * x[i];
  return sum;
}
} // namespace

void fsdp_rt_rms_norm(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                      const void *weight, int64_t rows, int64_t h, double eps,
                      void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_NORM);
  FloatInput fx(dtype, x, rows * h), fw(dtype, weight, h);
  FloatOutput fo(dtype, out, rows * h);
  const float *w = fw.get();
  parallelFor(rows, kNormRows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *xr = fx.get() + r * h;
      float *or_ = fo.get() + r * h;
      float inv = float(1.0 / std::sqrt(sumSquares(xr, h) / h + eps));
      for (int64_t i = 0; i < h; ++i)
        or_[i] = xr[i] * inv * w[i];
    }
  });
  fo.finish();
}

void fsdp_rt_layer_norm(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                        const void *weight, const void *bias, int64_t rows,
                        int64_t h, double eps, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_NORM);
  FloatInput fx(dtype, x, rows * h), fw(dtype, weight, h), fb(dtype, bias, h);
  FloatOutput fo(dtype, out, rows * h);
  const float *w = fw.get(), *b = fb.get();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = fx.get() + r * h;
    float *or_ = fo.get() + r * h;
    double sum = 0;
    for (int64_t i = 0; i < h; ++i)
      sum += xr[i];
    double mean = sum / h;
    // Two passes: the centred sum of squares does not cancel.
    double sumSq = 0;
    for (int64_t i = 0; i < h; ++i)
      sumSq += (xr[i] - mean) * (xr[i] - mean);
    float inv = float(1.0 / std::sqrt(sumSq / h + eps));
    float m = float(mean);
    for (int64_t i = 0; i < h; ++i)
      or_[i] = (xr[i] - m) * inv * w[i] + (b ? b[i] : 0.0f);
  }
  fo.finish();
}

/// Writes the f32 sums of `sums` to a weight-shaped gradient of `dtype`.
static void storeSums(fsdp_rt_dtype dtype, const std::vector<double> &sums,
                      void *out) {
  FloatOutput fo(dtype, out, int64_t(sums.size()));
  for (size_t i = 0; i < sums.size(); ++i)
    fo.get()[i] = float(sums[i]);
  fo.finish();
}

void fsdp_rt_rms_norm_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                           const void *weight, const void *dy, int64_t rows,
                           int64_t h, double eps, void *dx, void *dweight) {
  KernelTimer timer(FSDP_RT_KERNEL_NORM);
  FloatInput fx(dtype, x, rows * h), fw(dtype, weight, h),
      fdy(dtype, dy, rows * h);
  FloatOutput fdx(dtype, dx, rows * h);
  const float *w = fw.get();
  int64_t chunks = (rows + kNormRows - 1) / kNormRows;
  std::vector<double> partial(chunks * h, 0.0);
  parallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double *dwc = partial.data() + c * h;
      for (int64_t r = c * kNormRows; r < std::min(rows, (c + 1) * kNormRows);
           ++r) {
        const float *xr = fx.get() + r * h, *dyr = fdy.get() + r * h;
        float *dxr = fdx.get() + r * h;
        double dot = 0;
        for (int64_t i = 0; i < h; ++i)
          dot += double(dyr[i]) * w[i] * xr[i];
        double inv = 1.0 / std::sqrt(sumSquares(xr, h) / h + eps);
        // d/dx of x·inv: inv·(g - x·inv²·mean(g·x)) with g = dy·w.
        float fInv = float(inv), proj = float(inv * inv * inv * dot / h);
        for (int64_t i = 0; i < h; ++i) {
          dxr[i] = dyr[i] * w[i] * fInv - xr[i] * proj;
          dwc[i] += double(dyr[i]) * xr[i] * inv;
        }
      }
    }
  });
  std::vector<double> dw(h, 0.0);
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t i = 0; i < h; ++i)
      dw[i] += partial[c * h + i];
  fdx.finish();
  storeSums(dtype, dw, dweight);
}

void fsdp_rt_layer_norm_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                             const void *weight, const void *dy, int64_t rows,
                             int64_t h, double eps, void *dx, void *dweight,
                             void *dbias) {
  KernelTimer timer(FSDP_RT_KERNEL_NORM);
  FloatInput fx(dtype, x, rows * h), fw(dtype, weight, h),
      fdy(dtype, dy, rows * h);
  FloatOutput fdx(dtype, dx, rows * h);
  const float *w = fw.get();
  std::vector<double> dw(h, 0.0), db(h, 0.0);
  std::vector<float> xhat(h);
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = fx.get() + r * h, *dyr = fdy.get() + r * h;
    float *dxr = fdx.get() + r * h;
    double sum = 0;
    for (int64_t i = 0; i < h; ++i)
      sum += xr[i];
    double mean = sum / h, sumSq = 0;
    for (int64_t i = 0; i < h; ++i)
      sumSq += (xr[i] - mean) * (xr[i] - mean);
    double inv = 1.0 / std::sqrt(sumSq / h + eps);
    // dx = inv·(g - mean(g) - x̂·mean(g·x̂)) with g = dy·w.
    double sumG = 0, sumGX = 0;
    for (int64_t i = 0; i < h; ++i) {
      xhat[i] = float((xr[i] - mean) * inv);
      double g = double(dyr[i]) * w[i];
      sumG += g;
      sumGX += g * xhat[i];
      dw[i] += double(dyr[i]) * xhat[i];
      db[i] += dyr[i];
    }
    float fInv = float(inv), meanG = float(sumG / h), meanGX = float(sumGX / h);
    for (int64_t i = 0; i < h; ++i)
      dxr[i] = fInv * (dyr[i] * w[i] - meanG - xhat[i] * meanGX);
  }
  fdx.finish();
  storeSums(dtype, dw, dweight);
  if (dbias)
    storeSums(dtype, db, dbias);
}

//===- Norm.cpp - rms_norm and layer_norm ---------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Row statistics are summed in double: a row is only a few thousand values,
// and it keeps the result independent of the hidden size.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>

using namespace fsdp::rt;

void fsdp_rt_rms_norm(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                      const void *weight, int64_t rows, int64_t h, double eps,
                      void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_NORM);
  FloatInput fx(dtype, x, rows * h), fw(dtype, weight, h);
  FloatOutput fo(dtype, out, rows * h);
  const float *w = fw.get();
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = fx.get() + r * h;
    float *or_ = fo.get() + r * h;
    double sumSq = 0;
    for (int64_t i = 0; i < h; ++i)
      sumSq += double(xr[i]) * xr[i];
    float inv = float(1.0 / std::sqrt(sumSq / h + eps));
    for (int64_t i = 0; i < h; ++i)
      or_[i] = xr[i] * inv * w[i];
  }
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

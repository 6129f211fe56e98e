//===- Rotary.cpp - Rotary position embedding (rotate-half) and its grad --===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>

using namespace fsdp::rt;

/// Rotates each pair (x[i], x[i + d/2]) by `sign` times its angle: +1 is the
/// embedding, -1 its transpose (and inverse), which is the gradient.
static void rotate(fsdp_rt_dtype dtype, const void *x,
                   fsdp_rt_dtype positionsDtype, const void *positions,
                   int64_t b, int64_t s, int64_t heads, int64_t d, double theta,
                   const double *freq, double scaling, double sign, void *out,
                   const char *name = __builtin_FUNCTION()) {
  KernelTimer timer(FSDP_RT_KERNEL_ROTARY, name);
  int64_t n = b * s * heads * d, half = d / 2;
  FloatInput fx(dtype, x, n);
  FloatOutput fo(dtype, out, n);
  std::vector<double> invFreq(half);
  for (int64_t i = 0; i < half; ++i)
    invFreq[i] = freq ? freq[i] : std::pow(theta, -2.0 * double(i) / double(d));
  const float *px = fx.get();
  float *po = fo.get();
  // Tokens are independent: split them over the threads.
  parallelFor(b * s, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> cosA(half), sinA(half);
    for (int64_t t = begin; t < end; ++t) {
      // Angles in double: positions reach tens of thousands and an f32
      // angle would lose the low digits that the sine depends on.
      double pos = double(loadIndex(positionsDtype, positions, t));
      for (int64_t i = 0; i < half; ++i) {
        cosA[i] = float(scaling * std::cos(pos * invFreq[i]));
        sinA[i] = float(sign * scaling * std::sin(pos * invFreq[i]));
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float *xv = px + (t * heads + h) * d;
        float *ov = po + (t * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          float x1 = xv[i], x2 = xv[i + half];
          ov[i] = x1 * cosA[i] - x2 * sinA[i];
          ov[i + half] = x2 * cosA[i] + x1 * sinA[i];
        }
      }
    }
  });
  fo.finish();
}

void fsdp_rt_rotary(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                    fsdp_rt_dtype positions_dtype, const void *positions,
                    int64_t b, int64_t s, int64_t heads, int64_t d,
                    double theta, const double *inv_freq, double scaling,
                    void *out) {
  rotate(dtype, x, positions_dtype, positions, b, s, heads, d, theta, inv_freq,
         scaling, 1.0, out);
}

void fsdp_rt_rotary_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *dy,
                         fsdp_rt_dtype positions_dtype, const void *positions,
                         int64_t b, int64_t s, int64_t heads, int64_t d,
                         double theta, const double *inv_freq, double scaling,
                         void *dx) {
  rotate(dtype, dy, positions_dtype, positions, b, s, heads, d, theta, inv_freq,
         scaling, -1.0, dx);
}

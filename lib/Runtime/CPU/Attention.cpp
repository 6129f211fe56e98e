//===- Attention.cpp - Scaled dot-product attention with GQA --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Per (batch, query head): scores = Q·Kᵀ·scale through BLAS with the head
// picked out by leading-dimension strides (no head transpose), masked
// softmax per row, then P·V written straight into the [B, S, Nq, Dv] result.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <limits>

using namespace fsdp::rt;

void fsdp_rt_attention(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *q,
                       const void *k, const void *v, int64_t b, int64_t s,
                       int64_t nq, int64_t nkv, int64_t d, int64_t dv,
                       int causal, int64_t sliding_window, double scale,
                       void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  FloatInput fq(dtype, q, b * s * nq * d), fk(dtype, k, b * s * nkv * d),
      fv(dtype, v, b * s * nkv * dv);
  FloatOutput fo(dtype, out, b * s * nq * dv);
  std::vector<float> scores(s * s);
  int64_t group = nq / nkv;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nq; ++h) {
      int64_t g = h / group;
      const float *qh = fq.get() + bi * s * nq * d + h * d;
      const float *kh = fk.get() + bi * s * nkv * d + g * d;
      const float *vh = fv.get() + bi * s * nkv * dv + g * dv;
      float *oh = fo.get() + bi * s * nq * dv + h * dv;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d,
                  float(scale), qh, nq * d, kh, nkv * d, 0.0f, scores.data(),
                  s);
      for (int64_t i = 0; i < s; ++i) {
        float *row = scores.data() + i * s;
        // Key i is always visible to query i, so no row is fully masked.
        int64_t lo = 0, hi = s;
        if (causal)
          hi = i + 1;
        if (sliding_window > 0 && i - sliding_window + 1 > 0)
          lo = i - sliding_window + 1;
        float maxScore = -std::numeric_limits<float>::infinity();
        for (int64_t j = lo; j < hi; ++j)
          maxScore = std::max(maxScore, row[j]);
        float sum = 0;
        for (int64_t j = 0; j < s; ++j) {
          row[j] = (j >= lo && j < hi) ? std::exp(row[j] - maxScore) : 0.0f;
          sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = lo; j < hi; ++j)
          row[j] *= inv;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, dv, s, 1.0f,
                  scores.data(), s, vh, nkv * dv, 0.0f, oh, nq * dv);
    }
  }
  fo.finish();
}

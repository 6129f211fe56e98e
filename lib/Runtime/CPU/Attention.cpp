//===- Attention.cpp - Scaled dot-product attention with GQA, and grad ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Per (batch, query head): scores = Q·Kᵀ·scale through BLAS with the head
// picked out by leading-dimension strides (no head transpose), masked
// softmax per row, then P·V written straight into the [B, S, Nq, Dv] result.
// The backward recomputes P the same way and runs the four products of the
// gradient through BLAS with the same strides.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <limits>

using namespace fsdp::rt;

/// Turns the [s, s] scores into probabilities in place, row by row, over the
/// keys each query sees.
static void maskedSoftmax(float *scores, int64_t s, int causal,
                          int64_t slidingWindow) {
  for (int64_t i = 0; i < s; ++i) {
    float *row = scores + i * s;
    // Key i is always visible to query i, so no row is fully masked.
    int64_t lo = 0, hi = s;
    if (causal)
      hi = i + 1;
    if (slidingWindow > 0 && i - slidingWindow + 1 > 0)
      lo = i - slidingWindow + 1;
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
}

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
      maskedSoftmax(scores.data(), s, causal, sliding_window);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, dv, s, 1.0f,
                  scores.data(), s, vh, nkv * dv, 0.0f, oh, nq * dv);
    }
  }
  fo.finish();
}

void fsdp_rt_attention_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *q,
                            const void *k, const void *v, const void *dout,
                            int64_t b, int64_t s, int64_t nq, int64_t nkv,
                            int64_t d, int64_t dv, int causal,
                            int64_t sliding_window, double scale, void *dq,
                            void *dk, void *dvalue) {
  KernelTimer timer(FSDP_RT_KERNEL_ATTENTION);
  FloatInput fq(dtype, q, b * s * nq * d), fk(dtype, k, b * s * nkv * d),
      fv(dtype, v, b * s * nkv * dv), fdo(dtype, dout, b * s * nq * dv);
  FloatOutput fdq(dtype, dq, b * s * nq * d), fdk(dtype, dk, b * s * nkv * d),
      fdv(dtype, dvalue, b * s * nkv * dv);
  // The query heads of a group add into the same dk and dvalue.
  std::fill(fdk.get(), fdk.get() + b * s * nkv * d, 0.0f);
  std::fill(fdv.get(), fdv.get() + b * s * nkv * dv, 0.0f);
  std::vector<float> probs(s * s), dprobs(s * s);
  int64_t group = nq / nkv;
  float fScale = float(scale);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t h = 0; h < nq; ++h) {
      int64_t g = h / group;
      const float *qh = fq.get() + bi * s * nq * d + h * d;
      const float *kh = fk.get() + bi * s * nkv * d + g * d;
      const float *vh = fv.get() + bi * s * nkv * dv + g * dv;
      const float *doh = fdo.get() + bi * s * nq * dv + h * dv;
      float *dqh = fdq.get() + bi * s * nq * d + h * d;
      float *dkh = fdk.get() + bi * s * nkv * d + g * d;
      float *dvh = fdv.get() + bi * s * nkv * dv + g * dv;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, fScale, qh,
                  nq * d, kh, nkv * d, 0.0f, probs.data(), s);
      maskedSoftmax(probs.data(), s, causal, sliding_window);
      // dV += Pᵀ·dO and dP = dO·Vᵀ.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, dv, s, 1.0f,
                  probs.data(), s, doh, nq * dv, 1.0f, dvh, nkv * dv);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, dv, 1.0f, doh,
                  nq * dv, vh, nkv * dv, 0.0f, dprobs.data(), s);
      // Softmax backward per row, dS = P·(dP - Σ P·dP), in place of dP;
      // masked keys have P = 0 and get no gradient.
      for (int64_t i = 0; i < s; ++i) {
        const float *p = probs.data() + i * s;
        float *dp = dprobs.data() + i * s;
        double dot = 0;
        for (int64_t j = 0; j < s; ++j)
          dot += double(p[j]) * dp[j];
        for (int64_t j = 0; j < s; ++j)
          dp[j] = p[j] * (dp[j] - float(dot));
      }
      // dQ = scale·dS·K and dK += scale·dSᵀ·Q.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, fScale,
                  dprobs.data(), s, kh, nkv * d, 0.0f, dqh, nq * d);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, s, fScale,
                  dprobs.data(), s, qh, nq * d, 1.0f, dkh, nkv * d);
    }
  }
  fdq.finish();
  fdk.finish();
  fdv.finish();
}

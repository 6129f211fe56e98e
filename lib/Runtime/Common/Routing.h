//===- Routing.h - Mixture-of-experts routing, host and device --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The one definition of a token's expert choice and of the rows each rank
// receives, compiled for the CPU kernels and for the CUDA ones
// (CUDA/MoEKernels.cuh), so both backends route alike.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_ROUTING_H
#define FSDP_LIB_RUNTIME_COMMON_ROUTING_H

#include "FloatBits.h"

#include <cstdint>

namespace fsdp::rt {

/// The `k` experts of largest `score(e)` over [0, experts), descending, ties
/// to the lower index, into `chosen`; their scores into `value` unless null.
template <typename Score>
FSDP_HOST_DEVICE void topExperts(Score score, int64_t experts, int64_t k,
                                 int64_t *chosen, float *value) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    float bestScore = 0;
    for (int64_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i)
        taken = taken || chosen[i] == e;
      float s = score(e);
      if (!taken && (best < 0 || s > bestScore)) {
        best = e;
        bestScore = s;
      }
    }
    chosen[j] = best;
    if (value)
      value[j] = bestScore;
  }
}

/// The sums of `counts` [total] over `ranks` consecutive blocks, into `out`
/// [ranks]: the rows each rank's experts receive.
FSDP_HOST_DEVICE void sumBlocks(const int64_t *counts, int64_t total,
                                int64_t ranks, int64_t *out) {
  int64_t block = total / ranks;
  for (int64_t r = 0; r < ranks; ++r) {
    int64_t sum = 0;
    for (int64_t i = 0; i < block; ++i)
      sum += counts[r * block + i];
    out[r] = sum;
  }
}

/// The load-balancing loss from its statistics [2E+1] (the rows each expert
/// got, the probabilities each gathered, the tokens):
/// E · Σ_e rows_e · prob_e / tokens², 0 without tokens.
FSDP_HOST_DEVICE float auxLoss(const float *stats, int64_t experts) {
  double rows = stats[2 * experts], sum = 0;
  for (int64_t e = 0; e < experts; ++e)
    sum += double(stats[e]) * stats[experts + e];
  return rows > 0 ? float(double(experts) * sum / (rows * rows)) : 0.0f;
}

/// auxLoss's gradient `dstats` [2E+1] for the loss's gradient `dy`: only the
/// probabilities' part; the counts and tokens are not differentiable.
FSDP_HOST_DEVICE void auxLossGrad(const float *stats, int64_t experts, float dy,
                                  float *dstats) {
  double rows = stats[2 * experts];
  double scale = rows > 0 ? double(dy) * double(experts) / (rows * rows) : 0;
  for (int64_t e = 0; e < 2 * experts + 1; ++e)
    dstats[e] = 0.0f;
  for (int64_t e = 0; e < experts; ++e)
    dstats[experts + e] = float(scale * stats[e]);
}

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_ROUTING_H

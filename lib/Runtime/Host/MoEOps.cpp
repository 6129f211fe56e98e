//===- MoEOps.cpp - Mixture-of-experts ops: check, allocate, call ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The nn.moe_* and nn.grouped_linear calls of Program.h. As in Ops.cpp, the
// compiler checked the shapes; these checks turn a disagreement between
// generated code and runtime into one message. Counts and routing indices
// are never read here: they live on the device.
//
//===----------------------------------------------------------------------===//

#include "Checks.h"

using namespace fsdp::host;

namespace {

int64_t lastDim(const fsdp_tensor *t) {
  return t->type.rank ? t->type.dims[t->type.rank - 1] : 1;
}

/// Rows before the last dim.
int64_t leading(const fsdp_tensor *t) {
  int64_t last = lastDim(t);
  return last ? numElements(t->type) / last : 0;
}

void requireI64(const Check &c, const fsdp_tensor *t, const char *what) {
  c.present(t, what);
  c.that(t->type.dtype == FSDP_RT_I64,
         std::string(what) + " must be i64, got " + typeString(t->type));
}

void requireSameDtype(const Check &c, const fsdp_tensor *t,
                      const fsdp_tensor *like, const char *what) {
  c.present(t, what);
  c.sameDtype(t->type, like->type, what);
}

/// Routing `indices` [..., k]: the tokens times k slots.
void requireRouting(const Check &c, const fsdp_tensor *indices,
                    int64_t tokens) {
  requireI64(c, indices, "indices");
  c.that(leading(indices) == tokens, "indices " + typeString(indices->type) +
                                         " do not route " +
                                         std::to_string(tokens) + " tokens");
}

} // namespace

void fsdp_op_moe_router(fsdp_program *, fsdp_tensor *weights,
                        fsdp_tensor *indices, fsdp_tensor *logits,
                        int64_t top_k, bool normalize) {
  Check c{"moe_router"};
  int64_t experts = lastDim(logits), tokens = leading(logits);
  c.that(top_k >= 1 && top_k <= experts, "top_k " + std::to_string(top_k) +
                                             " is not in [1, " +
                                             std::to_string(experts) + "]");
  requireSameDtype(c, weights, logits, "weights");
  requireRouting(c, indices, tokens);
  c.that(numElements(weights->type) == tokens * top_k,
         "weights " + typeString(weights->type) + " do not hold top_k " +
             "values per token");
  fsdp_rt_moe_router(nullptr, logits->type.dtype, logits->data, tokens, experts,
                     top_k, normalize, weights->data,
                     static_cast<int64_t *>(indices->data));
}

fsdp_tensor *fsdp_op_moe_router_grad(fsdp_program *, fsdp_type r,
                                     fsdp_tensor *logits, fsdp_tensor *indices,
                                     fsdp_tensor *dweights, bool normalize) {
  Check c{"moe_router_grad"};
  int64_t experts = lastDim(logits), tokens = leading(logits);
  requireRouting(c, indices, tokens);
  requireSameDtype(c, dweights, logits, "grad");
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_router_grad(nullptr, logits->type.dtype, logits->data,
                          fsdp::host::indices(indices), dweights->data, tokens,
                          experts, lastDim(indices), normalize, out->data);
  return out;
}

void fsdp_op_moe_permute(fsdp_program *, fsdp_tensor *rows, fsdp_tensor *counts,
                         fsdp_tensor *x, fsdp_tensor *indices,
                         int64_t num_experts) {
  Check c{"moe_permute"};
  int64_t tokens = leading(x), hidden = lastDim(x);
  requireRouting(c, indices, tokens);
  requireI64(c, counts, "counts");
  c.that(numElements(counts->type) == num_experts,
         "counts " + typeString(counts->type) + " do not hold " +
             std::to_string(num_experts) + " experts");
  requireSameDtype(c, rows, x, "rows");
  c.that(numElements(rows->type) == numElements(indices->type) * hidden,
         "rows " + typeString(rows->type) + " are not one per slot");
  fsdp_rt_moe_permute(nullptr, x->type.dtype, x->data,
                      fsdp::host::indices(indices), tokens, hidden,
                      lastDim(indices), num_experts, rows->data,
                      static_cast<int64_t *>(counts->data));
}

fsdp_tensor *fsdp_op_moe_unpermute(fsdp_program *, fsdp_type r,
                                   fsdp_tensor *rows, fsdp_tensor *indices,
                                   fsdp_tensor *weights, int64_t num_experts) {
  Check c{"moe_unpermute"};
  int64_t hidden = lastDim(rows), tokens = leading(indices);
  requireRouting(c, indices, tokens);
  c.that(leading(rows) == numElements(indices->type),
         "rows " + typeString(rows->type) + " are not one per slot of " +
             typeString(indices->type));
  if (weights)
    requireSameDtype(c, weights, rows, "weights");
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_unpermute(nullptr, rows->type.dtype, rows->data,
                        fsdp::host::indices(indices),
                        weights ? weights->data : nullptr, tokens, hidden,
                        lastDim(indices), num_experts, out->data);
  return out;
}

void fsdp_op_moe_unpermute_grad(fsdp_program *, fsdp_tensor *drows,
                                fsdp_tensor *dweights, fsdp_tensor *rows,
                                fsdp_tensor *indices, fsdp_tensor *weights,
                                fsdp_tensor *dy, int64_t num_experts) {
  Check c{"moe_unpermute_grad"};
  int64_t hidden = lastDim(rows), tokens = leading(indices);
  requireRouting(c, indices, tokens);
  requireSameDtype(c, weights, rows, "weights");
  requireSameDtype(c, dy, rows, "grad");
  c.that(numElements(dy->type) == tokens * hidden,
         "grad " + typeString(dy->type) + " is not one row per token");
  fsdp_rt_moe_unpermute_grad(nullptr, rows->type.dtype, rows->data,
                             fsdp::host::indices(indices), weights->data,
                             dy->data, tokens, hidden, lastDim(indices),
                             num_experts, drows->data, dweights->data);
}

/// Checks grouped_linear's operands: x [R, K], counts [G], w [E, N, K].
static void groupedChecks(const Check &c, const fsdp_tensor *x,
                          const fsdp_tensor *counts, const fsdp_tensor *w) {
  c.that(x->type.rank == 2 && w->type.rank == 3 &&
             w->type.dims[2] == x->type.dims[1],
         "input " + typeString(x->type) + " and weight " + typeString(w->type) +
             " are not [R, K] and [E, N, K]");
  requireSameDtype(c, w, x, "weight");
  requireI64(c, counts, "counts");
  c.that(counts->type.rank == 1 && w->type.dims[0] > 0 &&
             counts->type.dims[0] % w->type.dims[0] == 0,
         "counts " + typeString(counts->type) + " are not segments of " +
             std::to_string(w->type.dims[0]) + " experts");
}

fsdp_tensor *fsdp_op_grouped_linear(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                                    fsdp_tensor *counts, fsdp_tensor *w) {
  groupedChecks(Check{"grouped_linear"}, x, counts, w);
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_grouped_linear(nullptr, x->type.dtype, x->data, x->type.dims[0],
                         x->type.dims[1], fsdp::host::indices(counts),
                         counts->type.dims[0], w->data, w->type.dims[0],
                         w->type.dims[1], out->data);
  return out;
}

void fsdp_op_grouped_linear_grad(fsdp_program *, fsdp_tensor *dx,
                                 fsdp_tensor *dw, fsdp_tensor *x,
                                 fsdp_tensor *counts, fsdp_tensor *w,
                                 fsdp_tensor *dy) {
  groupedChecks(Check{"grouped_linear_grad"}, x, counts, w);
  requireSameDtype(Check{"grouped_linear_grad"}, dy, x, "grad");
  fsdp_rt_grouped_linear_grad(nullptr, x->type.dtype, x->data, x->type.dims[0],
                              x->type.dims[1], fsdp::host::indices(counts),
                              counts->type.dims[0], w->data, w->type.dims[0],
                              w->type.dims[1], dy->data, dx->data, dw->data);
}

fsdp_tensor *fsdp_op_moe_rank_counts(fsdp_program *, fsdp_type r,
                                     fsdp_tensor *counts, int64_t ranks) {
  Check c{"moe_rank_counts"};
  requireI64(c, counts, "counts");
  int64_t n = numElements(counts->type);
  c.that(ranks >= 1 && n % ranks == 0, "counts " + typeString(counts->type) +
                                           " do not split into " +
                                           std::to_string(ranks) + " ranks");
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_rank_counts(nullptr, fsdp::host::indices(counts), n, ranks,
                          static_cast<int64_t *>(out->data));
  return out;
}

fsdp_tensor *fsdp_op_moe_aux_stats(fsdp_program *, fsdp_type r,
                                   fsdp_tensor *logits, int64_t top_k) {
  int64_t experts = lastDim(logits);
  Check{"moe_aux_stats"}.that(top_k >= 1 && top_k <= experts,
                              "top_k " + std::to_string(top_k) +
                                  " is not in [1, " + std::to_string(experts) +
                                  "]");
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_aux_stats(nullptr, logits->type.dtype, logits->data,
                        leading(logits), experts, top_k,
                        static_cast<float *>(out->data));
  return out;
}

fsdp_tensor *fsdp_op_moe_aux_stats_grad(fsdp_program *, fsdp_type r,
                                        fsdp_tensor *logits,
                                        fsdp_tensor *dstats) {
  int64_t experts = lastDim(logits);
  Check{"moe_aux_stats_grad"}.that(
      dstats->type.dtype == FSDP_RT_F32 &&
          numElements(dstats->type) == 2 * experts + 1,
      "grad " + typeString(dstats->type) + " is not [2E + 1] f32");
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_aux_stats_grad(
      nullptr, logits->type.dtype, logits->data, leading(logits), experts,
      static_cast<const float *>(dstats->data), out->data);
  return out;
}

/// The experts of routing statistics [2E + 1] f32.
static int64_t statsExperts(const Check &c, const fsdp_tensor *stats) {
  int64_t n = numElements(stats->type);
  c.that(stats->type.dtype == FSDP_RT_F32 && n >= 3 && n % 2 == 1,
         "stats " + typeString(stats->type) + " are not [2E + 1] f32");
  return (n - 1) / 2;
}

fsdp_tensor *fsdp_op_moe_aux_combine(fsdp_program *, fsdp_type r,
                                     fsdp_tensor *stats) {
  int64_t experts = statsExperts(Check{"moe_aux_combine"}, stats);
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_aux_combine(nullptr, static_cast<const float *>(stats->data),
                          experts, static_cast<float *>(out->data));
  return out;
}

fsdp_tensor *fsdp_op_moe_aux_combine_grad(fsdp_program *, fsdp_type r,
                                          fsdp_tensor *stats, fsdp_tensor *dy) {
  int64_t experts = statsExperts(Check{"moe_aux_combine_grad"}, stats);
  fsdp_tensor *out = newTensor(r);
  fsdp_rt_moe_aux_combine_grad(nullptr, static_cast<const float *>(stats->data),
                               experts, static_cast<const float *>(dy->data),
                               static_cast<float *>(out->data));
  return out;
}

//===- TrainOps.cpp - Backward, loss and optimizer ops --------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The ops a training step adds. They write into results the program created
// (destination passing), so one call can return several tensors. Operand
// shapes were verified by the compiler; each op checks what its kernel would
// otherwise read out of bounds.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include <cmath>

using namespace fsdp::host;

namespace {

/// Aborts with `op`'s name unless `ok`.
void require(const char *op, bool ok, const std::string &what) {
  if (!ok)
    fail(op, what);
}

/// Requires `t` to have `want`'s dtype and dims.
void sameType(const char *op, const fsdp_tensor *t, const fsdp_type &want,
              const char *what) {
  bool ok = t && t->type.dtype == want.dtype && t->type.rank == want.rank;
  for (int64_t i = 0; ok && i < want.rank; ++i)
    ok = t->type.dims[i] == want.dims[i];
  require(op, ok,
          std::string(what) + " is " + (t ? typeString(t->type) : "null") +
              ", expected " + typeString(want));
}

/// [rows, h] of a tensor normalized over its last dim.
std::pair<int64_t, int64_t> rowsAndWidth(const fsdp_type &t) {
  int64_t h = t.rank ? t.dims[t.rank - 1] : 1;
  return {h ? numElements(t) / h : 0, h};
}

/// `t`'s buffer, after checking that it is an f32 scalar.
const float *f32Scalar(const char *op, const fsdp_tensor *t, const char *what) {
  require(op, t && t->type.dtype == FSDP_RT_F32 && t->type.rank == 0,
          std::string(what) + " must be an f32 scalar");
  return static_cast<const float *>(t->data);
}

int int32(int64_t v) { return static_cast<int>(v); }

/// Requires `op`'s other tensors in host memory, as the host's cores read
/// them (onHostCores).
void requireHost(const char *op,
                 std::initializer_list<const fsdp_tensor *> ts) {
  for (const fsdp_tensor *t : ts)
    require(op, t->host,
            "placed on the host, but its " + typeString(t->type) +
                " operand is in device memory");
}

/// The buffers of an AdamW call as fsdp_rt_adamw takes them.
fsdp_rt_adamw_tensor adamwTensor(const PendingAdamW &a) {
  auto in = [&](int k) {
    return static_cast<const float *>(a.tensors[k]->data);
  };
  auto out = [&](int k) { return static_cast<float *>(a.tensors[k]->data); };
  return {in(3),
          in(5),
          in(6),
          out(0),
          out(1),
          out(2),
          a.tensors[4]->data,
          numElements(a.tensors[3]->type)};
}

} // namespace

#define FSDP_ACTIVATION(name, forward, gradient)                               \
  void fsdp_op_##name##_grad(fsdp_program *, fsdp_tensor *dx, fsdp_tensor *x,  \
                             fsdp_tensor *dy) {                                \
    sameType(#name "_grad", dy, x->type, "gradient");                          \
    sameType(#name "_grad", dx, x->type, "result");                            \
    fsdp_rt_##name##_grad(nullptr, x->type.dtype, x->data, dy->data,           \
                          numElements(x->type), dx->data);                     \
  }
#include "fsdp/Runtime/Activations.def"

void fsdp_op_gelu_grad(fsdp_program *, fsdp_tensor *dx, fsdp_tensor *x,
                       fsdp_tensor *dy, bool tanh_approximation) {
  sameType("gelu_grad", dy, x->type, "gradient");
  sameType("gelu_grad", dx, x->type, "result");
  fsdp_rt_gelu_grad(nullptr, x->type.dtype, x->data, dy->data,
                    numElements(x->type), tanh_approximation, dx->data);
}

void fsdp_op_rms_norm_grad(fsdp_program *, fsdp_tensor *dx, fsdp_tensor *dw,
                           fsdp_tensor *x, fsdp_tensor *w, fsdp_tensor *dy,
                           double eps) {
  sameType("rms_norm_grad", dy, x->type, "gradient");
  sameType("rms_norm_grad", dx, x->type, "input gradient");
  sameType("rms_norm_grad", dw, w->type, "weight gradient");
  auto [rows, h] = rowsAndWidth(x->type);
  fsdp_rt_rms_norm_grad(nullptr, x->type.dtype, x->data, w->data, dy->data,
                        rows, h, eps, dx->data, dw->data);
}

void fsdp_op_layer_norm_grad(fsdp_program *, fsdp_tensor *dx, fsdp_tensor *dw,
                             fsdp_tensor *db, fsdp_tensor *x, fsdp_tensor *w,
                             fsdp_tensor *dy, double eps) {
  sameType("layer_norm_grad", dy, x->type, "gradient");
  sameType("layer_norm_grad", dx, x->type, "input gradient");
  sameType("layer_norm_grad", dw, w->type, "weight gradient");
  sameType("layer_norm_grad", db, w->type, "bias gradient");
  auto [rows, h] = rowsAndWidth(x->type);
  fsdp_rt_layer_norm_grad(nullptr, x->type.dtype, x->data, w->data, dy->data,
                          rows, h, eps, dx->data, dw->data, db->data);
}

void fsdp_op_attention_grad(fsdp_program *, fsdp_tensor *dq, fsdp_tensor *dk,
                            fsdp_tensor *dv, fsdp_tensor *q, fsdp_tensor *k,
                            fsdp_tensor *v, fsdp_tensor *out, fsdp_tensor *lse,
                            fsdp_tensor *dout, fsdp_tensor *dlse,
                            fsdp_tensor *positions, fsdp_tensor *key_positions,
                            fsdp_tensor *document_positions, bool causal,
                            int64_t sliding_window, double scale) {
  sameType("attention_grad", dq, q->type, "query gradient");
  sameType("attention_grad", out, dout->type, "forward output");
  sameType("attention_grad", dk, k->type, "key gradient");
  sameType("attention_grad", dv, v->type, "value gradient");
  require("attention_grad", q->type.rank == 4 && k->type.rank == 4,
          "operands must be [B, S, N, D]");
  int64_t d = q->type.dims[3];
  require("attention_grad",
          lse->type.dtype == FSDP_RT_F32 &&
              numElements(lse->type) ==
                  q->type.dims[0] * q->type.dims[1] * q->type.dims[2],
          "logsumexp " + typeString(lse->type) +
              " does not match the queries [B, Nq, S]");
  require("attention_grad",
          !positions || (positions->type.dtype == FSDP_RT_I64 &&
                         numElements(positions->type) ==
                             q->type.dims[0] * q->type.dims[1]),
          "positions must be i64 [B, S] of the queries");
  require("attention_grad",
          !key_positions ||
              (positions && key_positions->type.dtype == FSDP_RT_I64 &&
               numElements(key_positions->type) ==
                   k->type.dims[0] * k->type.dims[1]),
          "key_positions must be i64 [B, Skv] of the keys, with positions");
  require("attention_grad",
          !document_positions ||
              (causal && document_positions->type.dtype == FSDP_RT_I64 &&
               numElements(document_positions->type) ==
                   q->type.dims[0] * q->type.dims[1]),
          "document_positions must be i64 [B, S] of the queries, with causal");
  if (dlse)
    sameType("attention_grad", dlse, lse->type, "logsumexp gradient");
  if (scale <= 0)
    scale = 1.0 / std::sqrt(double(d));
  fsdp_rt_attention_grad(
      nullptr, q->type.dtype, q->data, k->data, v->data, out->data,
      static_cast<const float *>(lse->data), dout->data,
      dlse ? static_cast<const float *>(dlse->data) : nullptr, q->type.dims[0],
      q->type.dims[1], k->type.dims[1], q->type.dims[2], k->type.dims[2], d,
      v->type.dims[3], indices(positions), indices(key_positions),
      indices(document_positions), causal, sliding_window, scale, dq->data,
      dk->data, dv->data);
}

void fsdp_op_attention_combine_grad(fsdp_program *, fsdp_tensor *dout_a,
                                    fsdp_tensor *dlse_a, fsdp_tensor *dout_b,
                                    fsdp_tensor *dlse_b, fsdp_tensor *out_a,
                                    fsdp_tensor *lse_a, fsdp_tensor *out_b,
                                    fsdp_tensor *lse_b, fsdp_tensor *out,
                                    fsdp_tensor *lse, fsdp_tensor *dout,
                                    fsdp_tensor *dlse) {
  for (fsdp_tensor *t : {out_b, out, dout, dout_a, dout_b})
    sameType("attention_combine_grad", t, out_a->type, "result");
  for (fsdp_tensor *t : {lse_b, lse, dlse_a, dlse_b})
    sameType("attention_combine_grad", t, lse_a->type, "logsumexp");
  if (dlse)
    sameType("attention_combine_grad", dlse, lse_a->type, "logsumexp");
  require("attention_combine_grad", out_a->type.rank == 4,
          "results must be [B, S, Nq, Dv]");
  const int64_t *dims = out_a->type.dims;
  auto f32 = [](fsdp_tensor *t) { return static_cast<float *>(t->data); };
  fsdp_rt_attention_combine_grad(
      nullptr, out_a->type.dtype, out_a->data, f32(lse_a), out_b->data,
      f32(lse_b), out->data, f32(lse), dout->data, dlse ? f32(dlse) : nullptr,
      dims[0], dims[1], dims[2], dims[3], dout_a->data, f32(dlse_a),
      dout_b->data, f32(dlse_b));
}

void fsdp_op_softmax_grad(fsdp_program *, fsdp_tensor *dx, fsdp_tensor *y,
                          fsdp_tensor *dy, int64_t dim) {
  sameType("softmax_grad", dy, y->type, "gradient");
  sameType("softmax_grad", dx, y->type, "result");
  fsdp_rt_softmax_grad(nullptr, y->type.dtype, y->data, dy->data, y->type.dims,
                       int32(y->type.rank), int32(dim), dx->data);
}

void fsdp_op_embedding_grad(fsdp_program *, fsdp_tensor *dtable,
                            fsdp_tensor *ids, fsdp_tensor *dy,
                            fsdp_tensor *shard_index) {
  int64_t vocab = dtable->type.dims[0], hidden = dtable->type.dims[1];
  int64_t numIds = numElements(ids->type);
  require("embedding_grad", numElements(dy->type) == numIds * hidden,
          "gradient " + typeString(dy->type) + " does not match the ids");
  int64_t firstId =
      shard_index ? shardStart("embedding_grad", shard_index, vocab) : 0;
  checkIndices("embedding_grad", ids,
               shard_index ? std::numeric_limits<int64_t>::max() : vocab,
               "ids");
  fsdp_rt_embedding_grad(nullptr, dtable->type.dtype, ids->type.dtype,
                         ids->data, numIds, dy->data, vocab, hidden, firstId,
                         dtable->data);
}

void fsdp_op_cross_entropy_partial(fsdp_program *, fsdp_tensor *sum_exp,
                                   fsdp_tensor *target, fsdp_tensor *logits,
                                   fsdp_tensor *labels, fsdp_tensor *shift,
                                   fsdp_tensor *shard_index,
                                   int64_t ignore_index, int64_t num_classes) {
  auto [rows, vocab] = rowsAndWidth(logits->type);
  require("cross_entropy_partial",
          numElements(labels->type) == rows &&
              numElements(shift->type) == rows &&
              shift->type.dtype == logits->type.dtype,
          "labels " + typeString(labels->type) + " and shift " +
              typeString(shift->type) + " do not match the logits " +
              typeString(logits->type));
  int64_t first = shardStart("cross_entropy_partial", shard_index, vocab);
  checkIndices("cross_entropy_partial", labels,
               std::numeric_limits<int64_t>::max(), "labels", ignore_index);
  fsdp_rt_cross_entropy_partial(
      nullptr, logits->type.dtype, logits->data, labels->type.dtype,
      labels->data, shift->data, rows, vocab, first, ignore_index, num_classes,
      static_cast<float *>(sum_exp->data), static_cast<float *>(target->data));
}

void fsdp_op_cross_entropy_partial_grad(
    fsdp_program *, fsdp_tensor *dlogits, fsdp_tensor *logits,
    fsdp_tensor *labels, fsdp_tensor *shift, fsdp_tensor *shard_index,
    fsdp_tensor *dsum_exp, fsdp_tensor *dtarget, int64_t ignore_index,
    int64_t num_classes) {
  sameType("cross_entropy_partial_grad", dlogits, logits->type, "result");
  auto [rows, vocab] = rowsAndWidth(logits->type);
  require("cross_entropy_partial_grad",
          numElements(labels->type) == rows &&
              numElements(dsum_exp->type) == rows &&
              numElements(dtarget->type) == rows,
          "per-position operands do not match the logits " +
              typeString(logits->type));
  int64_t first = shardStart("cross_entropy_partial_grad", shard_index, vocab);
  fsdp_rt_cross_entropy_partial_grad(
      nullptr, logits->type.dtype, logits->data, labels->type.dtype,
      labels->data, shift->data, rows, vocab, first, ignore_index, num_classes,
      static_cast<const float *>(dsum_exp->data),
      static_cast<const float *>(dtarget->data), dlogits->data);
}

void fsdp_op_cross_entropy_combine_grad(fsdp_program *, fsdp_tensor *dsum_exp,
                                        fsdp_tensor *dtarget,
                                        fsdp_tensor *sum_exp,
                                        fsdp_tensor *labels, fsdp_tensor *dloss,
                                        int64_t ignore_index,
                                        fsdp_loss_reduction reduction) {
  int64_t rows = numElements(labels->type);
  sameType("cross_entropy_combine_grad", dsum_exp, sum_exp->type, "result");
  sameType("cross_entropy_combine_grad", dtarget, sum_exp->type, "result");
  require("cross_entropy_combine_grad",
          dloss->type.dtype == FSDP_RT_F32 &&
              numElements(dloss->type) ==
                  (reduction == FSDP_LOSS_NONE ? rows : 1),
          "loss gradient is " + typeString(dloss->type));
  fsdp_rt_reduction kind = kernelReduction(reduction);
  fsdp_rt_cross_entropy_combine_grad(
      nullptr, static_cast<const float *>(sum_exp->data), labels->type.dtype,
      labels->data, rows, ignore_index, kind,
      static_cast<const float *>(dloss->data),
      static_cast<float *>(dsum_exp->data),
      static_cast<float *>(dtarget->data));
}

void fsdp_op_cross_entropy_grad(fsdp_program *, fsdp_tensor *dlogits,
                                fsdp_tensor *logits, fsdp_tensor *labels,
                                fsdp_tensor *dloss, int64_t ignore_index,
                                fsdp_loss_reduction reduction) {
  sameType("cross_entropy_grad", dlogits, logits->type, "result");
  auto [rows, vocab] = rowsAndWidth(logits->type);
  require("cross_entropy_grad", numElements(labels->type) == rows,
          "labels " + typeString(labels->type) + " do not match the logits");
  require("cross_entropy_grad",
          dloss->type.dtype == FSDP_RT_F32 &&
              numElements(dloss->type) ==
                  (reduction == FSDP_LOSS_NONE ? rows : 1),
          "loss gradient is " + typeString(dloss->type));
  fsdp_rt_reduction kind = kernelReduction(reduction);
  fsdp_rt_cross_entropy_grad(
      nullptr, logits->type.dtype, logits->data, labels->type.dtype,
      labels->data, rows, vocab, ignore_index, kind,
      static_cast<const float *>(dloss->data), dlogits->data);
}

void fsdp_op_reduce_sum_to(fsdp_program *, fsdp_tensor *out, fsdp_tensor *x) {
  require("reduce_sum_to", out->type.dtype == x->type.dtype,
          "result is " + typeString(out->type));
  fsdp_rt_reduce_sum_to(nullptr, x->type.dtype, x->data, x->type.dims,
                        int32(x->type.rank), out->type.dims,
                        int32(out->type.rank), out->data);
}

void fsdp_op_pad(fsdp_program *, fsdp_tensor *out, fsdp_tensor *x, int64_t dim,
                 int64_t before, int64_t after) {
  require("pad",
          dim >= 0 && dim < x->type.rank &&
              out->type.dims[dim] == x->type.dims[dim] + before + after,
          "result " + typeString(out->type) + " does not fit the padding");
  fsdp_rt_pad(nullptr, x->type.dtype, x->data, x->type.dims,
              int32(x->type.rank), int32(dim), before, after, out->data);
}

void fsdp_op_sum_squares(fsdp_program *p, fsdp_tensor *out, fsdp_tensor *x) {
  require("sum_squares", out->type.dtype == FSDP_RT_F32 && out->type.rank == 0,
          "result must be an f32 scalar");
  if (onHostCores(*p, x)) {
    requireHost("sum_squares", {out});
    return queueHostSumSquares(x->type.dtype, x->data, numElements(x->type),
                               static_cast<float *>(out->data));
  }
  fsdp_rt_sum_squares(nullptr, x->type.dtype, x->data, numElements(x->type),
                      static_cast<float *>(out->data));
}

void fsdp_op_div(fsdp_program *, fsdp_tensor *out, fsdp_tensor *a,
                 fsdp_tensor *b) {
  require("div",
          a->type.dtype == b->type.dtype && out->type.dtype == a->type.dtype,
          "operands " + typeString(a->type) + " and " + typeString(b->type));
  fsdp_rt_div(nullptr, a->type.dtype, a->data, a->type.dims,
              int32(a->type.rank), b->data, b->type.dims, int32(b->type.rank),
              out->type.dims, int32(out->type.rank), out->data);
}

void fsdp_op_fill(fsdp_program *, fsdp_tensor *out, double value) {
  fsdp_rt_fill(nullptr, out->type.dtype, numElements(out->type), value,
               out->data);
}

void fsdp_op_token_count(fsdp_program *, fsdp_tensor *out, fsdp_tensor *labels,
                         int64_t ignore_index) {
  require("token_count", out->type.dtype == FSDP_RT_F32 && out->type.rank == 0,
          "result must be an f32 scalar");
  fsdp_rt_count_labels(nullptr, labels->type.dtype, labels->data,
                       numElements(labels->type), ignore_index,
                       static_cast<float *>(out->data));
}

void fsdp_op_clip_coefficient(fsdp_program *, fsdp_tensor *out,
                              fsdp_tensor *sum_of_squares, double max_norm) {
  // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), at most 1,
  // left on the device for the optimizer to read.
  fsdp_rt_clip_coefficient(
      nullptr, f32Scalar("clip_coefficient", sum_of_squares, "input"), max_norm,
      static_cast<float *>(out->data));
}

void fsdp_op_adamw(fsdp_program *p, fsdp_tensor *new_param,
                   fsdp_tensor *new_exp_avg, fsdp_tensor *new_exp_avg_sq,
                   fsdp_tensor *param, fsdp_tensor *grad, fsdp_tensor *exp_avg,
                   fsdp_tensor *exp_avg_sq, fsdp_tensor *step,
                   fsdp_tensor *grad_scale, fsdp_tensor *lr_scale, double lr,
                   double beta1, double beta2, double eps,
                   double weight_decay) {
  for (fsdp_tensor *t :
       {new_param, new_exp_avg, new_exp_avg_sq, exp_avg, exp_avg_sq})
    sameType("adamw", t, param->type, "optimizer tensor");
  require("adamw", numElements(grad->type) == numElements(param->type),
          "gradient " + typeString(grad->type) + " does not match " +
              typeString(param->type));
  f32Scalar("adamw", step, "step");
  f32Scalar("adamw", grad_scale, "grad_scale");
  if (lr_scale)
    f32Scalar("adamw", lr_scale, "lr_scale");
  if (onHostCores(*p, param)) {
    requireHost("adamw", {new_param, new_exp_avg, new_exp_avg_sq, grad, exp_avg,
                          exp_avg_sq, step, grad_scale});
    if (lr_scale)
      requireHost("adamw", {lr_scale});
  }
  PendingAdamW update = {{new_param, new_exp_avg, new_exp_avg_sq, param, grad,
                          exp_avg, exp_avg_sq, step, grad_scale, lr_scale},
                         lr,
                         beta1,
                         beta2,
                         eps,
                         weight_decay};
  for (fsdp_tensor *&t : update.tensors)
    if (t)
      t = fsdp_retain(t);
  p->pendingAdamW.push_back(update);
  // Not deferred: the queue of this one call runs now.
  if (!p->deferUpdates)
    applyDeferredUpdates(*p);
}

void fsdp::host::applyDeferredUpdates(fsdp_program &p) {
  std::vector<PendingAdamW> pending;
  pending.swap(p.pendingAdamW);
  std::vector<bool> done(pending.size());
  std::vector<fsdp_rt_adamw_tensor> group;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (done[i])
      continue;
    const PendingAdamW &a = pending[i];
    auto same = [&](const PendingAdamW &b) {
      return a.lr == b.lr && a.beta1 == b.beta1 && a.beta2 == b.beta2 &&
             a.eps == b.eps && a.weightDecay == b.weightDecay &&
             a.tensors[4]->type.dtype == b.tensors[4]->type.dtype &&
             a.tensors[7]->data == b.tensors[7]->data &&
             a.tensors[8]->data == b.tensors[8]->data &&
             a.tensors[9] == b.tensors[9] &&
             a.tensors[3]->host == b.tensors[3]->host;
    };
    group.clear();
    for (size_t j = i; j < pending.size(); ++j)
      if (!done[j] && same(pending[j])) {
        group.push_back(adamwTensor(pending[j]));
        done[j] = true;
      }
    const auto *step = static_cast<const float *>(a.tensors[7]->data);
    const auto *scale = static_cast<const float *>(a.tensors[8]->data);
    const auto *lrScale =
        a.tensors[9] ? static_cast<const float *>(a.tensors[9]->data) : nullptr;
    if (onHostCores(p, a.tensors[3]))
      queueHostAdamW(group, a.tensors[4]->type.dtype, a.lr, a.beta1, a.beta2,
                     a.eps, a.weightDecay, step, scale, lrScale);
    else
      fsdp_rt_adamw(nullptr, int64_t(group.size()), group.data(),
                    a.tensors[4]->type.dtype, a.lr, a.beta1, a.beta2, a.eps,
                    a.weightDecay, step, scale, lrScale);
  }
  for (PendingAdamW &a : pending)
    for (fsdp_tensor *t : a.tensors)
      if (t)
        fsdp_release(t);
}

void fsdp_op_sgd(fsdp_program *p, fsdp_tensor *new_param,
                 fsdp_tensor *new_momentum_buffer, fsdp_tensor *param,
                 fsdp_tensor *grad, fsdp_tensor *momentum_buffer,
                 fsdp_tensor *step, fsdp_tensor *grad_scale,
                 fsdp_tensor *lr_scale, double lr, double momentum,
                 double weight_decay) {
  for (fsdp_tensor *t : {new_param, new_momentum_buffer, momentum_buffer})
    sameType("sgd", t, param->type, "optimizer tensor");
  require("sgd", numElements(grad->type) == numElements(param->type),
          "gradient " + typeString(grad->type) + " does not match " +
              typeString(param->type));
  // The kernel updates its arguments: a result that does not take its
  // operand's buffer (InPlaceUpdates.h) starts as a copy of it.
  int64_t n = numElements(param->type);
  if (new_param->data != param->data)
    fsdp_rt_copy(nullptr, FSDP_RT_F32, param->data, n, new_param->data);
  if (new_momentum_buffer->data != momentum_buffer->data)
    fsdp_rt_copy(nullptr, FSDP_RT_F32, momentum_buffer->data, n,
                 new_momentum_buffer->data);
  float *buffer = momentum == 0.0
                      ? nullptr
                      : static_cast<float *>(new_momentum_buffer->data);
  const float *stepCount = f32Scalar("sgd", step, "step");
  const float *scale = f32Scalar("sgd", grad_scale, "grad_scale");
  const float *lrScale =
      lr_scale ? f32Scalar("sgd", lr_scale, "lr_scale") : nullptr;
  if (onHostCores(*p, param)) {
    requireHost("sgd", {new_param, new_momentum_buffer, grad, momentum_buffer,
                        step, grad_scale});
    if (lr_scale)
      requireHost("sgd", {lr_scale});
    return queueHostSgd(static_cast<float *>(new_param->data), buffer,
                        grad->type.dtype, grad->data, n, lr, momentum,
                        weight_decay, stepCount, scale, lrScale);
  }
  fsdp_rt_sgd(nullptr, static_cast<float *>(new_param->data), buffer,
              grad->type.dtype, grad->data, n, lr, momentum, weight_decay,
              stepCount, scale, lrScale);
}

void fsdp_op_lr_schedule(fsdp_program *, fsdp_tensor *out, fsdp_tensor *step,
                         int64_t schedule, int64_t warmup_steps,
                         int64_t total_steps, double min_ratio) {
  require("lr_schedule", out->type.dtype == FSDP_RT_F32 && out->type.rank == 0,
          "result must be an f32 scalar");
  require("lr_schedule",
          schedule >= FSDP_LR_CONSTANT && schedule <= FSDP_LR_COSINE,
          "unknown schedule " + std::to_string(schedule));
  fsdp_rt_lr_schedule(nullptr, f32Scalar("lr_schedule", step, "step"),
                      fsdp_rt_lr_schedule_kind(schedule), warmup_steps,
                      total_steps, min_ratio, static_cast<float *>(out->data));
}

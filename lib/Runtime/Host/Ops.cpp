//===- Ops.cpp - nn ops: check operands, allocate, call the kernel --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The compiler verified every shape, so a mismatch here means generated code
// and runtime disagree; the checks are cheap and turn such a bug into one
// clear message instead of a wrong result or a crash in a kernel.
//
//===----------------------------------------------------------------------===//

#include "Checks.h"

#include <cmath>
#include <cstdarg>
#include <cstring>
#include <limits>

using namespace fsdp::host;

namespace {

fsdp_tensor *alloc(const fsdp_type &r) { return newTensor(r); }

/// The `n` (>= 1) tensors a variadic call passes after its count.
std::vector<fsdp_tensor *> variadicTensors(const Check &c, int64_t n,
                                           va_list args) {
  c.that(n >= 1, "needs at least one input, got " + std::to_string(n));
  std::vector<fsdp_tensor *> xs(static_cast<size_t>(n));
  for (fsdp_tensor *&x : xs)
    x = va_arg(args, fsdp_tensor *);
  return xs;
}

/// Checks that `xs` join along `dim` (dim already checked against the
/// first): each present, of the first's dtype and rank, equal to it but
/// along `dim`, and there a multiple of `block` when `block` > 0.
void checkJoin(const Check &c, const std::vector<fsdp_tensor *> &xs,
               int64_t dim, int64_t block) {
  const fsdp_tensor *a = xs.front();
  for (size_t i = 0; i < xs.size(); ++i) {
    const fsdp_tensor *x = xs[i];
    std::string name = "input " + std::to_string(i);
    c.present(x, name.c_str());
    c.sameDtype(x->type, a->type, name.c_str());
    bool fits = x->type.rank == a->type.rank &&
                (block <= 0 || x->type.dims[dim] % block == 0);
    for (int64_t d = 0; fits && d < a->type.rank; ++d)
      fits = d == dim || x->type.dims[d] == a->type.dims[d];
    c.that(fits, "cannot join " + typeString(a->type) + " and " +
                     typeString(x->type) +
                     (block > 0 ? " in blocks of " + std::to_string(block)
                                : std::string()) +
                     " along dim " + std::to_string(dim));
  }
}

/// `x`'s bytes from `offset` on, seen as type `r`, without a copy: no op
/// writes into its operands but an in-place optimizer update, which the
/// compiler places after every read of them (InPlaceUpdates.h). The view holds
/// a reference to the tensor that owns the buffer.
fsdp_tensor *view(fsdp_tensor *x, const fsdp_type &r, int64_t offset) {
  auto *out = new fsdp_tensor;
  out->type = r;
  out->data = static_cast<char *>(x->data) + offset;
  out->base = fsdp_retain(x->base ? x->base : x);
  return out;
}

int64_t product(const int64_t *dims, int64_t n) {
  int64_t p = 1;
  for (int64_t i = 0; i < n; ++i)
    p *= dims[i];
  return p;
}

using BinaryKernel = void (*)(fsdp_rt_stream, fsdp_rt_dtype, const void *,
                              const int64_t *, int, const void *,
                              const int64_t *, int, const int64_t *, int,
                              void *);

fsdp_tensor *binary(const char *op, BinaryKernel kernel, fsdp_type r,
                    fsdp_tensor *a, fsdp_tensor *b) {
  Check c{op};
  c.floatOperands(a, b, r);
  c.that(a->type.rank <= 8 && b->type.rank <= 8, "rank above 8");
  // NumPy trailing broadcast.
  int64_t rank = std::max(a->type.rank, b->type.rank);
  std::vector<int64_t> dims(rank);
  for (int64_t i = 0; i < rank; ++i) {
    int64_t ai = a->type.rank - rank + i, bi = b->type.rank - rank + i;
    int64_t da = ai >= 0 ? a->type.dims[ai] : 1;
    int64_t db = bi >= 0 ? b->type.dims[bi] : 1;
    c.that(da == db || da == 1 || db == 1, "cannot broadcast " +
                                               typeString(a->type) + " with " +
                                               typeString(b->type));
    dims[i] = da == 1 ? db : da;
  }
  c.shape(r, dims, "result");
  fsdp_tensor *out = alloc(r);
  kernel(nullptr, r.dtype, a->data, a->type.dims, int(a->type.rank), b->data,
         b->type.dims, int(b->type.rank), r.dims, int(r.rank), out->data);
  return out;
}

/// Common checks of a same-shape unary float op.
void unary(const Check &c, const fsdp_type &r, const fsdp_tensor *x) {
  c.present(x, "operand");
  c.isFloat(x->type, "operand");
  c.sameDtype(r, x->type, "result");
  c.sameShape(r, x->type, "result");
}

} // namespace

fsdp_tensor *fsdp_op_embedding(fsdp_program *, fsdp_type r, fsdp_tensor *table,
                               fsdp_tensor *ids, fsdp_tensor *shard_index) {
  Check c{"embedding"};
  c.present(table, "table");
  c.present(ids, "ids");
  c.isFloat(table->type, "table");
  c.that(table->type.rank == 2,
         "table is " + typeString(table->type) + ", expected rank 2");
  c.isIndex(ids->type, "ids");
  c.sameDtype(r, table->type, "result");
  std::vector<int64_t> dims = Check::dimsOf(ids->type);
  dims.push_back(table->type.dims[1]);
  c.shape(r, dims, "result");
  int64_t firstId = 0;
  if (shard_index) {
    // A vocabulary block: ids of the other blocks give zero rows.
    firstId = shardStart(c.op, shard_index, table->type.dims[0]);
    checkIndices(c.op, ids, std::numeric_limits<int64_t>::max(), "ids");
  } else {
    checkIndices(c.op, ids, table->type.dims[0], "ids");
  }
  fsdp_tensor *out = alloc(r);
  fsdp_rt_embedding(nullptr, r.dtype, table->data, table->type.dims[0],
                    table->type.dims[1], firstId, ids->type.dtype, ids->data,
                    numElements(ids->type), out->data);
  return out;
}

fsdp_tensor *fsdp_op_linear(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                            fsdp_tensor *w, fsdp_tensor *bias) {
  Check c{"linear"};
  c.present(x, "input");
  c.present(w, "weight");
  c.isFloat(x->type, "input");
  c.rankAtLeast(x->type, 1, "input");
  int64_t k = x->type.dims[x->type.rank - 1];
  c.sameDtype(w->type, x->type, "weight");
  c.that(w->type.rank == 2 && w->type.dims[1] == k,
         "weight is " + typeString(w->type) + ", expected [N, " +
             std::to_string(k) + "]");
  int64_t n = w->type.dims[0];
  if (bias) {
    c.sameDtype(bias->type, x->type, "bias");
    c.shape(bias->type, {n}, "bias");
  }
  std::vector<int64_t> dims = Check::dimsOf(x->type);
  dims.back() = n;
  c.sameDtype(r, x->type, "result");
  c.shape(r, dims, "result");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_linear(nullptr, r.dtype, x->data, w->data,
                 bias ? bias->data : nullptr,
                 numElements(x->type) / (k ? k : 1), k, n, out->data);
  return out;
}

/// Shared by matmul (b unbatched) and batch_matmul (b batched like a).
static fsdp_tensor *matmulLike(const char *op, bool batchedB, fsdp_type r,
                               fsdp_tensor *a, fsdp_tensor *b, bool ta,
                               bool tb) {
  Check c{op};
  c.floatOperands(a, b, r);
  c.rankAtLeast(a->type, 2, "lhs");
  int64_t ar = a->type.rank;
  int64_t m = a->type.dims[ar - (ta ? 1 : 2)],
          k = a->type.dims[ar - (ta ? 2 : 1)];
  int64_t batch = product(a->type.dims, ar - 2);
  if (batchedB) {
    c.that(b->type.rank == ar, "rhs is " + typeString(b->type) +
                                   ", expected rank " + std::to_string(ar));
    for (int64_t i = 0; i < ar - 2; ++i)
      c.that(b->type.dims[i] == a->type.dims[i],
             "batch dims of " + typeString(a->type) + " and " +
                 typeString(b->type) + " differ");
  } else {
    c.that(b->type.rank == 2,
           "rhs is " + typeString(b->type) + ", expected rank 2");
  }
  int64_t br = b->type.rank;
  int64_t bk = b->type.dims[br - (tb ? 1 : 2)],
          n = b->type.dims[br - (tb ? 2 : 1)];
  c.that(bk == k, "contracting dims differ: " + typeString(a->type) + " and " +
                      typeString(b->type));
  std::vector<int64_t> dims(a->type.dims, a->type.dims + ar - 2);
  dims.push_back(m);
  dims.push_back(n);
  c.shape(r, dims, "result");
  fsdp_tensor *out = alloc(r);
  (batchedB ? fsdp_rt_batch_matmul : fsdp_rt_matmul)(
      nullptr, r.dtype, a->data, b->data, batch, m, k, n, ta, tb, out->data);
  return out;
}

fsdp_tensor *fsdp_op_matmul(fsdp_program *, fsdp_type r, fsdp_tensor *a,
                            fsdp_tensor *b, bool transpose_a,
                            bool transpose_b) {
  return matmulLike("matmul", false, r, a, b, transpose_a, transpose_b);
}

fsdp_tensor *fsdp_op_batch_matmul(fsdp_program *, fsdp_type r, fsdp_tensor *a,
                                  fsdp_tensor *b, bool transpose_a,
                                  bool transpose_b) {
  return matmulLike("batch_matmul", true, r, a, b, transpose_a, transpose_b);
}

fsdp_tensor *fsdp_op_add(fsdp_program *, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b) {
  return binary("add", fsdp_rt_add, r, a, b);
}

fsdp_tensor *fsdp_op_sub(fsdp_program *, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b) {
  return binary("sub", fsdp_rt_sub, r, a, b);
}

fsdp_tensor *fsdp_op_mul(fsdp_program *, fsdp_type r, fsdp_tensor *a,
                         fsdp_tensor *b) {
  return binary("mul", fsdp_rt_mul, r, a, b);
}

fsdp_tensor *fsdp_op_neg(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  unary(Check{"neg"}, r, x);
  fsdp_tensor *out = alloc(r);
  fsdp_rt_neg(nullptr, r.dtype, x->data, numElements(r), out->data);
  return out;
}

fsdp_tensor *fsdp_op_scale(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                           double factor) {
  unary(Check{"scale"}, r, x);
  fsdp_tensor *out = alloc(r);
  fsdp_rt_scale(nullptr, r.dtype, x->data, numElements(r), factor, out->data);
  return out;
}

#define FSDP_ACTIVATION(name, forward, gradient)                               \
  fsdp_tensor *fsdp_op_##name(fsdp_program *, fsdp_type r, fsdp_tensor *x) {   \
    unary(Check{#name}, r, x);                                                 \
    fsdp_tensor *out = alloc(r);                                               \
    fsdp_rt_##name(nullptr, r.dtype, x->data, numElements(r), out->data);      \
    return out;                                                                \
  }
#include "fsdp/Runtime/Activations.def"

fsdp_tensor *fsdp_op_gelu(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                          bool tanh_approximation) {
  unary(Check{"gelu"}, r, x);
  fsdp_tensor *out = alloc(r);
  fsdp_rt_gelu(nullptr, r.dtype, x->data, numElements(r), tanh_approximation,
               out->data);
  return out;
}

/// Checks of rms_norm and layer_norm; returns the normalized size.
static int64_t normChecks(const Check &c, const fsdp_type &r,
                          const fsdp_tensor *x, const fsdp_tensor *w,
                          const fsdp_tensor *bias) {
  unary(c, r, x);
  c.rankAtLeast(x->type, 1, "input");
  int64_t h = x->type.dims[x->type.rank - 1];
  c.present(w, "weight");
  c.sameDtype(w->type, x->type, "weight");
  c.shape(w->type, {h}, "weight");
  if (bias) {
    c.sameDtype(bias->type, x->type, "bias");
    c.shape(bias->type, {h}, "bias");
  }
  return h;
}

fsdp_tensor *fsdp_op_rms_norm(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                              fsdp_tensor *w, double eps) {
  int64_t h = normChecks(Check{"rms_norm"}, r, x, w, nullptr);
  fsdp_tensor *out = alloc(r);
  fsdp_rt_rms_norm(nullptr, r.dtype, x->data, w->data,
                   numElements(r) / (h ? h : 1), h, eps, out->data);
  return out;
}

fsdp_tensor *fsdp_op_layer_norm(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                                fsdp_tensor *w, fsdp_tensor *bias, double eps) {
  int64_t h = normChecks(Check{"layer_norm"}, r, x, w, bias);
  fsdp_tensor *out = alloc(r);
  fsdp_rt_layer_norm(nullptr, r.dtype, x->data, w->data,
                     bias ? bias->data : nullptr, numElements(r) / (h ? h : 1),
                     h, eps, out->data);
  return out;
}

fsdp_tensor *fsdp_op_rotary(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                            fsdp_tensor *positions, double theta,
                            const double *inv_freq, double attention_scaling,
                            bool inverse) {
  Check c{"rotary"};
  unary(c, r, x);
  c.that(x->type.rank == 4,
         "input is " + typeString(x->type) + ", expected [B, S, N, D]");
  c.that(x->type.dims[3] % 2 == 0,
         "head dim " + std::to_string(x->type.dims[3]) + " is odd");
  c.present(positions, "positions");
  c.isIndex(positions->type, "positions");
  c.shape(positions->type, {x->type.dims[0], x->type.dims[1]}, "positions");
  fsdp_tensor *out = alloc(r);
  auto kernel = inverse ? fsdp_rt_rotary_grad : fsdp_rt_rotary;
  kernel(nullptr, r.dtype, x->data, positions->type.dtype, positions->data,
         x->type.dims[0], x->type.dims[1], x->type.dims[2], x->type.dims[3],
         theta, inv_freq, attention_scaling, out->data);
  return out;
}

void fsdp_op_attention(fsdp_program *, fsdp_tensor *out, fsdp_tensor *lse,
                       fsdp_tensor *q, fsdp_tensor *k, fsdp_tensor *v,
                       fsdp_tensor *pos0, fsdp_tensor *pos1, fsdp_tensor *pos2,
                       bool causal, int64_t sliding_window, double scale,
                       bool packed) {
  Check c{"attention"};
  fsdp_tensor *documents = packed ? pos0 : nullptr;
  fsdp_tensor *positions = packed ? pos1 : pos0;
  fsdp_tensor *key_positions = packed ? pos2 : pos1;
  c.that(packed || !pos2, "three positions without packed");
  c.present(q, "q");
  c.present(k, "k");
  c.present(v, "v");
  c.isFloat(q->type, "q");
  c.that(q->type.rank == 4,
         "q is " + typeString(q->type) + ", expected [B, S, Nq, D]");
  int64_t b = q->type.dims[0], s = q->type.dims[1], nq = q->type.dims[2],
          d = q->type.dims[3];
  c.sameDtype(k->type, q->type, "k");
  c.sameDtype(v->type, q->type, "v");
  c.that(k->type.rank == 4 && k->type.dims[0] == b && k->type.dims[3] == d,
         "k is " + typeString(k->type) + ", expected [" + std::to_string(b) +
             ", Skv, Nkv, " + std::to_string(d) + "]");
  int64_t skv = k->type.dims[1], nkv = k->type.dims[2];
  c.that(nkv > 0 && nq % nkv == 0, "query heads " + std::to_string(nq) +
                                       " are not a multiple of kv heads " +
                                       std::to_string(nkv));
  c.that(v->type.rank == 4 && v->type.dims[0] == b && v->type.dims[1] == skv &&
             v->type.dims[2] == nkv,
         "v is " + typeString(v->type) + ", expected [" + std::to_string(b) +
             ", " + std::to_string(skv) + ", " + std::to_string(nkv) + ", Dv]");
  int64_t dv = v->type.dims[3];
  c.sameDtype(out->type, q->type, "result");
  c.shape(out->type, {b, s, nq, dv}, "result");
  c.that(lse->type.dtype == FSDP_RT_F32, "logsumexp must be f32");
  c.shape(lse->type, {b, nq, s}, "logsumexp");
  if (positions) {
    c.that(positions->type.dtype == FSDP_RT_I64, "positions must be i64");
    c.shape(positions->type, {b, s}, "positions");
  }
  if (key_positions) {
    c.that(positions != nullptr, "key_positions need positions");
    c.that(key_positions->type.dtype == FSDP_RT_I64,
           "key_positions must be i64");
    c.shape(key_positions->type, {b, skv}, "key_positions");
  }
  if (packed) {
    c.that(documents && causal, "packed needs document positions and causal");
    c.that(documents->type.dtype == FSDP_RT_I64,
           "document positions must be i64");
    c.shape(documents->type, {b, s}, "document positions");
  }
  if (scale <= 0)
    scale = 1.0 / std::sqrt(double(d));
  fsdp_rt_attention(nullptr, q->type.dtype, q->data, k->data, v->data, b, s,
                    skv, nq, nkv, d, dv, indices(positions),
                    indices(key_positions), indices(documents), causal,
                    sliding_window, scale, out->data,
                    static_cast<float *>(lse->data));
}

void fsdp_op_attention_combine(fsdp_program *, fsdp_tensor *out,
                               fsdp_tensor *lse, fsdp_tensor *out_a,
                               fsdp_tensor *lse_a, fsdp_tensor *out_b,
                               fsdp_tensor *lse_b) {
  Check c{"attention_combine"};
  c.that(out_a->type.rank == 4, "result_a is " + typeString(out_a->type) +
                                    ", expected [B, S, Nq, Dv]");
  int64_t b = out_a->type.dims[0], s = out_a->type.dims[1],
          nq = out_a->type.dims[2], dv = out_a->type.dims[3];
  for (fsdp_tensor *o : {out_b, out})
    c.shape(o->type, {b, s, nq, dv}, "result");
  for (fsdp_tensor *l : {lse_a, lse_b, lse}) {
    c.that(l->type.dtype == FSDP_RT_F32, "logsumexp must be f32");
    c.shape(l->type, {b, nq, s}, "logsumexp");
  }
  fsdp_rt_attention_combine(nullptr, out_a->type.dtype, out_a->data,
                            static_cast<const float *>(lse_a->data),
                            out_b->data,
                            static_cast<const float *>(lse_b->data), b, s, nq,
                            dv, out->data, static_cast<float *>(lse->data));
}

fsdp_tensor *fsdp_op_softmax(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                             int64_t dim) {
  Check c{"softmax"};
  unary(c, r, x);
  c.that(dim >= 0 && dim < x->type.rank, "dim " + std::to_string(dim) +
                                             " out of range for " +
                                             typeString(x->type));
  fsdp_tensor *out = alloc(r);
  fsdp_rt_softmax(nullptr, r.dtype, x->data, x->type.dims, int(x->type.rank),
                  int(dim), out->data);
  return out;
}

fsdp_tensor *fsdp_op_reshape(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  Check c{"reshape"};
  c.present(x, "operand");
  c.sameDtype(r, x->type, "result");
  c.that(numElements(r) == numElements(x->type),
         "result " + typeString(r) + " and operand " + typeString(x->type) +
             " differ in element count");
  return view(x, r, 0);
}

fsdp_tensor *fsdp_op_transpose(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                               fsdp_ints perm) {
  Check c{"transpose"};
  c.present(x, "operand");
  c.sameDtype(r, x->type, "result");
  c.that(perm.size == x->type.rank, "permutation has " +
                                        std::to_string(perm.size) +
                                        " entries for " + typeString(x->type));
  std::vector<bool> seen(perm.size, false);
  std::vector<int64_t> dims(perm.size);
  for (int64_t i = 0; i < perm.size; ++i) {
    int64_t v = perm.values[i];
    c.that(v >= 0 && v < perm.size && !seen[v], "not a permutation");
    seen[v] = true;
    dims[i] = x->type.dims[v];
  }
  c.shape(r, dims, "result");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_transpose(nullptr, r.dtype, x->data, x->type.dims, int(x->type.rank),
                    perm.values, out->data);
  return out;
}

fsdp_tensor *fsdp_op_slice(fsdp_program *, fsdp_type r, fsdp_tensor *x,
                           int64_t dim, int64_t start) {
  Check c{"slice"};
  c.present(x, "operand");
  c.sameDtype(r, x->type, "result");
  c.that(dim >= 0 && dim < x->type.rank && r.rank == x->type.rank,
         "dim " + std::to_string(dim) + " or result " + typeString(r) +
             " does not fit " + typeString(x->type));
  std::vector<int64_t> dims = Check::dimsOf(x->type);
  dims[dim] = r.dims[dim];
  c.shape(r, dims, "result");
  c.that(start >= 0 && start + r.dims[dim] <= x->type.dims[dim],
         "[" + std::to_string(start) + ", " +
             std::to_string(start + r.dims[dim]) + ") is outside dim " +
             std::to_string(dim) + " of " + typeString(x->type));
  // A slice of the leading non-unit dim is contiguous: a view.
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i)
    outer *= x->type.dims[i];
  for (int64_t i = dim + 1; i < x->type.rank; ++i)
    inner *= x->type.dims[i];
  if (outer == 1)
    return view(x, r, start * inner * int64_t(fsdp_rt_dtype_size(r.dtype)));
  fsdp_tensor *out = alloc(r);
  fsdp_rt_slice(nullptr, r.dtype, x->data, x->type.dims, int(x->type.rank),
                int(dim), start, r.dims[dim], out->data);
  return out;
}

fsdp_tensor *fsdp_op_concat(fsdp_program *, fsdp_type r, int64_t dim,
                            int64_t count, ...) {
  Check c{"concat"};
  va_list args;
  va_start(args, count);
  std::vector<fsdp_tensor *> xs = variadicTensors(c, count, args);
  va_end(args);
  fsdp_tensor *a = xs.front();
  c.present(a, "input 0");
  c.that(dim >= 0 && dim < a->type.rank, "dim " + std::to_string(dim) +
                                             " out of range for " +
                                             typeString(a->type));
  c.sameDtype(r, a->type, "result");
  checkJoin(c, xs, dim, 0);
  std::vector<int64_t> dims = Check::dimsOf(a->type);
  dims[dim] = 0;
  std::vector<const void *> inputs;
  std::vector<int64_t> sizes;
  for (fsdp_tensor *x : xs) {
    dims[dim] += x->type.dims[dim];
    inputs.push_back(x->data);
    sizes.push_back(x->type.dims[dim]);
  }
  c.shape(r, dims, "result");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_concat(nullptr, r.dtype, int(count), inputs.data(), sizes.data(),
                 r.dims, int(r.rank), int(dim), out->data);
  return out;
}

fsdp_tensor *fsdp_op_roll(fsdp_program *, fsdp_type r, fsdp_tensor *shift,
                          int64_t dim, int64_t block, int64_t scale,
                          int64_t offset, int64_t count, int64_t n, ...) {
  Check c{"roll"};
  va_list args;
  va_start(args, n);
  std::vector<fsdp_tensor *> xs = variadicTensors(c, n, args);
  va_end(args);
  c.present(shift, "shift");
  c.that(shift->type.dtype == FSDP_RT_I64 && shift->type.rank == 0,
         "shift is " + typeString(shift->type) + ", expected an i64 scalar");
  fsdp_tensor *a = xs.front();
  c.present(a, "input 0");
  c.that(dim >= 0 && dim < a->type.rank && block > 0,
         "cannot rotate blocks of " + std::to_string(block) + " along dim " +
             std::to_string(dim) + " of " + typeString(a->type));
  c.sameDtype(r, a->type, "result");
  // Each joined block: its input's data, its index there, and the input's
  // blocks per outer row.
  struct Source {
    const char *data;
    int64_t index, blocks;
  };
  checkJoin(c, xs, dim, block);
  std::vector<Source> sources;
  int64_t outer = product(a->type.dims, dim);
  int64_t piece = 0;
  for (fsdp_tensor *x : xs) {
    int64_t blocksHere = x->type.dims[dim] / block;
    piece = byteSize(x->type) / (outer * blocksHere);
    for (int64_t k = 0; k < blocksHere; ++k)
      sources.push_back({static_cast<const char *>(x->data), k, blocksHere});
  }
  int64_t blocks = static_cast<int64_t>(sources.size());
  if (count == 0)
    count = blocks;
  c.that(count >= 1 && count <= blocks, "count " + std::to_string(count) +
                                            " is not between 1 and " +
                                            std::to_string(blocks));
  std::vector<int64_t> dims = Check::dimsOf(a->type);
  dims[dim] = count * block;
  c.shape(r, dims, "result");
  int64_t rotate =
      (scale * indexScalar(c.op, shift, "shift") + offset) % blocks;
  if (rotate < 0)
    rotate += blocks;
  fsdp_tensor *out = alloc(r);
  char *dst = static_cast<char *>(out->data);
  // Block i of each outer row comes from one source block: a strided copy.
  for (int64_t i = 0; i < count; ++i) {
    const Source &from = sources[size_t((i - rotate + blocks) % blocks)];
    fsdp_rt_copy_2d(nullptr, dst + i * piece, size_t(count * piece),
                    from.data + from.index * piece, size_t(from.blocks * piece),
                    size_t(piece), size_t(outer));
  }
  return out;
}

namespace {
/// A copy of `x` in host memory (`host`) or on the device.
fsdp_tensor *placedCopy(const char *op, fsdp_type r, fsdp_tensor *x,
                        bool host) {
  Check c{op};
  c.present(x, "operand");
  c.sameShape(r, x->type, "result");
  if (r.dtype != x->type.dtype)
    fail(op,
         "result " + typeString(r) + " is not operand " + typeString(x->type));
  fsdp_tensor *out = newTensor(r, host);
  // In order on the compute stream, without a wait: only kernels read it.
  fsdp_rt_copy(nullptr, r.dtype, x->data, numElements(r), out->data);
  return out;
}
} // namespace

fsdp_tensor *fsdp_op_to_device(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  return placedCopy("to_device", r, x, false);
}

fsdp_tensor *fsdp_op_to_host(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  return placedCopy("to_host", r, x, true);
}

fsdp_tensor *fsdp_op_cast(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  Check c{"cast"};
  c.present(x, "operand");
  c.isFloat(x->type, "operand");
  c.isFloat(r, "result");
  c.sameShape(r, x->type, "result");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_cast(nullptr, x->type.dtype, x->data, r.dtype, numElements(r),
               out->data);
  return out;
}

fsdp_tensor *fsdp_op_cross_entropy(fsdp_program *, fsdp_type r,
                                   fsdp_tensor *logits, fsdp_tensor *labels,
                                   int64_t ignore_index,
                                   fsdp_loss_reduction reduction) {
  Check c{"cross_entropy"};
  c.present(logits, "logits");
  c.present(labels, "labels");
  c.isFloat(logits->type, "logits");
  c.rankAtLeast(logits->type, 1, "logits");
  c.isIndex(labels->type, "labels");
  std::vector<int64_t> rowDims = Check::dimsOf(logits->type);
  int64_t vocab = rowDims.back();
  rowDims.pop_back();
  c.shape(labels->type, rowDims, "labels");
  c.that(r.dtype == FSDP_RT_F32,
         "result is " + typeString(r) + ", expected f32");
  c.shape(r, reduction == FSDP_LOSS_NONE ? rowDims : std::vector<int64_t>{},
          "result");
  checkIndices(c.op, labels, vocab, "labels", ignore_index);
  int64_t rows = numElements(labels->type);
  fsdp_tensor *out = alloc(r);
  auto *result = static_cast<float *>(out->data);
  if (reduction == FSDP_LOSS_NONE) {
    fsdp_rt_cross_entropy(nullptr, logits->type.dtype, logits->data,
                          labels->type.dtype, labels->data, rows, vocab,
                          ignore_index, FSDP_RT_REDUCTION_NONE, result,
                          nullptr);
    return out;
  }
  // The mean divides by the tokens that count, not by all positions (the
  // kernel does, on the device).
  fsdp_rt_cross_entropy(nullptr, logits->type.dtype, logits->data,
                        labels->type.dtype, labels->data, rows, vocab,
                        ignore_index, kernelReduction(reduction), result,
                        nullptr);
  return out;
}

int64_t fsdp::host::indexScalar(const char *op, const fsdp_tensor *t,
                                const char *what) {
  if (t->hostKnown)
    return int64_t(t->hostValue);
  if (!fsdp_rt_host_addressable())
    fail(op, std::string(what) + " is a device value the host did not write; "
                                 "reading it would stall the step");
  return indexAt(t, 0);
}

void fsdp::host::checkIndices(const char *op, const fsdp_tensor *ids,
                              int64_t high, const char *what, int64_t ignore) {
  // Device buffers are not read back: the data loader checked every token
  // before uploading it, and the kernels bound their reads.
  if (!fsdp_rt_host_addressable())
    return;
  int64_t n = numElements(ids->type);
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = indexAt(ids, i);
    if (v != ignore && (v < 0 || v >= high))
      fail(op, std::string(what) + " element " + std::to_string(i) + " is " +
                   std::to_string(v) + ", outside [0, " + std::to_string(high) +
                   ")");
  }
}

int64_t fsdp::host::shardStart(const char *op, const fsdp_tensor *shard_index,
                               int64_t blockSize) {
  if (shard_index->type.dtype != FSDP_RT_I64 || shard_index->type.rank != 0)
    fail(op, "shard_index is " + typeString(shard_index->type) +
                 ", expected an i64 scalar");
  int64_t index = indexScalar(op, shard_index, "shard_index");
  if (index < 0)
    fail(op, "shard_index is " + std::to_string(index));
  return index * blockSize;
}

fsdp_tensor *fsdp_op_reduce_max(fsdp_program *, fsdp_type r, fsdp_tensor *x) {
  Check c{"reduce_max"};
  c.present(x, "input");
  c.isFloat(x->type, "input");
  c.rankAtLeast(x->type, 1, "input");
  std::vector<int64_t> dims = Check::dimsOf(x->type);
  int64_t n = dims.back();
  dims.pop_back();
  c.sameDtype(r, x->type, "result");
  c.shape(r, dims, "result");
  c.that(n > 0, "reduces an empty dim");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_reduce_max(nullptr, r.dtype, x->data, numElements(r), n, out->data);
  return out;
}

fsdp_tensor *fsdp_op_cross_entropy_combine(
    fsdp_program *, fsdp_type r, fsdp_tensor *sum_exp, fsdp_tensor *target,
    fsdp_tensor *labels, int64_t ignore_index, fsdp_loss_reduction reduction) {
  Check c{"cross_entropy_combine"};
  c.present(sum_exp, "sum_exp");
  c.present(target, "target");
  c.present(labels, "labels");
  c.isIndex(labels->type, "labels");
  std::vector<int64_t> rowDims = Check::dimsOf(labels->type);
  for (fsdp_tensor *t : {sum_exp, target}) {
    c.that(t->type.dtype == FSDP_RT_F32,
           "operand is " + typeString(t->type) + ", expected f32");
    c.shape(t->type, rowDims, "operand");
  }
  c.that(r.dtype == FSDP_RT_F32,
         "result is " + typeString(r) + ", expected f32");
  c.shape(r, reduction == FSDP_LOSS_NONE ? rowDims : std::vector<int64_t>{},
          "result");
  fsdp_tensor *out = alloc(r);
  fsdp_rt_reduction kind = kernelReduction(reduction);
  fsdp_rt_cross_entropy_combine(
      nullptr, static_cast<const float *>(sum_exp->data),
      static_cast<const float *>(target->data), labels->type.dtype,
      labels->data, numElements(labels->type), ignore_index, kind,
      static_cast<float *>(out->data), nullptr);
  return out;
}

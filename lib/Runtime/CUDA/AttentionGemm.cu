//===- AttentionGemm.cu - Attention as cuBLAS products on tensor cores ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The default attention of the CUDA backend (FSDP_RT_CUDA_ATTENTION=exact
// selects the per-row kernels of Attention.cu instead): the products run in
// cuBLAS on tensor cores, and two row kernels do the masked softmax and its
// gradient in between.
//
// Layout. Q, K, V and dO are first copied head-major: Q [b, s, nkv, group,
// d] becomes Qt [b, nkv, s, group, d] (group = nq / nkv), K and V become
// [b, nkv, s, d]. For one (batch entry, KV head) pair the rows of Qt from
// query position r0 on are then contiguous, row (i - r0)·group + r holding
// query head g·group + r at position i, so one strided-batched product over
// all pairs of a chunk covers every query head at once and the grouped-
// query sums of dK and dV happen inside the products' reductions. Results
// are written head-major and copied back ([b, s, heads, dim]).
//
// Per block of query positions [r0, r1) (256 positions; the keys [k0, k1)
// any of them sees under a causal mask or a window, so that a block's
// products skip the keys none of its queries sees):
//
//   forward   S = Qt·Ktᵀ (f32), P = exp(scale·S - lse) over the keys each
//             query sees (lse = log Σ exp(scale·S), written [b, nq, s] for
//             the backward), Ot = P·Vt with P in the input type;
//   backward  S again, dP = dOt·Vtᵀ (f32), Δ = Σ_j P·dP (in double, as the
//             CPU backend), dS = scale·P·(dP - Δ) in the input type,
//             dQt = dS·Kt, dKt += dSᵀ·Qt, dVt += Pᵀ·dOt, the KV sums in f32
//             from zero over the blocks and rounded once.
//
// One product launches per block and direction for a whole chunk of the
// batch: the first version ran one per query head and block, and at
// Llama-3.2-1B's shape (32 heads, 8 blocks) its 768 small launches per
// layer made the H200 spend 5.7 ms per layer forward and 8.4 ms backward.
// f32 runs with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32). The score matrices
// are temporaries of nq·256·s elements per batch entry, chunked so that one
// stays under 256 MiB, and go through memory: a tiled flash-style kernel
// that keeps them on chip stays to be done.
//
//===----------------------------------------------------------------------===//

#include "AttentionGemm.cuh"

#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace fsdp::rt::cuda;

namespace {

/// Row-major c[i] = op(a[i])·op(b[i]) + beta·c[i] for i < batch, op(a)
/// [m, k], op(b) [k, n], c [m, n]; each operand with its leading dimension
/// (row stride) and batch stride in elements. Column-major cuBLAS computes
/// cᵀ = op(b)ᵀ·op(a)ᵀ: the operands swapped, each keeping its transpose.
struct Product {
  cublasHandle_t handle;
  cublasComputeType_t compute;
  const char *where;

  void run(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           const void *a, cudaDataType aType, int64_t lda, int64_t strideA,
           const void *b, cudaDataType bType, int64_t ldb, int64_t strideB,
           float beta, void *c, cudaDataType cType, int64_t ldc,
           int64_t strideC, int64_t batch) const {
    float alpha = 1.0f;
    check(cublasGemmStridedBatchedEx_64(
              handle, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
              transA ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, bType,
              ldb, strideB, a, aType, lda, strideA, &beta, c, cType, ldc,
              strideC, batch, compute, CUBLAS_GEMM_DEFAULT),
          where);
  }
};

/// The keys query i sees, [lo, hi) (AttentionGemm.cuh), and the scale.
struct Mask {
  int64_t s;
  int causal;
  int64_t window;
  float scale;
  __host__ __device__ int64_t lo(int64_t i) const {
    return firstKey(i, window);
  }
  __host__ __device__ int64_t hi(int64_t i) const {
    return endKey(i, causal, s);
  }
};

/// A block of query positions [r0, r0 + m) and the keys any of them sees,
/// [k0, k0 + nk), for the (batch entry, KV head) pairs of a chunk from
/// batch entry bi0: per pair the scores are [m·group, nk], row
/// (i - r0)·group + r for query head g·group + r at position i.
struct Block {
  int64_t r0, m, k0, nk;
  int64_t bi0, nq, nkv, group;
  /// Score rows of one pair.
  __host__ __device__ int64_t rows() const { return m * group; }
  /// The query position of a row of the chunk's scores.
  __device__ int64_t query(int64_t row) const {
    return r0 + (row % rows()) / group;
  }
  /// The row's batch entry, query head and position.
  __device__ void place(int64_t row, int64_t &bi, int64_t &h,
                        int64_t &i) const {
    int64_t pair = row / rows(), local = row % rows();
    bi = bi0 + pair / nkv, h = (pair % nkv) * group + local % group;
    i = r0 + local / group;
  }
  /// The row's index in lse, [b, nq, s].
  __device__ int64_t lseAt(int64_t row, int64_t s) const {
    int64_t bi, h, i;
    place(row, bi, h, i);
    return (bi * nq + h) * s + i;
  }
  /// The row's first element in the attention's output, [b, s, nq, dv].
  __device__ int64_t outAt(int64_t row, int64_t s, int64_t dv) const {
    int64_t bi, h, i;
    place(row, bi, h, i);
    return ((bi * s + i) * nq + h) * dv;
  }
};

/// Per row of a block's scores [rows, nk] (f32): lse of the visible scaled
/// scores and P (zero where masked) in the input type.
template <typename E>
__global__ void softmaxRows(const float *scores, Mask mask, Block blk,
                            int64_t rows, typename E::T *p, float *lse) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t i = blk.query(row);
    // The visible keys as columns of the block.
    int64_t lo = mask.lo(i) - blk.k0, hi = mask.hi(i) - blk.k0;
    const float *x = scores + row * blk.nk;
    float m = -INFINITY;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
      m = fmaxf(m, mask.scale * x[j]);
    m = blockReduce(m, MaxOp());
    float sum = 0;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
      sum += expf(mask.scale * x[j] - m);
    sum = blockReduce(sum, SumOp());
    float l = m + logf(sum);
    if (threadIdx.x == 0)
      lse[blk.lseAt(row, mask.s)] = l;
    for (int64_t j = threadIdx.x; j < blk.nk; j += blockDim.x)
      E::store(p, row * blk.nk + j,
               j >= lo && j < hi ? expf(mask.scale * x[j] - l) : 0.0f);
  }
}

/// Per row of a block: P rebuilt from the scores and lse, Δ = Σ_j P·dP =
/// Σ_d dO·O from the forward's output `out` and its gradient `dout`
/// ([b, s, nq, dv], in double; over every key the output saw), then P and
/// dS = scale·P·(dP - Δ) in the input type (zero where masked).
template <typename E>
__global__ void softmaxGradRows(const float *scores, const float *dp,
                                const float *lse, const typename E::T *out,
                                const typename E::T *dout, int64_t dv,
                                Mask mask, Block blk, int64_t rows,
                                typename E::T *p, typename E::T *ds) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t i = blk.query(row);
    int64_t lo = mask.lo(i) - blk.k0, hi = mask.hi(i) - blk.k0;
    float l = lse[blk.lseAt(row, mask.s)];
    const float *x = scores + row * blk.nk, *g = dp + row * blk.nk;
    int64_t o = blk.outAt(row, mask.s, dv);
    double delta = 0;
    for (int64_t dd = threadIdx.x; dd < dv; dd += blockDim.x)
      delta += double(E::load(out, o + dd)) * double(E::load(dout, o + dd));
    delta = blockReduce(delta, SumOp());
    for (int64_t j = threadIdx.x; j < blk.nk; j += blockDim.x) {
      bool seen = j >= lo && j < hi;
      float pj = seen ? expf(mask.scale * x[j] - l) : 0.0f;
      E::store(p, row * blk.nk + j, pj);
      E::store(ds, row * blk.nk + j,
               seen ? mask.scale * pj * (g[j] - float(delta)) : 0.0f);
    }
  }
}

/// Query positions per block: under a mask each block's products cover
/// only the keys its queries can see, and the score matrices stay bounded.
constexpr int64_t kRowBlock = 256;

/// Batch entries per chunk: one f32 score matrix set (nq·kRowBlock·s per
/// entry) stays under 256 MiB.
int64_t chunkOf(int64_t b, int64_t s, int64_t nq) {
  int64_t rows = s < kRowBlock ? s : kRowBlock;
  int64_t per = nq * rows * s * int64_t(sizeof(float));
  int64_t chunk = (int64_t(256) << 20) / (per > 0 ? per : 1);
  return chunk < 1 ? 1 : chunk < b ? chunk : b;
}

unsigned rowBlocks(int64_t rows) {
  return unsigned(rows < (1 << 20) ? rows : (1 << 20));
}

/// out = in with its two middle axes swapped, [A, B, C, D] to [A, C, B, D],
/// converted from Src to Dst; one thread per element, Index arithmetic.
template <typename Src, typename Dst, typename Index>
__global__ void swapMiddleKernel(const typename Src::T *in, Index B, Index C,
                                 Index D, Index n, typename Dst::T *out) {
  for (Index o = Index(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
       o += Index(gridDim.x) * blockDim.x) {
    // o = ((a·C + c)·B + b)·D + d.
    Index d = o % D, rest = o / D;
    Index b = rest % B;
    rest /= B;
    Index c = rest % C, a = rest / C;
    Dst::store(out, o, Src::load(in, ((a * B + b) * C + c) * D + d));
  }
}

template <typename Src, typename Dst>
void swapMiddle(cudaStream_t stream, const void *in, int64_t A, int64_t B,
                int64_t C, int64_t D, void *out) {
  int64_t n = A * B * C * D;
  if (n == 0)
    return;
  const auto *x = static_cast<const typename Src::T *>(in);
  auto *y = static_cast<typename Dst::T *>(out);
  if (n <= int64_t(INT32_MAX))
    swapMiddleKernel<Src, Dst, uint32_t><<<gridFor(n), kThreads, 0, stream>>>(
        x, uint32_t(B), uint32_t(C), uint32_t(D), uint32_t(n), y);
  else
    swapMiddleKernel<Src, Dst, int64_t>
        <<<gridFor(n), kThreads, 0, stream>>>(x, B, C, D, n, y);
}

/// What both directions share: the products on the call's stream, the
/// element type, the chunking, and the head-major operands.
struct Heads {
  Heads(const KernelScope &scope, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
        const AttentionShape &a)
      : product{blasOf(stream),
                dtype == FSDP_RT_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC
                                     : CUBLAS_COMPUTE_32F,
                scope.name()},
        type(blasType(dtype)), elt(fsdp_rt_dtype_size(dtype)), a(a),
        group(a.nq / a.nkv),
        chunk(chunkOf(a.b, a.s, a.nq)), mask{a.s, a.causal, a.window,
                                             float(a.scale)} {}

  /// Element offset of query position r of the first pair of batch entry
  /// bi0 in a head-major [b, nkv, s, heads / nkv, dim] tensor (heads = nq
  /// for Q, O and their gradients, nkv for K and V).
  int64_t at(int64_t bi0, int64_t r, int64_t perPair, int64_t dim) const {
    return (bi0 * a.nkv * a.s + r) * perPair * dim;
  }

  /// The blocks of query positions for the pairs from batch entry bi0, in
  /// order.
  template <typename Fn> void forEachBlock(int64_t bi0, Fn fn) const {
    int64_t s = a.s;
    for (int64_t r0 = 0; r0 < s; r0 += kRowBlock) {
      int64_t r1 = r0 + kRowBlock < s ? r0 + kRowBlock : s;
      // Keys seen by some query of the block: lo and hi grow with i.
      int64_t k0 = mask.lo(r0), k1 = mask.hi(r1 - 1);
      fn(Block{r0, r1 - r0, k0, k1 - k0, bi0, a.nq, a.nkv, group});
    }
  }

  /// The block's scores for n pairs, Qt[r0:r1]·Kt[k0:k1]ᵀ in f32 ([m·group,
  /// nk] per pair).
  void scores(const Block &blk, int64_t n, const char *qt, const char *kt,
              float *out) const {
    int64_t s = a.s;
    product.run(false, true, blk.rows(), blk.nk, a.d,
                qt + at(blk.bi0, blk.r0, group, a.d) * elt, type, a.d,
                s * group * a.d, kt + at(blk.bi0, blk.k0, 1, a.d) * elt, type,
                a.d, s * a.d, 0.0f, out, CUDA_R_32F, blk.nk,
                blk.rows() * blk.nk, n);
  }

  /// Copies a [b, s, nkv, perPair·dim] tensor head-major, [b, nkv, s,
  /// perPair·dim], in the element type.
  void toHeadMajor(fsdp_rt_dtype dtype, cudaStream_t st, const void *x,
                   int64_t perPair, int64_t dim, void *out) const {
    dispatchFloat(dtype, product.where, [&](auto e) {
      using E = decltype(e);
      swapMiddle<E, E>(st, x, a.b, a.s, a.nkv, perPair * dim, out);
    });
  }

  Product product;
  cudaDataType type;
  size_t elt;
  const AttentionShape &a;
  int64_t group, chunk;
  Mask mask;
};

/// Q, K and V copied head-major, temporaries on the call's stream.
struct HeadMajorInputs {
  HeadMajorInputs(const Heads &heads, fsdp_rt_dtype dtype, cudaStream_t st,
                  const void *query, const void *key, const void *value)
      : q(bytes(heads, heads.a.nq, heads.a.d), st, heads.product.where),
        k(bytes(heads, heads.a.nkv, heads.a.d), st, heads.product.where),
        v(bytes(heads, heads.a.nkv, heads.a.dv), st, heads.product.where) {
    heads.toHeadMajor(dtype, st, query, heads.group, heads.a.d, q.get());
    heads.toHeadMajor(dtype, st, key, 1, heads.a.d, k.get());
    heads.toHeadMajor(dtype, st, value, 1, heads.a.dv, v.get());
  }

  /// Bytes of a [b, s, heads, dim] tensor of the element type.
  static int64_t bytes(const Heads &h, int64_t heads, int64_t dim) {
    return h.a.b * h.a.s * heads * dim * int64_t(h.elt);
  }

  Temp<char> q, k, v;
};
} // namespace

fsdp::rt::cuda::AttentionPath fsdp::rt::cuda::attentionPath() {
  static const AttentionPath path = [] {
    const char *choice = std::getenv("FSDP_RT_CUDA_ATTENTION");
    if (!choice || !*choice || !std::strcmp(choice, "flash"))
      return AttentionPath::Flash;
    if (!std::strcmp(choice, "products"))
      return AttentionPath::Products;
    if (!std::strcmp(choice, "exact"))
      return AttentionPath::Exact;
    fail("FSDP_RT_CUDA_ATTENTION", "expected flash, products or exact");
  }();
  return path;
}

void fsdp::rt::cuda::attentionProducts(const KernelScope &scope,
                                       fsdp_rt_stream stream,
                                       fsdp_rt_dtype dtype, const void *q,
                                       const void *k, const void *v,
                                       const AttentionShape &a, void *out,
                                       float *lse) {
  cudaStream_t st = scope.stream();
  Heads heads(scope, stream, dtype, a);
  int64_t s = a.s, group = heads.group, chunk = heads.chunk;
  size_t elt = heads.elt;
  HeadMajorInputs in(heads, dtype, st, q, k, v);
  Temp<char> ot(HeadMajorInputs::bytes(heads, a.nq, a.dv), st, scope.name());
  int64_t rows = s < kRowBlock ? s : kRowBlock;
  Temp<float> scores(chunk * a.nq * rows * s, st, scope.name());
  Temp<char> probs(int64_t(chunk * a.nq * rows * s * elt), st, scope.name());
  for (int64_t bi0 = 0; bi0 < a.b; bi0 += chunk) {
    int64_t pairs = (a.b - bi0 < chunk ? a.b - bi0 : chunk) * a.nkv;
    heads.forEachBlock(bi0, [&](const Block &blk) {
      heads.scores(blk, pairs, in.q.get(), in.k.get(), scores.get());
      dispatchFloat(dtype, scope.name(), [&](auto e) {
        using E = decltype(e);
        softmaxRows<E><<<rowBlocks(pairs * blk.rows()), kThreads, 0, st>>>(
            scores.get(), heads.mask, blk, pairs * blk.rows(),
            reinterpret_cast<typename E::T *>(probs.get()), lse);
      });
      // Ot[r0:r1] = P·Vt[k0:k1].
      heads.product.run(false, false, blk.rows(), a.dv, blk.nk, probs.get(),
                        heads.type, blk.nk, blk.rows() * blk.nk,
                        in.v.get() + heads.at(bi0, blk.k0, 1, a.dv) * elt,
                        heads.type, a.dv, s * a.dv, 0.0f,
                        ot.get() + heads.at(bi0, blk.r0, group, a.dv) * elt,
                        heads.type, a.dv, s * group * a.dv, pairs);
    });
  }
  // [b, nkv, s, group·dv] back to [b, s, nq, dv].
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    swapMiddle<E, E>(st, ot.get(), a.b, a.nkv, s, group * a.dv, out);
  });
}

void fsdp::rt::cuda::attentionGradProducts(const KernelScope &scope,
                                           fsdp_rt_stream stream,
                                           fsdp_rt_dtype dtype, const void *q,
                                           const void *k, const void *v,
                                           const void *out, const float *lse,
                                           const void *dout,
                                           const AttentionShape &a, void *dq,
                                           void *dk, void *dvalue) {
  cudaStream_t st = scope.stream();
  Heads heads(scope, stream, dtype, a);
  const Product &product = heads.product;
  cudaDataType type = heads.type;
  size_t elt = heads.elt;
  int64_t s = a.s, group = heads.group, chunk = heads.chunk;
  int64_t kvElems = a.b * s * a.nkv;
  HeadMajorInputs in(heads, dtype, st, q, k, v);
  Temp<char> dot(HeadMajorInputs::bytes(heads, a.nq, a.dv), st, scope.name());
  Temp<char> dqt(HeadMajorInputs::bytes(heads, a.nq, a.d), st, scope.name());
  heads.toHeadMajor(dtype, st, dout, group, a.dv, dot.get());
  int64_t rows = s < kRowBlock ? s : kRowBlock;
  int64_t scoreElems = chunk * a.nq * rows * s;
  Temp<float> scores(scoreElems, st, scope.name());
  Temp<float> dp(scoreElems, st, scope.name());
  Temp<char> probs(int64_t(scoreElems * elt), st, scope.name());
  Temp<char> dscores(int64_t(scoreElems * elt), st, scope.name());
  // dK and dV (head-major) sum over the blocks, in f32 from zero; the
  // grouped-query sums are inside each product.
  Temp<float> dkt(kvElems * a.d, st, scope.name());
  Temp<float> dvt(kvElems * a.dv, st, scope.name());
  check(
      cudaMemsetAsync(dkt.get(), 0, size_t(kvElems * a.d) * sizeof(float), st),
      scope.name());
  check(
      cudaMemsetAsync(dvt.get(), 0, size_t(kvElems * a.dv) * sizeof(float), st),
      scope.name());
  for (int64_t bi0 = 0; bi0 < a.b; bi0 += chunk) {
    int64_t pairs = (a.b - bi0 < chunk ? a.b - bi0 : chunk) * a.nkv;
    heads.forEachBlock(bi0, [&](const Block &blk) {
      int64_t m = blk.rows(), nk = blk.nk;
      const char *qb = in.q.get() + heads.at(bi0, blk.r0, group, a.d) * elt;
      const char *dob = dot.get() + heads.at(bi0, blk.r0, group, a.dv) * elt;
      const char *kb = in.k.get() + heads.at(bi0, blk.k0, 1, a.d) * elt;
      const char *vb = in.v.get() + heads.at(bi0, blk.k0, 1, a.dv) * elt;
      heads.scores(blk, pairs, in.q.get(), in.k.get(), scores.get());
      // dP = dOt[r0:r1]·Vt[k0:k1]ᵀ, [m·group, nk] f32.
      product.run(false, true, m, nk, a.dv, dob, type, a.dv, s * group * a.dv,
                  vb, type, a.dv, s * a.dv, 0.0f, dp.get(), CUDA_R_32F, nk,
                  m * nk, pairs);
      dispatchFloat(dtype, scope.name(), [&](auto e) {
        using E = decltype(e);
        softmaxGradRows<E><<<rowBlocks(pairs * m), kThreads, 0, st>>>(
            scores.get(), dp.get(), lse,
            reinterpret_cast<const typename E::T *>(out),
            reinterpret_cast<const typename E::T *>(dout), a.dv, heads.mask,
            blk, pairs * m,
            reinterpret_cast<typename E::T *>(probs.get()),
            reinterpret_cast<typename E::T *>(dscores.get()));
      });
      // dQt[r0:r1] = dS·Kt[k0:k1].
      product.run(false, false, m, a.d, nk, dscores.get(), type, nk, m * nk, kb,
                  type, a.d, s * a.d, 0.0f,
                  dqt.get() + heads.at(bi0, blk.r0, group, a.d) * elt, type,
                  a.d, s * group * a.d, pairs);
      // dKt[k0:k1] += dSᵀ·Qt[r0:r1], dVt[k0:k1] += Pᵀ·dOt[r0:r1], in f32.
      product.run(true, false, nk, a.d, m, dscores.get(), type, nk, m * nk, qb,
                  type, a.d, s * group * a.d, 1.0f,
                  dkt.get() + heads.at(bi0, blk.k0, 1, a.d), CUDA_R_32F, a.d,
                  s * a.d, pairs);
      product.run(true, false, nk, a.dv, m, probs.get(), type, nk, m * nk, dob,
                  type, a.dv, s * group * a.dv, 1.0f,
                  dvt.get() + heads.at(bi0, blk.k0, 1, a.dv), CUDA_R_32F, a.dv,
                  s * a.dv, pairs);
    });
  }
  // Back to [b, s, heads, dim], dK and dV rounded once.
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    swapMiddle<E, E>(st, dqt.get(), a.b, a.nkv, s, group * a.d, dq);
    swapMiddle<F32, E>(st, dkt.get(), a.b, a.nkv, s, a.d, dk);
    swapMiddle<F32, E>(st, dvt.get(), a.b, a.nkv, s, a.dv, dvalue);
  });
}

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
// gradient in between. Per query head h (KV head g = h / (nq / nkv)) and
// block of query rows (256 rows when a causal mask or a window hides keys,
// so that a block's products cover only the keys its queries can see; all
// rows at once otherwise), for a chunk of the batch at a time:
//
//   forward   S = Q_h·K_gᵀ (f32), P = exp(scale·S - lse) over the keys each
//             query sees (lse = log Σ exp(scale·S), written for the
//             backward), out_h = P·V_g with P in the input type;
//   backward  S again, dP = dO_h·V_gᵀ (f32), Δ = Σ_j P·dP (in double, as
//             the CPU backend), dS = scale·P·(dP - Δ) in the input type,
//             dQ_h = dS·K_g, dK_g += dSᵀ·Q_h, dV_g += Pᵀ·dO_h, the KV sums
//             kept in f32 (from zero, over the row blocks and the heads of
//             the group) and rounded once.
//
// The products see the tensors in place ([b, s, heads, dim] rows with a
// leading dimension of heads·dim), batched over the chunk's batch entries
// with cublasGemmStridedBatchedEx_64; f32 runs with
// CUBLAS_COMPUTE_32F_PEDANTIC (no TF32). The score matrices are temporaries
// of at most b·s² elements, chunked so that one stays under 256 MiB. Inside
// a row block the masked scores are computed and discarded (a causal step
// computes 9/16 of S at s = 2048 rather than 1/2), and the score matrices
// go through memory: a tiled flash-style kernel avoids both and stays to be
// done.
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

/// One block of query rows [r0, r0 + m) of one head and the keys any of
/// them sees, [k0, k0 + nk): its scores are [m, nk] per batch entry.
struct Block {
  int64_t r0, m, k0, nk;
  int64_t h, nq, bi0;
  /// The row's query position, its batch entry and its lse index.
  __device__ int64_t query(int64_t row) const { return r0 + row % m; }
  __device__ int64_t lseAt(int64_t row, int64_t s) const {
    return ((bi0 + row / m) * nq + h) * s + query(row);
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

/// Per row of a block: P rebuilt from the scores and lse, Δ = Σ_j P·dP in
/// double, then P and dS = scale·P·(dP - Δ) in the input type (zero where
/// masked).
template <typename E>
__global__ void softmaxGradRows(const float *scores, const float *dp,
                                const float *lse, Mask mask, Block blk,
                                int64_t rows, typename E::T *p,
                                typename E::T *ds) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t i = blk.query(row);
    int64_t lo = mask.lo(i) - blk.k0, hi = mask.hi(i) - blk.k0;
    float l = lse[blk.lseAt(row, mask.s)];
    const float *x = scores + row * blk.nk, *g = dp + row * blk.nk;
    double delta = 0;
    for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
      delta += double(expf(mask.scale * x[j] - l)) * double(g[j]);
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

/// Batch entries per chunk: one f32 score matrix set stays under 256 MiB.
int64_t chunkOf(int64_t b, int64_t s) {
  int64_t per = s * s * int64_t(sizeof(float));
  int64_t chunk = (int64_t(256) << 20) / (per > 0 ? per : 1);
  return chunk < 1 ? 1 : chunk < b ? chunk : b;
}

unsigned rowBlocks(int64_t rows) {
  return unsigned(rows < (1 << 20) ? rows : (1 << 20));
}

/// Query rows per block when a mask hides keys (causal or a window): each
/// block computes scores only for the keys its queries can see.
constexpr int64_t kRowBlock = 256;

/// What both directions share: the products on the call's stream, the
/// element type, the chunking, and each head's operands in place.
struct Heads {
  Heads(const KernelScope &scope, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
        const AttentionShape &a, const void *q, const void *k, const void *v)
      : product{blasOf(stream),
                dtype == FSDP_RT_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC
                                     : CUBLAS_COMPUTE_32F,
                scope.name()},
        type(blasType(dtype)), elt(fsdp_rt_dtype_size(dtype)), a(a),
        group(a.nq / a.nkv), chunk(chunkOf(a.b, a.s)),
        mask{a.s, a.causal, a.window, float(a.scale)},
        q(static_cast<const char *>(q)), k(static_cast<const char *>(k)),
        v(static_cast<const char *>(v)) {}

  /// Element offset of row r of head h of batch entry bi0 in a [b, s,
  /// heads, dim] tensor.
  int64_t at(int64_t bi0, int64_t r, int64_t h, int64_t heads,
             int64_t dim) const {
    return ((bi0 * a.s + r) * heads + h) * dim;
  }
  const char *qOf(int64_t bi0, int64_t r, int64_t h) const {
    return q + at(bi0, r, h, a.nq, a.d) * elt;
  }
  const char *kOf(int64_t bi0, int64_t r, int64_t h) const {
    return k + at(bi0, r, h / group, a.nkv, a.d) * elt;
  }
  const char *vOf(int64_t bi0, int64_t r, int64_t h) const {
    return v + at(bi0, r, h / group, a.nkv, a.dv) * elt;
  }

  /// The row blocks of head h for the n batch entries from bi0, in order.
  template <typename Fn>
  void forEachBlock(int64_t bi0, int64_t h, Fn fn) const {
    int64_t s = a.s, rows = a.causal || a.window > 0 ? kRowBlock : s;
    for (int64_t r0 = 0; r0 < s; r0 += rows) {
      int64_t r1 = r0 + rows < s ? r0 + rows : s;
      // Keys seen by some query of the block: lo and hi grow with i.
      int64_t k0 = mask.lo(r0), k1 = mask.hi(r1 - 1);
      fn(Block{r0, r1 - r0, k0, k1 - k0, h, a.nq, bi0});
    }
  }

  /// The block's scores, Q_h[r0:r1]·K_g[k0:k1]ᵀ in f32 ([m, nk] for each
  /// of the n entries).
  void scores(const Block &blk, int64_t n, float *out) const {
    int64_t s = a.s;
    product.run(false, true, blk.m, blk.nk, a.d, qOf(blk.bi0, blk.r0, blk.h),
                type, a.nq * a.d, s * a.nq * a.d, kOf(blk.bi0, blk.k0, blk.h),
                type, a.nkv * a.d, s * a.nkv * a.d, 0.0f, out, CUDA_R_32F,
                blk.nk, blk.m * blk.nk, n);
  }

  Product product;
  cudaDataType type;
  size_t elt;
  const AttentionShape &a;
  int64_t group, chunk;
  Mask mask;
  const char *q, *k, *v;
};
} // namespace

bool fsdp::rt::cuda::attentionThroughProducts() {
  static const bool products = [] {
    const char *choice = std::getenv("FSDP_RT_CUDA_ATTENTION");
    if (!choice || !*choice || !std::strcmp(choice, "products"))
      return true;
    if (!std::strcmp(choice, "exact"))
      return false;
    fail("FSDP_RT_CUDA_ATTENTION", "expected products or exact");
  }();
  return products;
}

void fsdp::rt::cuda::attentionProducts(const KernelScope &scope,
                                       fsdp_rt_stream stream,
                                       fsdp_rt_dtype dtype, const void *q,
                                       const void *k, const void *v,
                                       const AttentionShape &a, void *out,
                                       float *lse) {
  cudaStream_t st = scope.stream();
  Heads heads(scope, stream, dtype, a, q, k, v);
  int64_t s = a.s, chunk = heads.chunk;
  Temp<float> scores(chunk * s * s, st, scope.name());
  Temp<char> probs(int64_t(chunk * s * s * heads.elt), st, scope.name());
  char *oc = static_cast<char *>(out);
  for (int64_t bi0 = 0; bi0 < a.b; bi0 += chunk) {
    int64_t n = a.b - bi0 < chunk ? a.b - bi0 : chunk;
    for (int64_t h = 0; h < a.nq; ++h)
      heads.forEachBlock(bi0, h, [&](const Block &blk) {
        heads.scores(blk, n, scores.get());
        dispatchFloat(dtype, scope.name(), [&](auto e) {
          using E = decltype(e);
          softmaxRows<E><<<rowBlocks(n * blk.m), kThreads, 0, st>>>(
              scores.get(), heads.mask, blk, n * blk.m,
              reinterpret_cast<typename E::T *>(probs.get()), lse);
        });
        // out_h[r0:r1] = P·V_g[k0:k1], written in place.
        heads.product.run(false, false, blk.m, a.dv, blk.nk, probs.get(),
                          heads.type, blk.nk, blk.m * blk.nk,
                          heads.vOf(bi0, blk.k0, h), heads.type, a.nkv * a.dv,
                          s * a.nkv * a.dv, 0.0f,
                          oc + heads.at(bi0, blk.r0, h, a.nq, a.dv) * heads.elt,
                          heads.type, a.nq * a.dv, s * a.nq * a.dv, n);
      });
  }
}

void fsdp::rt::cuda::attentionGradProducts(
    const KernelScope &scope, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
    const void *q, const void *k, const void *v, const float *lse,
    const void *dout, const AttentionShape &a, void *dq, void *dk,
    void *dvalue) {
  cudaStream_t st = scope.stream();
  Heads heads(scope, stream, dtype, a, q, k, v);
  const Product &product = heads.product;
  cudaDataType type = heads.type;
  size_t elt = heads.elt;
  int64_t s = a.s, chunk = heads.chunk;
  Temp<float> scores(chunk * s * s, st, scope.name());
  Temp<float> dp(chunk * s * s, st, scope.name());
  Temp<char> probs(int64_t(chunk * s * s * elt), st, scope.name());
  Temp<char> dscores(int64_t(chunk * s * s * elt), st, scope.name());
  // dK and dV sum over row blocks and the group's query heads: in f32 from
  // zero, rounded once (f32 results accumulate in place).
  bool wide = dtype != FSDP_RT_F32;
  int64_t kvElems = a.b * s * a.nkv;
  Temp<float> dk32(wide ? kvElems * a.d : 1, st, scope.name());
  Temp<float> dv32(wide ? kvElems * a.dv : 1, st, scope.name());
  float *dkAcc = wide ? dk32.get() : static_cast<float *>(dk);
  float *dvAcc = wide ? dv32.get() : static_cast<float *>(dvalue);
  check(cudaMemsetAsync(dkAcc, 0, size_t(kvElems * a.d) * sizeof(float), st),
        scope.name());
  check(cudaMemsetAsync(dvAcc, 0, size_t(kvElems * a.dv) * sizeof(float), st),
        scope.name());
  const char *doc = static_cast<const char *>(dout);
  char *dqc = static_cast<char *>(dq);
  for (int64_t bi0 = 0; bi0 < a.b; bi0 += chunk) {
    int64_t n = a.b - bi0 < chunk ? a.b - bi0 : chunk;
    for (int64_t h = 0; h < a.nq; ++h)
      heads.forEachBlock(bi0, h, [&](const Block &blk) {
        int64_t g = h / heads.group;
        const char *doh = doc + heads.at(bi0, blk.r0, h, a.nq, a.dv) * elt;
        heads.scores(blk, n, scores.get());
        // dP = dO_h[r0:r1]·V_g[k0:k1]ᵀ, [m, nk] f32.
        product.run(false, true, blk.m, blk.nk, a.dv, doh, type, a.nq * a.dv,
                    s * a.nq * a.dv, heads.vOf(bi0, blk.k0, h), type,
                    a.nkv * a.dv, s * a.nkv * a.dv, 0.0f, dp.get(), CUDA_R_32F,
                    blk.nk, blk.m * blk.nk, n);
        dispatchFloat(dtype, scope.name(), [&](auto e) {
          using E = decltype(e);
          softmaxGradRows<E><<<rowBlocks(n * blk.m), kThreads, 0, st>>>(
              scores.get(), dp.get(), lse, heads.mask, blk, n * blk.m,
              reinterpret_cast<typename E::T *>(probs.get()),
              reinterpret_cast<typename E::T *>(dscores.get()));
        });
        // dQ_h[r0:r1] = dS·K_g[k0:k1], written in place.
        product.run(false, false, blk.m, a.d, blk.nk, dscores.get(), type,
                    blk.nk, blk.m * blk.nk, heads.kOf(bi0, blk.k0, h), type,
                    a.nkv * a.d, s * a.nkv * a.d, 0.0f,
                    dqc + heads.at(bi0, blk.r0, h, a.nq, a.d) * elt, type,
                    a.nq * a.d, s * a.nq * a.d, n);
        // dK_g[k0:k1] += dSᵀ·Q_h[r0:r1] and dV_g[k0:k1] += Pᵀ·dO_h[r0:r1],
        // in f32.
        product.run(true, false, blk.nk, a.d, blk.m, dscores.get(), type,
                    blk.nk, blk.m * blk.nk, heads.qOf(bi0, blk.r0, h), type,
                    a.nq * a.d, s * a.nq * a.d, 1.0f,
                    dkAcc + heads.at(bi0, blk.k0, g, a.nkv, a.d), CUDA_R_32F,
                    a.nkv * a.d, s * a.nkv * a.d, n);
        product.run(true, false, blk.nk, a.dv, blk.m, probs.get(), type,
                    blk.nk, blk.m * blk.nk, doh, type, a.nq * a.dv,
                    s * a.nq * a.dv, 1.0f,
                    dvAcc + heads.at(bi0, blk.k0, g, a.nkv, a.dv), CUDA_R_32F,
                    a.nkv * a.dv, s * a.nkv * a.dv, n);
      });
  }
  if (wide && kvElems > 0 && a.d > 0 && a.dv > 0)
    dispatchFloat(dtype, scope.name(), [&](auto e) {
      using E = decltype(e);
      launchCast<F32, E>(st, dk32.get(), kvElems * a.d, dk);
      launchCast<F32, E>(st, dv32.get(), kvElems * a.dv, dvalue);
    });
}

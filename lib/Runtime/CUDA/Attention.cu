//===- Attention.cu - Scaled dot-product attention with GQA, and grad -----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// With FSDP_RT_CUDA_ATTENTION=exact (the default runs attention through
// the flash kernels, FlashAttention.cu, or where they do not apply cuBLAS
// products, AttentionGemm.cu): a simple, exact kernel rather than a tiled
// one: one warp per (batch, head, row), four warps
// per block, all in f32 on CUDA cores.
// Lane l owns the feature dims l, l + 32, ... of the row's vectors (kept in
// the warp's slice of shared memory); a dot product is the lanes' partial
// sums reduced with a butterfly, which leaves the same bits in every lane,
// so the lanes walk the keys in lockstep.
//
// - Forward: the query's warp walks the keys it sees once with an online
//   softmax (running max m, running sum l, the output accumulator rescaled
//   when m grows), then writes out = acc / l and lse = m + log l.
// - Backward, without atomics and so deterministic: a query-side kernel
//   rebuilds P = exp(scale·q·k - lse) per visible key, computes
//   Δ = Σ_j P·dP = Σ_d dO·O (from the forward's output, as on the CPU), then
//   dQ = scale·Σ_j P·(dP - Δ)·k; a key-side kernel walks, for each key and
//   every query head of its group, the queries that see the key and sums
//   dV = Σ P·dO and dK = scale·Σ P·(dP - Δ)·q in f32.
//
// Query i sees keys [lo(i), hi(i)) with lo(i) = max(0, i - W + 1) when the
// sliding window W > 0 (else 0) and hi(i) = i + 1 when causal (else s), the
// CPU backend's rule; key j is therefore seen by queries
// [causal ? j : 0, W > 0 ? min(s, j + W) : s). Key i is always visible to
// query i, so no row is empty. Tensors are [b, s, heads, dim] row-major;
// query head h reads KV head h / (nq / nkv); lse is [b, nq, s].
//
//===----------------------------------------------------------------------===//

#include "AttentionCombine.cuh"
#include "AttentionGemm.cuh"

#include "../Common/Counters.h"

#include <algorithm>
#include <cmath>

using namespace fsdp::rt::cuda;

namespace {
/// Warps per block; each handles one row.
constexpr int kWarps = 4;

struct Geometry {
  int64_t b, s, nq, nkv, d, dv;
  int causal;
  int64_t window;
  float scale;

  __device__ int64_t group() const { return nq / nkv; }
  /// Keys query i sees: [firstKey, endKey) (AttentionGemm.cuh).
  __device__ int64_t firstKey(int64_t i) const {
    return fsdp::rt::cuda::firstKey(i, window);
  }
  __device__ int64_t endKey(int64_t i) const {
    return fsdp::rt::cuda::endKey(i, causal, s);
  }
  /// Queries that see key j: [firstQuery, endQuery).
  __device__ int64_t firstQuery(int64_t j) const { return causal ? j : 0; }
  __device__ int64_t endQuery(int64_t j) const {
    return window > 0 && j + window < s ? j + window : s;
  }
  /// Element offsets of row (batch, position, head) in q / k / v / out.
  __device__ int64_t qRow(int64_t bi, int64_t i, int64_t h) const {
    return ((bi * s + i) * nq + h) * d;
  }
  __device__ int64_t kRow(int64_t bi, int64_t j, int64_t g) const {
    return ((bi * s + j) * nkv + g) * d;
  }
  __device__ int64_t vRow(int64_t bi, int64_t j, int64_t g) const {
    return ((bi * s + j) * nkv + g) * dv;
  }
  __device__ int64_t oRow(int64_t bi, int64_t i, int64_t h) const {
    return ((bi * s + i) * nq + h) * dv;
  }
  /// Index of query i of head h in lse (and Δ), [b, nq, s].
  __device__ int64_t stat(int64_t bi, int64_t h, int64_t i) const {
    return (bi * nq + h) * s + i;
  }

  /// The query a warp of the query-side kernels handles: query i of head h
  /// (its key-value head kvh) of batch bi; `i >= s` past the end.
  struct WarpQuery {
    int warp;
    int64_t i, h, bi, kvh;
  };
  __device__ WarpQuery warpQuery() const {
    int warp = threadIdx.x / 32;
    int64_t h = blockIdx.y;
    return {warp, int64_t(blockIdx.x) * kWarps + warp, h, blockIdx.z,
            h / group()};
  }
};

/// Σ_dd a[dd] · b[dd] over a length-n vector split among the lanes (a in
/// the warp's shared memory, b in global memory); every lane gets the sum.
template <typename E>
__device__ float warpDot(const float *a, const typename E::T *b, int64_t n) {
  float part = 0;
  for (int64_t dd = threadIdx.x % 32; dd < n; dd += 32)
    part += a[dd] * E::load(b, dd);
  return warpReduce(part, SumOp{});
}

/// Loads a row into the lanes' dims of `dst`.
template <typename E>
__device__ void loadRow(const typename E::T *src, int64_t n, float *dst) {
  for (int64_t dd = threadIdx.x % 32; dd < n; dd += 32)
    dst[dd] = E::load(src, dd);
}

__device__ void zeroRow(int64_t n, float *dst) {
  for (int64_t dd = threadIdx.x % 32; dd < n; dd += 32)
    dst[dd] = 0.0f;
}

/// Forward: warp (blockIdx.x·kWarps + warp) is query i of head blockIdx.y,
/// batch blockIdx.z. Shared memory per warp: q [d], acc [dv].
template <typename E>
__global__ void attentionKernel(const typename E::T *q, const typename E::T *k,
                                const typename E::T *v, Geometry g,
                                typename E::T *out, float *lse) {
  extern __shared__ float shared[];
  auto [warp, i, h, bi, kvh] = g.warpQuery();
  // Warp-uniform exit: the kernel has no block-wide barrier.
  if (i >= g.s)
    return;
  float *qs = shared + warp * (g.d + g.dv), *acc = qs + g.d;
  loadRow<E>(q + g.qRow(bi, i, h), g.d, qs);
  zeroRow(g.dv, acc);
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = g.firstKey(i); j < g.endKey(i); ++j) {
    float score = g.scale * warpDot<E>(qs, k + g.kRow(bi, j, kvh), g.d);
    if (score > m) {
      // Rescale what was summed against the old maximum (0 at the start).
      float rescale = fastExp(m - score);
      l *= rescale;
      for (int64_t dd = threadIdx.x % 32; dd < g.dv; dd += 32)
        acc[dd] *= rescale;
      m = score;
    }
    float p = fastExp(score - m);
    l += p;
    const typename E::T *vr = v + g.vRow(bi, j, kvh);
    for (int64_t dd = threadIdx.x % 32; dd < g.dv; dd += 32)
      acc[dd] += p * E::load(vr, dd);
  }
  typename E::T *o = out + g.oRow(bi, i, h);
  for (int64_t dd = threadIdx.x % 32; dd < g.dv; dd += 32)
    E::store(o, dd, acc[dd] / l);
  if (threadIdx.x % 32 == 0)
    lse[g.stat(bi, h, i)] = m + logf(l);
}

/// Backward, query side: dq of query i of head blockIdx.y, and its Δ.
/// Shared memory per warp: q [d], dO [dv], dQ accumulator [d].
template <typename E>
__global__ void
attentionQueryGradKernel(const typename E::T *q, const typename E::T *k,
                         const typename E::T *v, const typename E::T *out,
                         const float *lse, const typename E::T *dout,
                         Geometry g, typename E::T *dq, float *delta) {
  extern __shared__ float shared[];
  auto [warp, i, h, bi, kvh] = g.warpQuery();
  if (i >= g.s)
    return;
  float *qs = shared + warp * (2 * g.d + g.dv), *dos = qs + g.d,
        *acc = dos + g.dv;
  loadRow<E>(q + g.qRow(bi, i, h), g.d, qs);
  loadRow<E>(dout + g.oRow(bi, i, h), g.dv, dos);
  zeroRow(g.d, acc);
  float shift = lse[g.stat(bi, h, i)];
  // Δ = Σ_j P·dP = Σ_d dO·O, from the forward's output (over every key it
  // saw: a ring step gets the merged attention's).
  float dlt = warpDot<E>(dos, out + g.oRow(bi, i, h), g.dv);
  // dQ = scale · Σ_j P·(dP - Δ)·k_j.
  for (int64_t j = g.firstKey(i); j < g.endKey(i); ++j) {
    const typename E::T *kr = k + g.kRow(bi, j, kvh);
    float p = fastExp(g.scale * warpDot<E>(qs, kr, g.d) - shift);
    float dp = warpDot<E>(dos, v + g.vRow(bi, j, kvh), g.dv);
    float ds = p * (dp - dlt);
    for (int64_t dd = threadIdx.x % 32; dd < g.d; dd += 32)
      acc[dd] += ds * E::load(kr, dd);
  }
  typename E::T *dqr = dq + g.qRow(bi, i, h);
  for (int64_t dd = threadIdx.x % 32; dd < g.d; dd += 32)
    E::store(dqr, dd, g.scale * acc[dd]);
  if (threadIdx.x % 32 == 0)
    delta[g.stat(bi, h, i)] = dlt;
}

/// Backward, key side: dk and dv of key j of KV head blockIdx.y, summed
/// over the query heads of its group and the queries that see it.
/// Shared memory per warp: k [d], v [dv], dK accumulator [d], dV [dv].
template <typename E>
__global__ void
attentionKeyGradKernel(const typename E::T *q, const typename E::T *k,
                       const typename E::T *v, const float *lse,
                       const typename E::T *dout, const float *delta,
                       Geometry g, typename E::T *dk, typename E::T *dv) {
  extern __shared__ float shared[];
  int warp = threadIdx.x / 32;
  int64_t j = int64_t(blockIdx.x) * kWarps + warp, kvh = blockIdx.y,
          bi = blockIdx.z;
  if (j >= g.s)
    return;
  float *ks = shared + warp * 2 * (g.d + g.dv), *vs = ks + g.d,
        *dkAcc = vs + g.dv, *dvAcc = dkAcc + g.d;
  loadRow<E>(k + g.kRow(bi, j, kvh), g.d, ks);
  loadRow<E>(v + g.vRow(bi, j, kvh), g.dv, vs);
  zeroRow(g.d, dkAcc);
  zeroRow(g.dv, dvAcc);
  for (int64_t h = kvh * g.group(); h < (kvh + 1) * g.group(); ++h) {
    for (int64_t i = g.firstQuery(j); i < g.endQuery(j); ++i) {
      const typename E::T *qr = q + g.qRow(bi, i, h),
                          *dor = dout + g.oRow(bi, i, h);
      float p =
          fastExp(g.scale * warpDot<E>(ks, qr, g.d) - lse[g.stat(bi, h, i)]);
      float dp = warpDot<E>(vs, dor, g.dv);
      float ds = p * (dp - delta[g.stat(bi, h, i)]);
      for (int64_t dd = threadIdx.x % 32; dd < g.dv; dd += 32)
        dvAcc[dd] += p * E::load(dor, dd);
      for (int64_t dd = threadIdx.x % 32; dd < g.d; dd += 32)
        dkAcc[dd] += ds * E::load(qr, dd);
    }
  }
  typename E::T *dkr = dk + g.kRow(bi, j, kvh), *dvr = dv + g.vRow(bi, j, kvh);
  for (int64_t dd = threadIdx.x % 32; dd < g.d; dd += 32)
    E::store(dkr, dd, g.scale * dkAcc[dd]);
  for (int64_t dd = threadIdx.x % 32; dd < g.dv; dd += 32)
    E::store(dvr, dd, dvAcc[dd]);
}

/// The grid of one warp per row: (rows / kWarps, heads, batch).
dim3 gridOf(int64_t s, int64_t heads, int64_t b, const char *name) {
  if (heads > 65535 || b > 65535)
    fail(name, "more than 65535 heads or batches");
  return dim3(unsigned((s + kWarps - 1) / kWarps), unsigned(heads),
              unsigned(b));
}

/// Shared memory of `floats` per warp; allows more than the default 48 KiB
/// per block when the head dims need it (cudaFuncSetAttribute fails, and
/// the call aborts, beyond what the GPU has).
template <typename Kernel>
size_t sharedBytes(Kernel kernel, int64_t floats, const char *name) {
  size_t bytes = size_t(kWarps * floats) * sizeof(float);
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
          name);
  return bytes;
}
} // namespace

/// Context parallelism's calls (keys of another length, positions, a
/// statistics gradient) run on the flash kernels only; the product and
/// exact kernels take one sequence by index.
static void requireFlash(const char *where) {
  fail(where, "context-parallel attention (positions) needs the flash "
              "kernels: bf16 or f16, equal head dims of 32, 64 or 128, "
              "16-byte aligned tensors, FSDP_RT_CUDA_ATTENTION unset or "
              "flash");
}

void fsdp_rt_attention_combine(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                               const void *out_a, const float *lse_a,
                               const void *out_b, const float *lse_b, int64_t b,
                               int64_t s, int64_t nq, int64_t dv, void *out,
                               float *lse) {
  int64_t rows = b * s * nq;
  launchFloat(FSDP_RT_KERNEL_ATTENTION, stream, "fsdp_rt_attention_combine",
              dtype, rows == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                combine::forwardKernel<Portable<E>>
                    <<<combine::blocksFor(rows), combine::kThreads, 0,
                       scope.stream()>>>(asPortable<E>(out_a), lse_a,
                                         asPortable<E>(out_b), lse_b, rows, s,
                                         nq, dv, asPortable<E>(out), lse);
              });
}

void fsdp_rt_attention_combine_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                    const void *out_a, const float *lse_a,
                                    const void *out_b, const float *lse_b,
                                    const void *out, const float *lse,
                                    const void *dout, const float *dlse,
                                    int64_t b, int64_t s, int64_t nq,
                                    int64_t dv, void *dout_a, float *dlse_a,
                                    void *dout_b, float *dlse_b) {
  int64_t rows = b * s * nq;
  launchFloat(FSDP_RT_KERNEL_ATTENTION, stream,
              "fsdp_rt_attention_combine_grad", dtype, rows == 0,
              [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                combine::backwardKernel<Portable<E>>
                    <<<combine::blocksFor(rows), combine::kThreads, 0,
                       scope.stream()>>>(
                        asPortable<E>(out_a), lse_a, asPortable<E>(out_b),
                        lse_b, asPortable<E>(out), lse, asPortable<E>(dout),
                        dlse, rows, s, nq, dv, asPortable<E>(dout_a), dlse_a,
                        asPortable<E>(dout_b), dlse_b);
              });
}

void fsdp_rt_attention(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *q, const void *k, const void *v, int64_t b,
                       int64_t s, int64_t skv, int64_t nq, int64_t nkv,
                       int64_t d, int64_t dv, const int64_t *positions,
                       const int64_t *key_positions,
                       const int64_t *document_positions, int causal,
                       int64_t sliding_window, double scale, void *out,
                       float *lse) {
  KernelScope scope(FSDP_RT_KERNEL_ATTENTION, stream, "fsdp_rt_attention");
  if (b == 0 || s == 0 || nq == 0)
    return;
  AttentionShape shape = {b, s, nq, nkv, d, dv, causal, sliding_window, scale};
  shape.skv = skv, shape.qpos = positions, shape.kpos = key_positions;
  shape.dpos = document_positions;
  // The pairs the mask shows (AttentionGemm.cuh's rule), for the report;
  // positions live on the device, so only calls by index are counted.
  if (shape.byIndex()) {
    int64_t pairs = 0;
    for (int64_t i = 0; i < s; ++i)
      pairs += (causal ? i + 1 : s) - firstKey(i, sliding_window);
    fsdp::rt::counters::addAttentionPairs(pairs * b * nq);
  }
  AttentionPath path = attentionPath();
  if (path == AttentionPath::Flash &&
      flashAttention(scope, dtype, q, k, v, shape, out, lse))
    return;
  if (!shape.byIndex())
    requireFlash(scope.name());
  if (path != AttentionPath::Exact) {
    attentionProducts(scope, stream, dtype, q, k, v, shape, out, lse);
    return;
  }
  Geometry g = {b, s, nq, nkv, d, dv, causal, sliding_window, float(scale)};
  dim3 grid = gridOf(s, nq, b, scope.name());
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    auto kernel = attentionKernel<E>;
    size_t bytes = sharedBytes(kernel, d + dv, scope.name());
    kernel<<<grid, kWarps * 32, bytes, scope.stream()>>>(
        asIn<E>(q), asIn<E>(k), asIn<E>(v), g, asOut<E>(out), lse);
  });
}

void fsdp_rt_attention_grad(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *q, const void *k,
    const void *v, const void *out, const float *lse, const void *dout,
    const float *dlse, int64_t b, int64_t s, int64_t skv, int64_t nq,
    int64_t nkv, int64_t d, int64_t dv, const int64_t *positions,
    const int64_t *key_positions, const int64_t *document_positions, int causal,
    int64_t sliding_window, double scale, void *dq, void *dk, void *dvalue) {
  KernelScope scope(FSDP_RT_KERNEL_ATTENTION, stream, "fsdp_rt_attention_grad");
  if (b == 0 || s == 0 || nq == 0)
    return;
  AttentionShape shape = {b, s, nq, nkv, d, dv, causal, sliding_window, scale};
  shape.skv = skv, shape.qpos = positions, shape.kpos = key_positions;
  shape.dpos = document_positions;
  AttentionPath path = attentionPath();
  if (path == AttentionPath::Flash &&
      flashAttentionGrad(scope, dtype, q, k, v, out, lse, dout, dlse, shape, dq,
                         dk, dvalue))
    return;
  if (!shape.byIndex() || dlse)
    requireFlash(scope.name());
  if (path != AttentionPath::Exact) {
    attentionGradProducts(scope, stream, dtype, q, k, v, out, lse, dout, shape,
                          dq, dk, dvalue);
    return;
  }
  Geometry g = {b, s, nq, nkv, d, dv, causal, sliding_window, float(scale)};
  cudaStream_t st = scope.stream();
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    Temp<float> delta(b * nq * s, st, scope.name());
    auto queryKernel = attentionQueryGradKernel<E>;
    size_t queryBytes = sharedBytes(queryKernel, 2 * d + dv, scope.name());
    queryKernel<<<gridOf(s, nq, b, scope.name()), kWarps * 32, queryBytes,
                  st>>>(asIn<E>(q), asIn<E>(k), asIn<E>(v), asIn<E>(out), lse,
                        asIn<E>(dout), g, asOut<E>(dq), delta.get());
    auto keyKernel = attentionKeyGradKernel<E>;
    size_t keyBytes = sharedBytes(keyKernel, 2 * (d + dv), scope.name());
    keyKernel<<<gridOf(s, nkv, b, scope.name()), kWarps * 32, keyBytes, st>>>(
        asIn<E>(q), asIn<E>(k), asIn<E>(v), lse, asIn<E>(dout), delta.get(), g,
        asOut<E>(dk), asOut<E>(dvalue));
  });
}

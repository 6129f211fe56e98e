//===- FlashAttention.cuh - Fused attention on tensor cores -----*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Flash attention (forward and backward) for bf16/f16 with head dim 32, 64
// or 128, the default path of fsdp_rt_attention(_grad) for those shapes: the
// scores never reach global memory. Products run on the tensor cores with
// mma.sync.m16n8k16 (f32 accumulation); blocks are 4 warps.
//
// - Forward: a block owns 64 queries of one head, each warp 16 of them, and
//   walks the 64-key tiles its rows see with an online softmax. K and V are
//   staged in shared memory row-major (rows padded so that a fragment's
//   loads hit 32 different banks). The score accumulators are re-packed in registers as the A
//   fragment of P·V (the C layout of two 16×8 tiles is the A layout of one
//   16×16). Out is acc / l, lse = ln 2 · (m + log2 l) with m in log2 units.
// - Δ = rowsum(dO ∘ O) from the forward's output, a warp per row.
// - Backward: a block owns 64 keys of one KV head, each warp 16 of them,
//   and walks every query head of the group and the 64-query tiles that see
//   its keys. It computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, Pᵀ = exp(scale·Sᵀ -
//   lse), dSᵀ = scale·Pᵀ∘(dPᵀ - Δ), accumulates dV += Pᵀ·dO and dK += dSᵀ·Q
//   in registers, stages dSᵀ in shared memory and adds its share of
//   dQ += dS·K to an f32 buffer with atomics; a last kernel casts dQ. At
//   head dim 128 a warp takes each query tile in two halves of 32, so that
//   the scores fit in the registers beside dK and dV.
//
// The mask is the runtime's rule (AttentionGemm.cuh): query i sees keys
// [i - W + 1, i + 1) when causal with window W, and so on; with positions
// (context parallelism) query i sees key j when kp(j) <= qp(i) and
// qp(i) - kp(j) < W, the tiles a block walks are all of them, and a tile
// its queries' and keys' first and last positions hide is skipped. Tensors
// are [b, s, heads, dim] (keys [b, skv, heads, dim]) row-major, lse and Δ
// [b, nq, s]; a query that sees no key gets a zero row and lse -inf.
//
// The kernels are written against Portable.cuh's primitives, so that the
// same source also runs on the CPU emulator of CUDA threads in CI. The host
// orchestration (`forward`, `backward`) is a template over the launcher for
// the same reason.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_FLASHATTENTION_CUH
#define FSDP_LIB_RUNTIME_CUDA_FLASHATTENTION_CUH

#include "Portable.cuh"

#include <initializer_list>

namespace fsdp::rt::cuda::flash {

/// Warps per block, rows per warp, and the query/key tile of a block.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 64;
/// Elements of padding after each shared-memory row, so that the 8 rows a
/// fragment load touches fall in different banks.
constexpr int kPad = 8;

using namespace portable;

/// The shape and mask of a call. `scaleLog2` is scale · log2(e): scores are
/// kept in log2 units so that exp is exp2. `s` queries and `skv` keys;
/// with positions (context parallelism: `qpos` [b, s], `kpos` [b, skv] or
/// null, each ascending along a row) query i of batch bi sits at
/// qp(bi, i) and key j at kp(bi, j), else at i and j. Packed rows (`dpos`
/// [b, s], the queries' positions in their documents, or null): query i
/// sees no key before its document's first token, start(bi, i) =
/// qp(bi, i) - dpos, which never falls along a row.
struct Params {
  int64_t b, s, skv, nq, nkv;
  const int64_t *qpos, *kpos, *dpos;
  int causal;
  int64_t window;
  float scale, scaleLog2;

  PORTABLE_DEVICE int64_t group() const { return nq / nkv; }
  PORTABLE_DEVICE int64_t qp(int64_t bi, int64_t i) const {
    return qpos ? qpos[bi * s + i] : i;
  }
  PORTABLE_DEVICE int64_t kp(int64_t bi, int64_t j) const {
    return kpos ? kpos[bi * skv + j] : j;
  }
  /// The first key position query i of a packed row sees.
  PORTABLE_DEVICE int64_t start(int64_t bi, int64_t i) const {
    return qp(bi, i) - dpos[bi * s + i];
  }
  /// Whether the mask is by position (context parallelism or packed rows):
  /// the tiles walk every key, and `hidden` skips those no query sees.
  PORTABLE_DEVICE bool byPosition() const { return qpos || dpos; }
  /// The key tiles a block of queries walks, [firstKey(first query),
  /// endKey(last query)): the mask's range by index, or all keys by
  /// position.
  PORTABLE_DEVICE int64_t firstKey(int64_t i) const {
    return !byPosition() && window > 0 && i - window + 1 > 0 ? i - window + 1
                                                             : 0;
  }
  PORTABLE_DEVICE int64_t endKey(int64_t i) const {
    return !byPosition() && causal ? i + 1 : skv;
  }
  /// Likewise the query tiles a block of keys walks.
  PORTABLE_DEVICE int64_t firstQuery(int64_t j) const {
    return !byPosition() && causal ? j : 0;
  }
  PORTABLE_DEVICE int64_t endQuery(int64_t j) const {
    return !byPosition() && window > 0 && j + window < s ? j + window : s;
  }
  PORTABLE_DEVICE bool visible(int64_t bi, int64_t i, int64_t j) const {
    if (i >= s || j >= skv)
      return false;
    int64_t pi = qp(bi, i), pj = kp(bi, j);
    return (!causal || pj <= pi) && (window <= 0 || pi - pj < window) &&
           (!dpos || pj >= start(bi, i));
  }
  /// Whether no query of [i0, i1] sees a key of [j0, j1] (both in range).
  PORTABLE_DEVICE bool hidden(int64_t bi, int64_t i0, int64_t i1, int64_t j0,
                              int64_t j1) const {
    return (causal && kp(bi, j0) > qp(bi, i1)) ||
           (window > 0 && qp(bi, i0) - kp(bi, j1) >= window) ||
           (dpos && kp(bi, j1) < start(bi, i0));
  }
  /// Whether every query of [i0, i1] sees every key of [j0, j1].
  PORTABLE_DEVICE bool full(int64_t bi, int64_t i0, int64_t i1, int64_t j0,
                            int64_t j1) const {
    return (!causal || kp(bi, j1) <= qp(bi, i0)) &&
           (window <= 0 || qp(bi, i1) - kp(bi, j0) < window) &&
           (!dpos || kp(bi, j0) >= start(bi, i1));
  }
  /// Element offset of row (batch, position, head) of a [b, len, heads, D]
  /// tensor.
  PORTABLE_DEVICE int64_t row(int64_t bi, int64_t i, int64_t len,
                              int64_t heads, int64_t h, int d) const {
    return ((bi * len + i) * heads + h) * d;
  }
  /// Index of query i of head h in lse and Δ.
  PORTABLE_DEVICE int64_t stat(int64_t bi, int64_t h, int64_t i) const {
    return (bi * nq + h) * s + i;
  }
};

/// Sum or max over the 4 lanes of a quad (the lanes that share a row).
PORTABLE_DEVICE float quadSum(float v) {
  v += shflXor(v, 1);
  return v + shflXor(v, 2);
}
PORTABLE_DEVICE float quadMax(float v) {
  v = fmaxf(v, shflXor(v, 1));
  return fmaxf(v, shflXor(v, 2));
}

/// Copies rows [first, first + kTile) of a [b, len, heads, D] tensor
/// (batch bi, head h) into a shared tile of stride D + kPad, 16 bytes at a
/// time; rows at or past len are zero.
template <int D, typename T>
PORTABLE_DEVICE void loadTile(const T *src, const Params &p, int64_t len,
                              int64_t bi, int64_t heads, int64_t h,
                              int64_t first, T *dst) {
  constexpr int chunks = D / 8;
  for (int idx = threadIdx.x; idx < kTile * chunks; idx += kThreads) {
    int r = idx / chunks, c = idx % chunks;
    int64_t i = first + r;
    if (i < len)
      copy16(dst + r * (D + kPad) + c * 8,
             src + p.row(bi, i, len, heads, h, D) + c * 8);
    else
      zero16(dst + r * (D + kPad) + c * 8);
  }
}

/// The A fragment of rows [r0, r0 + 16), columns [k0, k0 + 16) of a
/// row-major shared tile of stride `ld`.
template <typename T>
PORTABLE_DEVICE void fragA(const T *tile, int ld, int r0, int k0,
                        uint32_t (&a)[4]) {
  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T *p = tile + (r0 + g) * ld + k0 + 2 * t;
  a[0] = load2(p);
  a[1] = load2(p + 8 * ld);
  a[2] = load2(p + 8);
  a[3] = load2(p + 8 * ld + 8);
}
/// The B fragment (k × n = 16 × 8) whose column n is row n0 + n of a
/// row-major shared tile, k the tile's columns [k0, k0 + 16): Bᵀ stored
/// row-major, as K is for Q·Kᵀ.
template <typename T>
PORTABLE_DEVICE void fragBRows(const T *tile, int ld, int n0, int k0,
                            uint32_t (&b)[2]) {
  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T *p = tile + (n0 + g) * ld + k0 + 2 * t;
  b[0] = load2(p);
  b[1] = load2(p + 8);
}
/// The B fragment whose row k is row k0 + k of a row-major tile, columns
/// [n0, n0 + 8): B stored row-major, as dO is for Pᵀ·dO.
template <typename T>
PORTABLE_DEVICE void fragBCols(const T *tile, int ld, int k0, int n0,
                            uint32_t (&b)[2]) {
  int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T *p = tile + (k0 + 2 * t) * ld + n0 + g;
  b[0] = gather2(p, p + ld);
  b[1] = gather2(p + 8 * ld, p + 9 * ld);
}
/// Accumulator tiles j and j + 1 (16 × 8 each) as the A fragment of one
/// 16 × 16 block.
template <typename E>
PORTABLE_DEVICE void accToA(const float (&lo)[4], const float (&hi)[4],
                         uint32_t (&a)[4]) {
  a[0] = pack<E>(lo[0], lo[1]);
  a[1] = pack<E>(lo[2], lo[3]);
  a[2] = pack<E>(hi[0], hi[1]);
  a[3] = pack<E>(hi[2], hi[3]);
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

template <typename E> struct ForwardArgs {
  using T = typename E::T;
  const T *q, *k, *v;
  Params p;
  T *out;
  float *lse;
};

/// Shared bytes of the forward kernel: the K and V tiles [kTile][D + kPad].
template <int D, typename T> constexpr size_t forwardShared() {
  return 2 * size_t(kTile) * (D + kPad) * sizeof(T);
}

/// Grid (tiles, nq, b): the block of blockIdx.x takes the query tiles
/// from the last, which see the most keys under a causal mask, so that the
/// longest blocks start first.
template <typename E, int D>
PORTABLE_KERNEL(kThreads) void forwardKernel(ForwardArgs<E> a) {
  using T = typename E::T;
  PORTABLE_SHARED(shared);
  T *ks = reinterpret_cast<T *>(shared);
  T *vs = ks + kTile * (D + kPad);
  const Params &p = a.p;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4,
      t = lane % 4;
  int64_t tiles = (p.s + kTile - 1) / kTile;
  int64_t q0 = (tiles - 1 - int64_t(blockIdx.x)) * kTile;
  int64_t h = blockIdx.y, bi = blockIdx.z, kvh = h / p.group();
  int64_t w0 = q0 + 16 * warp;
  int64_t rows[2] = {w0 + g, w0 + g + 8};
  int64_t wLast = w0 + 15 < p.s - 1 ? w0 + 15 : p.s - 1;
  bool warpActive = w0 < p.s;

  // The warp's 16 query rows as A fragments, straight from global memory.
  uint32_t qa[D / 16][4];
  PORTABLE_UNROLL
  for (int kk = 0; kk < D / 16; ++kk)
    PORTABLE_UNROLL
    for (int x = 0; x < 4; ++x) {
      int64_t r = rows[x % 2];
      int col = kk * 16 + 2 * t + (x / 2) * 8;
      qa[kk][x] =
          r < p.s ? load2(a.q + p.row(bi, r, p.s, p.nq, h, D) + col) : 0u;
    }

  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int64_t qLast = q0 + kTile - 1 < p.s - 1 ? q0 + kTile - 1 : p.s - 1;
  int64_t kBegin = p.firstKey(q0), kEnd = p.endKey(qLast);
  for (int64_t j0 = kBegin; j0 < kEnd; j0 += kTile) {
    int64_t jLast = j0 + kTile - 1 < p.skv - 1 ? j0 + kTile - 1 : p.skv - 1;
    // A tile no query of the block sees (the same test on every thread).
    if (p.byPosition() && p.hidden(bi, q0, qLast, j0, jLast))
      continue;
    barrier();
    loadTile<D>(a.k, p, p.skv, bi, p.nkv, kvh, j0, ks);
    loadTile<D>(a.v, p, p.skv, bi, p.nkv, kvh, j0, vs);
    barrier();
    if (!warpActive || p.hidden(bi, w0, wLast, j0, jLast))
      continue;
    bool full =
        j0 + kTile <= p.skv && p.full(bi, w0, wLast, j0, j0 + kTile - 1);

    float sc[kTile / 8][4] = {};
    PORTABLE_UNROLL
    for (int nt = 0; nt < kTile / 8; ++nt)
      PORTABLE_UNROLL
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t b[2];
        fragBRows(ks, D + kPad, nt * 8, kk * 16, b);
        mma<E>(sc[nt], qa[kk], b);
      }
    float mx[2] = {-INFINITY, -INFINITY};
    PORTABLE_UNROLL
    for (int nt = 0; nt < kTile / 8; ++nt)
      PORTABLE_UNROLL
      for (int x = 0; x < 4; ++x) {
        float v = sc[nt][x] * p.scaleLog2;
        if (!full && !p.visible(bi, rows[x / 2], j0 + nt * 8 + 2 * t + x % 2))
          v = -INFINITY;
        sc[nt][x] = v;
        mx[x / 2] = fmaxf(mx[x / 2], v);
      }
    float ref[2];
    PORTABLE_UNROLL
    for (int r = 0; r < 2; ++r) {
      float mNew = fmaxf(m[r], quadMax(mx[r]));
      // A row that has seen no key yet keeps a finite reference.
      ref[r] = mNew == -INFINITY ? 0.0f : mNew;
      float alpha = exp2f(m[r] - ref[r]);
      l[r] *= alpha;
      PORTABLE_UNROLL
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
      m[r] = mNew;
    }
    PORTABLE_UNROLL
    for (int nt = 0; nt < kTile / 8; ++nt)
      PORTABLE_UNROLL
      for (int x = 0; x < 4; ++x) {
        float e = exp2f(sc[nt][x] - ref[x / 2]);
        sc[nt][x] = e;
        l[x / 2] += e;
      }
    PORTABLE_UNROLL
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t pa[4];
      accToA<E>(sc[2 * kk], sc[2 * kk + 1], pa);
      PORTABLE_UNROLL
      for (int dt = 0; dt < D / 8; ++dt) {
        uint32_t b[2];
        fragBCols(vs, D + kPad, kk * 16, dt * 8, b);
        mma<E>(o[dt], pa, b);
      }
    }
  }

  PORTABLE_UNROLL
  for (int r = 0; r < 2; ++r) {
    float total = quadSum(l[r]);
    int64_t i = rows[r];
    float inv = total > 0.0f ? 1.0f / total : 0.0f;
    if (i < p.s) {
      T *orow = a.out + p.row(bi, i, p.s, p.nq, h, D);
      PORTABLE_UNROLL
      for (int dt = 0; dt < D / 8; ++dt)
        store2(orow + dt * 8 + 2 * t,
               pack<E>(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv));
      if (t == 0)
        a.lse[p.stat(bi, h, i)] = 0.69314718f * (m[r] + log2f(total));
    }
  }
}

/// Δ[b, h, i] = Σ_d dO[b, i, h, d] · O[b, i, h, d] (less dlse[b, h, i] when
/// given) in f32: a warp per row of [b, s, nq], grid-stride.
template <typename E, int D>
PORTABLE_KERNEL(kThreads)
void deltaKernel(const typename E::T *out, const typename E::T *dout,
                 const float *dlse, Params p, float *delta) {
  int lane = threadIdx.x % 32;
  int64_t rows = p.b * p.s * p.nq;
  for (int64_t r = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; r < rows;
       r += int64_t(gridDim.x) * kWarps) {
    float sum = 0.0f;
    for (int c = lane; c < D; c += 32)
      sum += toFloat<E>(out[r * D + c]) * toFloat<E>(dout[r * D + c]);
    sum = warpSum(sum);
    // A gradient of the statistics (ring attention's combine) enters as
    // dS = P·(dP - (Δ - dLSE)).
    int64_t at = p.stat(r / (p.nq * p.s), r % p.nq, (r / p.nq) % p.s);
    if (lane == 0)
      delta[at] = dlse ? sum - dlse[at] : sum;
  }
}

template <typename E> struct BackwardArgs {
  using T = typename E::T;
  const T *q, *k, *v, *dout;
  const float *lse, *delta;
  Params p;
  float *dqAcc;
  T *dk, *dv;
};

/// Shared bytes of the backward kernel: K, V, Q, dO tiles [kTile][D +
/// kPad], dSᵀ [kTile][kTile + kPad], and the tile's lse and Δ.
template <int D, typename T> constexpr size_t backwardShared() {
  return (4 * size_t(kTile) * (D + kPad) + size_t(kTile) * (kTile + kPad)) *
             sizeof(T) +
         2 * kTile * sizeof(float);
}

/// Grid (key tiles, nkv, b).
template <typename E, int D>
PORTABLE_KERNEL(kThreads) void backwardKernel(BackwardArgs<E> a) {
  using T = typename E::T;
  constexpr int ld = D + kPad, lds = kTile + kPad;
  constexpr int kSplit = D > 64 ? 2 : 1, kPart = kTile / kSplit;
  PORTABLE_SHARED(shared);
  T *ks = reinterpret_cast<T *>(shared);
  T *vs = ks + kTile * ld, *qs = vs + kTile * ld, *dos = qs + kTile * ld,
    *dss = dos + kTile * ld;
  float *lses = reinterpret_cast<float *>(dss + kTile * lds),
        *dls = lses + kTile;
  const Params &p = a.p;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4,
      t = lane % 4;
  int64_t j0 = int64_t(blockIdx.x) * kTile, kvh = blockIdx.y, bi = blockIdx.z;
  int64_t w0 = j0 + 16 * warp;
  int64_t keys[2] = {w0 + g, w0 + g + 8};
  int64_t wLast = w0 + 15 < p.skv - 1 ? w0 + 15 : p.skv - 1;
  bool warpActive = w0 < p.skv;
  int64_t jLast = j0 + kTile - 1 < p.skv - 1 ? j0 + kTile - 1 : p.skv - 1;

  loadTile<D>(a.k, p, p.skv, bi, p.nkv, kvh, j0, ks);
  loadTile<D>(a.v, p, p.skv, bi, p.nkv, kvh, j0, vs);

  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  int64_t iBegin = p.firstQuery(j0) / kTile * kTile, iEnd = p.endQuery(jLast);
  for (int64_t h = kvh * p.group(); h < (kvh + 1) * p.group(); ++h) {
    for (int64_t i0 = iBegin; i0 < iEnd; i0 += kTile) {
      int64_t iLast = i0 + kTile - 1 < p.s - 1 ? i0 + kTile - 1 : p.s - 1;
      // A query tile that sees none of the block's keys (uniform).
      if (p.byPosition() && p.hidden(bi, i0, iLast, j0, jLast))
        continue;
      barrier();
      loadTile<D>(a.q, p, p.s, bi, p.nq, h, i0, qs);
      loadTile<D>(a.dout, p, p.s, bi, p.nq, h, i0, dos);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        bool in = i0 + r < p.s;
        lses[r] = in ? a.lse[p.stat(bi, h, i0 + r)] * 1.44269504f : 0.0f;
        dls[r] = in ? a.delta[p.stat(bi, h, i0 + r)] : 0.0f;
      }
      barrier();

      bool active = warpActive && !p.hidden(bi, i0, iLast, w0, wLast);
      if (active) {
        bool full =
            i0 + kTile <= p.s && p.full(bi, i0, i0 + kTile - 1, w0, wLast);
        // The query tile in kSplit parts of kPart queries, one after the
        // other, so that a part's scores and the dK/dV accumulators fit in
        // the registers together (at D = 128 they spilled).
        PORTABLE_NO_UNROLL
        for (int part = 0; part < kSplit; ++part) {
          int c0 = part * kPart;
          // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ for the warp's 16 keys.
          float sc[kPart / 8][4] = {}, dp[kPart / 8][4] = {};
          PORTABLE_UNROLL
          for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t ka[4], va[4];
            fragA(ks, ld, 16 * warp, kk * 16, ka);
            fragA(vs, ld, 16 * warp, kk * 16, va);
            PORTABLE_UNROLL
            for (int nt = 0; nt < kPart / 8; ++nt) {
              uint32_t b[2];
              fragBRows(qs, ld, c0 + nt * 8, kk * 16, b);
              mma<E>(sc[nt], ka, b);
              fragBRows(dos, ld, c0 + nt * 8, kk * 16, b);
              mma<E>(dp[nt], va, b);
            }
          }
          // Pᵀ into sc, dSᵀ into dp.
          PORTABLE_UNROLL
          for (int nt = 0; nt < kPart / 8; ++nt)
            PORTABLE_UNROLL
            for (int x = 0; x < 4; ++x) {
              int col = c0 + nt * 8 + 2 * t + x % 2;
              float pr = 0.0f;
              if (full || p.visible(bi, i0 + col, keys[x / 2]))
                pr = exp2f(sc[nt][x] * p.scaleLog2 - lses[col]);
              sc[nt][x] = pr;
              dp[nt][x] = p.scale * pr * (dp[nt][x] - dls[col]);
            }
          // dV += Pᵀ·dO, dK += dSᵀ·Q.
          PORTABLE_UNROLL
          for (int kk = 0; kk < kPart / 16; ++kk) {
            uint32_t pa[4], sa[4];
            accToA<E>(sc[2 * kk], sc[2 * kk + 1], pa);
            accToA<E>(dp[2 * kk], dp[2 * kk + 1], sa);
            PORTABLE_UNROLL
            for (int dt = 0; dt < D / 8; ++dt) {
              uint32_t b[2];
              fragBCols(dos, ld, c0 + kk * 16, dt * 8, b);
              mma<E>(dv[dt], pa, b);
              fragBCols(qs, ld, c0 + kk * 16, dt * 8, b);
              mma<E>(dk[dt], sa, b);
            }
          }
          PORTABLE_UNROLL
          for (int nt = 0; nt < kPart / 8; ++nt)
            PORTABLE_UNROLL
            for (int r = 0; r < 2; ++r)
              store2(dss + (16 * warp + g + 8 * r) * lds + c0 + nt * 8 + 2 * t,
                     pack<E>(dp[nt][2 * r], dp[nt][2 * r + 1]));
        }
      } else {
        PORTABLE_UNROLL
        for (int nt = 0; nt < kTile / 8; ++nt)
          PORTABLE_UNROLL
          for (int r = 0; r < 2; ++r)
            store2(dss + (16 * warp + g + 8 * r) * lds + nt * 8 + 2 * t, 0u);
      }
      barrier();

      // dQ[i0 + q] += dS·K over the block's keys: 16 × 8 output tiles dealt
      // round-robin to the warps. A[q][key] = dSᵀ[key][q].
      for (int u = warp; u < (kTile / 16) * (D / 8); u += kWarps) {
        int qt = u / (D / 8), dt = u % (D / 8);
        float acc[4] = {};
        PORTABLE_UNROLL
        for (int kc = 0; kc < kTile / 16; ++kc) {
          const T *s0 = dss + (kc * 16 + 2 * t) * lds + qt * 16 + g;
          uint32_t sa[4] = {gather2(s0, s0 + lds), gather2(s0 + 8, s0 + lds + 8),
                            gather2(s0 + 8 * lds, s0 + 9 * lds),
                            gather2(s0 + 8 * lds + 8, s0 + 9 * lds + 8)};
          uint32_t b[2];
          fragBCols(ks, ld, kc * 16, dt * 8, b);
          mma<E>(acc, sa, b);
        }
        PORTABLE_UNROLL
        for (int r = 0; r < 2; ++r) {
          int64_t i = i0 + qt * 16 + g + 8 * r;
          if (i < p.s) {
            float *dst =
                a.dqAcc + p.row(bi, i, p.s, p.nq, h, D) + dt * 8 + 2 * t;
            atomicAddF(dst, acc[2 * r]);
            atomicAddF(dst + 1, acc[2 * r + 1]);
          }
        }
      }
    }
  }

  PORTABLE_UNROLL
  for (int r = 0; r < 2; ++r) {
    int64_t j = keys[r];
    if (j >= p.skv)
      continue;
    T *dkr = a.dk + p.row(bi, j, p.skv, p.nkv, kvh, D),
      *dvr = a.dv + p.row(bi, j, p.skv, p.nkv, kvh, D);
    PORTABLE_UNROLL
    for (int dt = 0; dt < D / 8; ++dt) {
      store2(dkr + dt * 8 + 2 * t, pack<E>(dk[dt][2 * r], dk[dt][2 * r + 1]));
      store2(dvr + dt * 8 + 2 * t, pack<E>(dv[dt][2 * r], dv[dt][2 * r + 1]));
    }
  }
}

/// dq = dqAcc rounded to the element type; grid-stride over pairs.
template <typename E>
PORTABLE_KERNEL(kThreads) void castKernel(const float *src, int64_t pairs,
                             typename E::T *dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x)
    store2(dst + 2 * i, pack<E>(src[2 * i], src[2 * i + 1]));
}

//===----------------------------------------------------------------------===//
// Orchestration, over a launcher L with
//   L.launch(kernel, gx, gy, gz, threads, sharedBytes, args...),
//   L.temp(n) -> float* (n floats, live until L is destroyed),
//   L.zero(ptr, n) (n floats).
//===----------------------------------------------------------------------===//

/// Whether the flash kernels take this call: bf16/f16 (the caller checks),
/// equal head dims of 32, 64 or 128, and 16-byte aligned tensors.
inline bool supports(int64_t d, int64_t dv,
                     std::initializer_list<const void *> ptrs) {
  if (d != dv || (d != 32 && d != 64 && d != 128))
    return false;
  for (const void *p : ptrs)
    if (!aligned16(p))
      return false;
  return true;
}

inline Params makeParams(int64_t b, int64_t s, int64_t skv, int64_t nq,
                         int64_t nkv, const int64_t *qpos, const int64_t *kpos,
                         const int64_t *dpos, int causal, int64_t window,
                         double scale) {
  Params p = {};
  p.b = b, p.s = s, p.skv = skv, p.nq = nq, p.nkv = nkv;
  p.qpos = qpos, p.kpos = kpos, p.dpos = dpos;
  p.causal = causal, p.window = window;
  p.scale = float(scale), p.scaleLog2 = float(scale * 1.4426950408889634);
  return p;
}

template <typename E, int D, typename L>
void forward(L &launcher, ForwardArgs<E> args) {
  const Params &p = args.p;
  launcher.launch(forwardKernel<E, D>,
                  unsigned((p.s + kTile - 1) / kTile), unsigned(p.nq),
                  unsigned(p.b), kThreads, forwardShared<D, typename E::T>(),
                  args);
}

/// `out` is the forward's result, for Δ; `dlse` the statistics' gradient,
/// or null.
template <typename E, int D, typename L>
void backward(L &launcher, BackwardArgs<E> args, const typename E::T *out,
              const float *dlse, typename E::T *dq) {
  const Params &p = args.p;
  unsigned tiles = unsigned((p.skv + kTile - 1) / kTile);
  int64_t rows = p.b * p.s * p.nq, rowBlocks = (rows + kWarps - 1) / kWarps;
  float *delta = launcher.temp(rows);
  launcher.launch(deltaKernel<E, D>,
                  unsigned(rowBlocks < (1 << 20) ? rowBlocks : (1 << 20)), 1u,
                  1u, kThreads, size_t(0), out, args.dout, dlse, p, delta);
  int64_t n = p.b * p.s * p.nq * D;
  args.dqAcc = launcher.temp(n);
  args.delta = delta;
  launcher.zero(args.dqAcc, n);
  launcher.launch(backwardKernel<E, D>, tiles, unsigned(p.nkv), unsigned(p.b),
                  kThreads, backwardShared<D, typename E::T>(), args);
  int64_t pairs = n / 2, blocks = (pairs + kThreads - 1) / kThreads;
  launcher.launch(castKernel<E>, unsigned(blocks < 4096 ? blocks : 4096), 1u,
                  1u, kThreads, size_t(0), (const float *)args.dqAcc, pairs, dq);
}

} // namespace fsdp::rt::cuda::flash

#endif // FSDP_LIB_RUNTIME_CUDA_FLASHATTENTION_CUH

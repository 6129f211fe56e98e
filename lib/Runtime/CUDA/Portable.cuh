//===- Portable.cuh - Kernel primitives that also run emulated --*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The few primitives that the kernels of FlashAttention.cuh and
// LossRows.cuh are written against: barrier, shuffle, atomic add, tensor
// core mma, 16/32-bit memory moves and the element conversions. With nvcc
// they are the CUDA intrinsics. Compiled as host C++ with FSDP_CUDA_EMULATE
// (after test/Runtime/cuda-emulator.h), they call the emulator, which runs
// every CUDA thread of a block as a host thread: that is how CI tests these
// kernels without a GPU (emulated-kernels.test).
//
// Kernels: PORTABLE_KERNEL(threads) declares one with that launch bound
// (a larger block is refused at launch, by the GPU and by the emulator's
// launcher alike); PORTABLE_SHARED(name) is the block's dynamic shared
// memory as a char *; PORTABLE_SHARED_ARRAY(type, name, n) a static one.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_PORTABLE_CUH
#define FSDP_LIB_RUNTIME_CUDA_PORTABLE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef FSDP_CUDA_EMULATE
#define PORTABLE_KERNEL(threads) inline
#define PORTABLE_DEVICE inline
#define PORTABLE_HOST_DEVICE inline
#define PORTABLE_UNROLL
#define PORTABLE_NO_UNROLL
#define PORTABLE_SHARED(name) char *name = ::emu::sharedMemory()
// Blocks run one at a time on the emulator, so a static is the block's.
#define PORTABLE_SHARED_ARRAY(type, name, n) static type name[n]
#else
#define PORTABLE_KERNEL(threads) __global__ __launch_bounds__(threads)
#define PORTABLE_DEVICE __device__ __forceinline__
#define PORTABLE_HOST_DEVICE __host__ __device__ inline
/// Loops over register arrays are unrolled so that the arrays stay in
/// registers (no-local-memory.test checks).
#define PORTABLE_UNROLL _Pragma("unroll")
/// A loop kept rolled, so that the compiler does not keep values of one
/// trip in registers for the next.
#define PORTABLE_NO_UNROLL _Pragma("unroll 1")
#define PORTABLE_SHARED(name)                                                  \
  extern __shared__ __align__(16) char portableShared[];                       \
  char *name = portableShared
#define PORTABLE_SHARED_ARRAY(type, name, n) __shared__ type name[n]
#endif

namespace fsdp::rt::cuda::portable {

/// The element types. bf16 and f16 have tensor-core products (mma).
template <typename Storage, bool Float, bool Half> struct Element {
  using T = Storage;
  static constexpr bool kFloat = Float, kHalf = Half;
};
using F32 = Element<float, true, false>;
using BF16 = Element<__nv_bfloat16, false, false>;
using F16 = Element<__half, false, true>;

template <typename E> PORTABLE_DEVICE float toFloat(typename E::T x) {
  if constexpr (E::kFloat)
    return x;
  else if constexpr (E::kHalf)
    return __half2float(x);
  else
    return __bfloat162float(x);
}
/// Rounded to nearest even, as the CPU backend rounds.
template <typename E> PORTABLE_DEVICE typename E::T fromFloat(float x) {
  if constexpr (E::kFloat)
    return x;
  else if constexpr (E::kHalf)
    return __float2half_rn(x);
  else
    return __float2bfloat16_rn(x);
}

#ifdef FSDP_CUDA_EMULATE
PORTABLE_DEVICE void barrier() { ::emu::syncThreads(); }
PORTABLE_DEVICE float shflXor(float v, int mask) {
  return ::emu::shflXor(v, mask);
}
PORTABLE_DEVICE double shflXor(double v, int mask) {
  return ::emu::shflXor(v, mask);
}
PORTABLE_DEVICE void atomicAddF(float *p, float v) { ::emu::atomicAdd(p, v); }
/// D = A·B + C for the warp: mma.sync.m16n8k16, f32 accumulation.
template <typename E>
PORTABLE_DEVICE void mma(float (&c)[4], const uint32_t (&a)[4],
                         const uint32_t (&b)[2]) {
  static_assert(!E::kFloat, "tensor-core products take bf16 or f16");
  ::emu::mma16816(E::kHalf, c, a, b);
}
/// Two adjacent elements as one 32-bit word (the lower index in the low
/// half, as the mma fragments hold them).
template <typename T> PORTABLE_DEVICE uint32_t load2(const T *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
}
template <typename T> PORTABLE_DEVICE void store2(T *p, uint32_t w) {
  memcpy(p, &w, 4);
}
/// 16 bytes between 16-byte aligned addresses.
PORTABLE_DEVICE void copy16(void *dst, const void *src) {
  memcpy(dst, src, 16);
}
PORTABLE_DEVICE void zero16(void *dst) { memset(dst, 0, 16); }
#else
PORTABLE_DEVICE void barrier() { __syncthreads(); }
PORTABLE_DEVICE float shflXor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
PORTABLE_DEVICE double shflXor(double v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
PORTABLE_DEVICE void atomicAddF(float *p, float v) { atomicAdd(p, v); }
template <typename E>
PORTABLE_DEVICE void mma(float (&c)[4], const uint32_t (&a)[4],
                         const uint32_t (&b)[2]) {
  static_assert(!E::kFloat, "tensor-core products take bf16 or f16");
  if constexpr (E::kHalf)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
}
template <typename T> PORTABLE_DEVICE uint32_t load2(const T *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}
template <typename T> PORTABLE_DEVICE void store2(T *p, uint32_t w) {
  *reinterpret_cast<uint32_t *>(p) = w;
}
PORTABLE_DEVICE void copy16(void *dst, const void *src) {
  *static_cast<uint4 *>(dst) = *static_cast<const uint4 *>(src);
}
PORTABLE_DEVICE void zero16(void *dst) {
  *static_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
}
#endif

/// Two elements from different rows as one word.
template <typename T>
PORTABLE_DEVICE uint32_t gather2(const T *lo, const T *hi) {
  uint16_t a, b;
  memcpy(&a, lo, 2);
  memcpy(&b, hi, 2);
  return uint32_t(a) | (uint32_t(b) << 16);
}
/// Two floats rounded to a 16-bit element type, as one word.
template <typename E> PORTABLE_DEVICE uint32_t pack(float lo, float hi) {
  static_assert(!E::kFloat, "packs 16-bit elements");
  uint32_t w;
  if constexpr (E::kHalf) {
    __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&w, &h, 4);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&w, &h, 4);
  }
  return w;
}

/// Σ over a warp's lanes by a butterfly, which leaves the same bits in every
/// lane.
template <typename T> PORTABLE_DEVICE T warpSum(T v) {
  for (int mask = 16; mask > 0; mask >>= 1)
    v += shflXor(v, mask);
  return v;
}

/// Whether `p` is 16-byte aligned (a 16-byte move may start there).
PORTABLE_HOST_DEVICE bool aligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// Calls fn(i, a[i], b[i], c[i]) for the elements i of [0, n) that a worker
/// owns, `first` and `stride` apart (threadIdx.x and blockDim.x for a block,
/// the lane and 32 for a warp). b and c may be null (fn gets 0 for them).
/// With `vectors` (every pointer 16-byte aligned, the caller's promise),
/// whole 16-byte chunks go first, one per step; the rest one by one. With
/// `out`, what fn returns is stored in out[i].
template <typename E, typename Fn>
PORTABLE_DEVICE void visitElements(const typename E::T *a,
                                   const typename E::T *b,
                                   const typename E::T *c, int64_t n,
                                   bool vectors, int64_t first, int64_t stride,
                                   typename E::T *out, Fn &&fn) {
  using T = typename E::T;
  constexpr int kVec = 16 / sizeof(T);
  int64_t chunks = vectors ? n / kVec : 0;
  for (int64_t k = first; k < chunks; k += stride) {
    alignas(16) T av[kVec], bv[kVec], cv[kVec];
    copy16(av, a + k * kVec);
    if (b)
      copy16(bv, b + k * kVec);
    if (c)
      copy16(cv, c + k * kVec);
    PORTABLE_UNROLL
    for (int e = 0; e < kVec; ++e) {
      float y = fn(k * kVec + e, toFloat<E>(av[e]), b ? toFloat<E>(bv[e]) : 0.0f,
                   c ? toFloat<E>(cv[e]) : 0.0f);
      if (out)
        av[e] = fromFloat<E>(y);
    }
    if (out)
      copy16(out + k * kVec, av);
  }
  for (int64_t i = chunks * kVec + first; i < n; i += stride) {
    float y = fn(i, toFloat<E>(a[i]), b ? toFloat<E>(b[i]) : 0.0f,
                 c ? toFloat<E>(c[i]) : 0.0f);
    if (out)
      out[i] = fromFloat<E>(y);
  }
}

} // namespace fsdp::rt::cuda::portable

#endif // FSDP_LIB_RUNTIME_CUDA_PORTABLE_CUH

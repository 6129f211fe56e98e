//===- Internal.h - Shared helpers of the CPU runtime -----------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Float conversions and the f32 staging that lets every kernel compute in f32
// whatever the storage type: 16-bit operands are widened into a scratch
// buffer, results are rounded back to nearest even.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CPU_INTERNAL_H
#define FSDP_LIB_RUNTIME_CPU_INTERNAL_H

#include "../Common/Float.h"
#include "../Common/Shape.h"
#include "fsdp/Runtime/Runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include <omp.h>

namespace fsdp::rt {

/// Elements one block of the streaming kernels holds: small enough for the
/// stack and the L1 cache, large enough to vectorize.
constexpr int64_t kBlock = 1024;

/// Runs fn(begin, end) on contiguous ranges covering [0, n): one per OpenMP
/// thread when each gets at least `grain` items, else one range inline.
template <typename Fn> void parallelFor(int64_t n, int64_t grain, Fn &&fn) {
  int64_t chunks =
      std::min<int64_t>(omp_get_max_threads(), n / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || omp_in_parallel()) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel for num_threads(int(chunks)) schedule(static)
  for (int64_t c = 0; c < chunks; ++c)
    fn(n * c / chunks, n * (c + 1) / chunks);
}

/// e^x in f32 within 2 ulp for x <= 88 (Cephes' polynomial on x - n·ln 2),
/// 0 below -87.3: branch-free, so loops over it vectorize (n is rounded by
/// adding and subtracting 1.5 · 2^23, which needs no rounding instruction).
/// NaN stays NaN. 2^n is built from the bits of t + 1.5 · 2^23, whose low
/// mantissa bits hold n, in unsigned arithmetic: converting a NaN to an
/// integer, or shifting a negative one, would be undefined behaviour.
inline float fastExp(float x) {
  float clamped = std::min(std::max(x, -87.3f), 88.0f);
  float t = clamped * 1.44269504088896341f;
  float rounded = t + 12582912.0f;
  float n = rounded - 12582912.0f;
  float r = clamped - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t roundedBits;
  std::memcpy(&roundedBits, &rounded, 4);
  // 0x4B400000 is 1.5 · 2^23; n + 127 is in [1, 254] after the clamp.
  uint32_t bits = (roundedBits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return x < -87.3f ? 0.0f : p * scale;
}

/// Reads index `i` of an i32 or i64 buffer.
inline int64_t loadIndex(fsdp_rt_dtype dtype, const void *p, int64_t i) {
  if (dtype == FSDP_RT_I32)
    return static_cast<const int32_t *>(p)[i];
  return static_cast<const int64_t *>(p)[i];
}

/// An operand seen as f32: the buffer itself for f32, a widened copy else.
class FloatInput {
public:
  FloatInput(fsdp_rt_dtype dtype, const void *data, int64_t n) {
    if (!data)
      return;
    if (dtype == FSDP_RT_F32) {
      ptr = static_cast<const float *>(data);
      return;
    }
    copy.resize(n);
    toFloat(dtype, data, n, copy.data());
    ptr = copy.data();
  }
  const float *get() const { return ptr; }

private:
  const float *ptr = nullptr;
  std::vector<float> copy;
};

/// A result seen as f32: written in place for f32, narrowed on finish() else.
class FloatOutput {
public:
  FloatOutput(fsdp_rt_dtype dtype, void *data, int64_t n)
      : dtype(dtype), data(data), n(n) {
    if (dtype != FSDP_RT_F32)
      copy.resize(n);
  }
  float *get() {
    return dtype == FSDP_RT_F32 ? static_cast<float *>(data) : copy.data();
  }
  void finish() {
    if (dtype != FSDP_RT_F32)
      fromFloat(dtype, copy.data(), n, data);
  }

private:
  fsdp_rt_dtype dtype;
  void *data;
  int64_t n;
  std::vector<float> copy;
};

/// Adds the lifetime of the scope to the time counter of a kernel class.
class KernelTimer {
public:
  explicit KernelTimer(fsdp_rt_kernel_class cls,
                       const char *name = __builtin_FUNCTION())
      : cls(cls), name(name), start(std::chrono::steady_clock::now()) {}
  ~KernelTimer();

private:
  fsdp_rt_kernel_class cls;
  const char *name;
  std::chrono::steady_clock::time_point start;
};

/// c[m, n] = op(a) · op(b) (+ bias per column) (+ beta · c), row-major, all
/// of float type `dtype` (bias too), accumulated in f32: op(a) is a stored
/// [m, k] (or [k, m] when transA), op(b) a stored [k, n] (or [n, k]), with
/// leading dimensions lda, ldb, ldc.
void gemm(fsdp_rt_dtype dtype, bool transA, bool transB, int64_t m, int64_t n,
          int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
          const void *bias, float beta, void *c, int64_t ldc);

/// The f32 product: c = alpha · op(a) · op(b) (+ bias per column) (+ beta ·
/// c), through oneDNN's sgemm; nothing for an empty c.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, const float *bias, float beta, float *c, int64_t ldc);

/// Steps the row-major multi-index `index` over `shape` to the next element
/// (the last dim fastest, like an odometer) and moves `offset` along by
/// `strides`, an operand's strides in that index space.
inline void advance(std::vector<int64_t> &index, const int64_t *shape,
                    const std::vector<int64_t> &strides, int64_t &offset) {
  for (int d = int(index.size()) - 1; d >= 0; --d) {
    offset += strides[d];
    if (++index[d] < shape[d])
      return;
    offset -= strides[d] * shape[d];
    index[d] = 0;
  }
}

/// Row-major strides of `shape`, as a vector.
std::vector<int64_t> stridesOf(const int64_t *shape, int rank);

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_CPU_INTERNAL_H

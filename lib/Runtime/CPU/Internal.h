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

#include "fsdp/Runtime/Runtime.h"

#include <chrono>
#include <cstdint>
#include <vector>

namespace fsdp::rt {

float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float f16ToFloat(uint16_t h);
uint16_t floatToF16(float f);

/// Converts `n` elements of float type `dtype` at `src` to f32.
void toFloat(fsdp_rt_dtype dtype, const void *src, int64_t n, float *dst);
/// Converts `n` f32 values to float type `dtype` at `dst`.
void fromFloat(fsdp_rt_dtype dtype, const float *src, int64_t n, void *dst);

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
  explicit KernelTimer(fsdp_rt_kernel_class cls)
      : cls(cls), start(std::chrono::steady_clock::now()) {}
  ~KernelTimer();

private:
  fsdp_rt_kernel_class cls;
  std::chrono::steady_clock::time_point start;
};

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const int64_t *shape, int rank);
/// Product of `shape`.
int64_t numElements(const int64_t *shape, int rank);

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_CPU_INTERNAL_H

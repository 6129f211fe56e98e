//===- Float.cpp - Host conversions between the float types ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Float.h"
#include "FloatBits.h"

#include <cmath>
#include <cstring>

using namespace fsdp::rt;

//===----------------------------------------------------------------------===//
// The vector level
//===----------------------------------------------------------------------===//

// One version per level FSDP_VECTORIZE clones for, dispatched by the same
// resolver rule (the best level the CPU has), so it names the clones that
// run.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_THREAD__)
#ifndef FSDP_MAX_CPU_ISA_AVX2
__attribute__((target("arch=x86-64-v4"))) static const char *cloneLevel() {
  return "x86-64-v4";
}
#endif
__attribute__((target("arch=x86-64-v3"))) static const char *cloneLevel() {
  return "x86-64-v3";
}
__attribute__((target("default"))) static const char *cloneLevel() {
  return "x86-64";
}
#else
static const char *cloneLevel() { return "x86-64"; }
#endif

const char *fsdp::rt::vectorLevel() { return cloneLevel(); }

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

float fsdp::rt::bf16ToFloat(uint16_t h) { return bits::bf16ToFloat(h); }
uint16_t fsdp::rt::floatToBf16(float f) { return bits::floatToBf16(f); }
float fsdp::rt::f16ToFloat(uint16_t h) { return bits::f16ToFloat(h); }
uint16_t fsdp::rt::floatToF16(float f) { return bits::floatToF16(f); }

// bf16 widens by a shift and narrows by adding the rounding bias, a NaN kept
// quiet by a select: no branch, so both loops vectorize.
FSDP_VECTORIZE
void fsdp::rt::toFloat(fsdp_rt_dtype dtype, const void *src, int64_t n,
                       float *dst) {
  const auto *s = static_cast<const uint16_t *>(src);
  if (dtype == FSDP_RT_F32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if (dtype == FSDP_RT_BF16) {
    auto *d = reinterpret_cast<uint32_t *>(dst);
    for (int64_t i = 0; i < n; ++i)
      d[i] = uint32_t(s[i]) << 16;
  } else {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f16ToFloat(s[i]);
  }
}

FSDP_VECTORIZE
void fsdp::rt::fromFloat(fsdp_rt_dtype dtype, const float *src, int64_t n,
                         void *dst) {
  auto *d = static_cast<uint16_t *>(dst);
  if (dtype == FSDP_RT_F32) {
    std::memcpy(dst, src, n * sizeof(float));
  } else if (dtype == FSDP_RT_BF16) {
    const auto *u = reinterpret_cast<const uint32_t *>(src);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t rounded = (u[i] + 0x7fffu + ((u[i] >> 16) & 1)) >> 16;
      uint32_t quiet = (u[i] >> 16) | 0x40;
      d[i] = uint16_t((u[i] & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
  } else {
    for (int64_t i = 0; i < n; ++i)
      d[i] = floatToF16(src[i]);
  }
}

//===- Float.cpp - Host conversions between the float types ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Float.h"

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

static uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float fsdp::rt::bf16ToFloat(uint16_t h) { return floatOf(uint32_t(h) << 16); }

uint16_t fsdp::rt::floatToBf16(float f) {
  uint32_t u = bitsOf(f);
  // Keep NaNs quiet; rounding could carry a NaN payload into infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

float fsdp::rt::f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: man units of 2^-24, exact in f32.
    float mag = std::ldexp(float(man), -24);
    return sign ? -mag : mag;
  }
  if (exp == 31)
    return floatOf(sign | 0x7f800000u | (man << 13));
  return floatOf(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t fsdp::rt::floatToF16(float f) {
  uint32_t u = bitsOf(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000);
  uint32_t abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
  // 65520 and above round to infinity.
  if (abs >= 0x477ff000u)
    return sign | 0x7c00;
  if (abs >= 0x38800000u) {
    // Normal: rebias the exponent, round the 13 dropped mantissa bits.
    uint32_t v = abs - (112u << 23);
    uint32_t h = v >> 13, rem = v & 0x1fff;
    h += rem > 0x1000 || (rem == 0x1000 && (h & 1));
    return sign | uint16_t(h);
  }
  // Subnormal result: count units of 2^-24, rounding to nearest even.
  int shift = 126 - int(abs >> 23);
  if (shift > 24)
    return sign;
  uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  uint32_t h = man >> shift, rem = man & ((1u << shift) - 1),
           half = 1u << (shift - 1);
  h += rem > half || (rem == half && (h & 1));
  return sign | uint16_t(h);
}

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

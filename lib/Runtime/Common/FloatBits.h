//===- FloatBits.h - bf16 and f16 conversions, host and device --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The one definition of the 16-bit float conversions, compiled for the host
// (Float.cpp, the CPU kernels) and for the device (the CUDA kernels,
// CUDA/Internal.cuh), so both backends round alike bit for bit: round to
// nearest even, overflow to infinity, f16 subnormals kept, a NaN stays a
// quiet NaN of the same sign with its payload bits.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_FLOATBITS_H
#define FSDP_LIB_RUNTIME_COMMON_FLOATBITS_H

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FSDP_HOST_DEVICE __host__ __device__ inline
#else
#define FSDP_HOST_DEVICE inline
#endif

namespace fsdp::rt::bits {

FSDP_HOST_DEVICE uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

FSDP_HOST_DEVICE float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

FSDP_HOST_DEVICE float bf16ToFloat(uint16_t h) {
  return bitsToFloat(uint32_t(h) << 16);
}

FSDP_HOST_DEVICE uint16_t floatToBf16(float f) {
  uint32_t u = floatToBits(f);
  // Keep NaNs quiet; rounding could carry a NaN payload into infinity.
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

FSDP_HOST_DEVICE float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: man units of 2^-24, exact in f32.
    float mag = float(man) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (exp == 31)
    return bitsToFloat(sign | 0x7f800000u | (man << 13));
  return bitsToFloat(sign | ((exp + 112) << 23) | (man << 13));
}

FSDP_HOST_DEVICE uint16_t floatToF16(float f) {
  uint32_t u = floatToBits(f);
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

} // namespace fsdp::rt::bits

#endif // FSDP_LIB_RUNTIME_COMMON_FLOATBITS_H

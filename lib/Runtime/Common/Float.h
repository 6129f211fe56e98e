//===- Float.h - Host conversions between the float types ------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// bf16 and f16 to and from f32 on the host, rounding to nearest even and
// keeping NaNs quiet. The CPU kernels compute with them; the host runtime
// uses them for host images (weights read from files, the loss read back)
// whichever backend holds the tensors, so they live apart from both.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_FLOAT_H
#define FSDP_LIB_RUNTIME_COMMON_FLOAT_H

#include "fsdp/Runtime/Runtime.h"

#include <cstdint>

// Hot loops are compiled once per x86-64 level (AVX-512, AVX2+FMA, baseline)
// and the loader picks the best the CPU has, so the shipped library runs
// everywhere and vectorizes where it can. FSDP_MAX_CPU_ISA_AVX2 (the
// runtime fsdp-compile --max-cpu-isa=avx2 links) leaves the AVX-512 clone
// out, so a machine with AVX-512 computes what one without it does. Not
// under ThreadSanitizer: the loader runs the clones' resolvers before the
// TSan runtime is set up, and an instrumented resolver crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_THREAD__)
#ifdef FSDP_MAX_CPU_ISA_AVX2
#define FSDP_VECTORIZE                                                         \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FSDP_VECTORIZE                                                         \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#else
#define FSDP_VECTORIZE
#endif

namespace fsdp::rt {

/// The x86-64 level whose clones of the FSDP_VECTORIZE loops run here
/// ("x86-64-v4", "x86-64-v3" or "x86-64"), as the loader chose them.
const char *vectorLevel();

float bf16ToFloat(uint16_t h);
uint16_t floatToBf16(float f);
float f16ToFloat(uint16_t h);
uint16_t floatToF16(float f);

/// Converts `n` elements of float type `dtype` at `src` to f32.
void toFloat(fsdp_rt_dtype dtype, const void *src, int64_t n, float *dst);
/// Converts `n` f32 values to float type `dtype` at `dst`.
void fromFloat(fsdp_rt_dtype dtype, const float *src, int64_t n, void *dst);

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_FLOAT_H

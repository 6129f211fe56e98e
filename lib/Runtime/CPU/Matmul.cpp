//===- Matmul.cpp - linear, matmul and batch_matmul -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Each is one or more products of `gemm` (Gemm.cpp) on the operands as they
// are stored, whatever their float type.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

using namespace fsdp::rt;

namespace {
const void *offset(const void *p, int64_t elements, fsdp_rt_dtype dtype) {
  return static_cast<const char *>(p) + elements * fsdp_rt_dtype_size(dtype);
}

void *offset(void *p, int64_t elements, fsdp_rt_dtype dtype) {
  return static_cast<char *>(p) + elements * fsdp_rt_dtype_size(dtype);
}
} // namespace

void fsdp_rt_linear(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                    const void *weight, const void *bias, int64_t rows,
                    int64_t k, int64_t n, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  gemm(dtype, /*transA=*/false, /*transB=*/true, rows, n, k, x, k, weight, k,
       bias, 0.0f, out, n);
}

void fsdp_rt_matmul(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *a,
                    const void *b, int64_t batch, int64_t m, int64_t k,
                    int64_t n, int transpose_a, int transpose_b, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  int64_t ldb = transpose_b ? k : n;
  if (!transpose_a) {
    // The leading dims fold into the rows of a single product.
    gemm(dtype, false, transpose_b, batch * m, n, k, a, k, b, ldb, nullptr,
         0.0f, out, n);
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    gemm(dtype, true, transpose_b, m, n, k, offset(a, i * m * k, dtype), m, b,
         ldb, nullptr, 0.0f, offset(out, i * m * n, dtype), n);
}

void fsdp_rt_batch_matmul(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *a,
                          const void *b, int64_t batch, int64_t m, int64_t k,
                          int64_t n, int transpose_a, int transpose_b,
                          void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  for (int64_t i = 0; i < batch; ++i)
    gemm(dtype, transpose_a, transpose_b, m, n, k, offset(a, i * m * k, dtype),
         transpose_a ? m : k, offset(b, i * k * n, dtype), transpose_b ? k : n,
         nullptr, 0.0f, offset(out, i * m * n, dtype), n);
}

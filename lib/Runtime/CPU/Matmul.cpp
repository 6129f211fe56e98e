//===- Matmul.cpp - linear, matmul and batch_matmul through BLAS ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cblas.h>

using namespace fsdp::rt;

/// out[m, n] = op(a) · op(b) with row-major operands stored untransposed as
/// a [m, k] / [k, m] and b [k, n] / [n, k].
static void gemm(const float *a, const float *b, float *out, int64_t m,
                 int64_t k, int64_t n, bool transA, bool transB, float beta) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
              transA ? m : k, b, transB ? k : n, beta, out, n);
}

void fsdp_rt_linear(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                    const void *weight, const void *bias, int64_t rows,
                    int64_t k, int64_t n, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  FloatInput fx(dtype, x, rows * k), fw(dtype, weight, n * k),
      fb(dtype, bias, n);
  FloatOutput fo(dtype, out, rows * n);
  float *o = fo.get();
  // The bias seeds the output and the product accumulates onto it.
  if (bias)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        o[r * n + j] = fb.get()[j];
  gemm(fx.get(), fw.get(), o, rows, k, n, /*transA=*/false, /*transB=*/true,
       bias ? 1.0f : 0.0f);
  fo.finish();
}

void fsdp_rt_matmul(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *a,
                    const void *b, int64_t batch, int64_t m, int64_t k,
                    int64_t n, int transpose_a, int transpose_b, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  FloatInput fa(dtype, a, batch * m * k), fb(dtype, b, k * n);
  FloatOutput fo(dtype, out, batch * m * n);
  if (!transpose_a) {
    // The leading dims fold into the rows of a single product.
    gemm(fa.get(), fb.get(), fo.get(), batch * m, k, n, false, transpose_b,
         0.0f);
  } else {
    for (int64_t i = 0; i < batch; ++i)
      gemm(fa.get() + i * m * k, fb.get(), fo.get() + i * m * n, m, k, n, true,
           transpose_b, 0.0f);
  }
  fo.finish();
}

void fsdp_rt_batch_matmul(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *a,
                          const void *b, int64_t batch, int64_t m, int64_t k,
                          int64_t n, int transpose_a, int transpose_b,
                          void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_GEMM);
  FloatInput fa(dtype, a, batch * m * k), fb(dtype, b, batch * k * n);
  FloatOutput fo(dtype, out, batch * m * n);
  for (int64_t i = 0; i < batch; ++i)
    gemm(fa.get() + i * m * k, fb.get() + i * k * n, fo.get() + i * m * n, m, k,
         n, transpose_a, transpose_b, 0.0f);
  fo.finish();
}

//===- Gemm.cu - linear, matmul and batch_matmul through cuBLAS -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Every product is one cublasGemmEx_64 or cublasGemmStridedBatchedEx_64 on
// the operands as they are stored. cuBLAS is column-major and the ABI
// row-major: a row-major [r, c] matrix is the column-major [c, r] matrix
// with the same leading dimension, its transpose, so the row-major
// C = op(A)·op(B) is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, i.e.
// cuBLAS is called with the operands swapped and each keeping its own
// transpose flag.
//
// bf16/f16 products run on tensor cores with f32 accumulation
// (CUBLAS_COMPUTE_32F) and one rounding of the result; f32 products use
// CUBLAS_COMPUTE_32F_PEDANTIC, which rules out TF32 (even under
// NVIDIA_TF32_OVERRIDE), so f32 results keep f32 precision as on the CPU.
// A bias is written into C first and added by the product with beta = 1,
// inside the f32 accumulation: one rounding, as the CPU's oneDNN epilogue.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

using namespace fsdp::rt::cuda;

namespace {
/// c[r, j] = bias[j] for r < rows, j < n (c row-major [rows, n]).
template <typename E>
__global__ void broadcastRows(const typename E::T *bias, int64_t rows,
                              int64_t n, typename E::T *c) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * n;
       i += int64_t(gridDim.x) * blockDim.x)
    c[i] = bias[i % n];
}

/// One product of the ABI: `batch` row-major products c[i] = op(a[i]) ·
/// op(b[i]) (+ bias per column), c[i] = c + i·m·n contiguous [m, n]; a[i]
/// is a + i·strideA ([m, k], or [k, m] when transA, leading dim lda), b[i]
/// is b + i·strideB ([k, n], or [n, k] when transB, leading dim ldb);
/// strideB = 0 shares one b.
void gemm(const KernelScope &scope, fsdp_rt_dtype dtype, bool transA,
          bool transB, int64_t batch, int64_t m, int64_t n, int64_t k,
          const void *a, int64_t lda, int64_t strideA, const void *b,
          int64_t ldb, int64_t strideB, const void *bias, void *c,
          fsdp_rt_stream stream) {
  if (dtype != FSDP_RT_F32 && dtype != FSDP_RT_BF16 && dtype != FSDP_RT_F16)
    fail(scope.name(), "expected a float element type (f32, bf16 or f16)");
  if (batch == 0 || m == 0 || n == 0)
    return;
  size_t elt = fsdp_rt_dtype_size(dtype);
  if (bias)
    dispatchFloat(dtype, scope.name(), [&](auto e) {
      using E = decltype(e);
      broadcastRows<E><<<gridFor(batch * m * n), kThreads, 0, scope.stream()>>>(
          asIn<E>(bias), batch * m, n, asOut<E>(c));
    });
  if (k == 0) {
    // An empty sum: C is the bias, or zero (zero bits in every float type).
    if (!bias)
      check(cudaMemsetAsync(c, 0, size_t(batch * m * n) * elt, scope.stream()),
            scope.name());
    return;
  }
  float alpha = 1.0f, beta = bias ? 1.0f : 0.0f;
  cudaDataType type = blasType(dtype);
  cublasComputeType_t compute =
      dtype == FSDP_RT_F32 ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F;
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t handle = blasOf(stream);
  // Column-major Cᵀ[n, m] = op(B)ᵀ[n, k] · op(A)ᵀ[k, m], ldc = n.
  if (batch == 1) {
    check(cublasGemmEx_64(handle, opB, opA, n, m, k, &alpha, b, type, ldb, a,
                          type, lda, &beta, c, type, n, compute,
                          CUBLAS_GEMM_DEFAULT),
          scope.name());
    return;
  }
  check(cublasGemmStridedBatchedEx_64(handle, opB, opA, n, m, k, &alpha, b,
                                      type, ldb, strideB, a, type, lda, strideA,
                                      &beta, c, type, n, m * n, batch, compute,
                                      CUBLAS_GEMM_DEFAULT),
        scope.name());
}
} // namespace

void fsdp_rt_linear(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                    const void *weight, const void *bias, int64_t rows,
                    int64_t k, int64_t n, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_GEMM, stream, "fsdp_rt_linear");
  // out[rows, n] = x[rows, k] · weight[n, k]ᵀ.
  gemm(scope, dtype, /*transA=*/false, /*transB=*/true, 1, rows, n, k, x, k, 0,
       weight, k, 0, bias, out, stream);
}

void fsdp_rt_matmul(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *a,
                    const void *b, int64_t batch, int64_t m, int64_t k,
                    int64_t n, int transpose_a, int transpose_b, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_GEMM, stream, "fsdp_rt_matmul");
  int64_t ldb = transpose_b ? k : n;
  if (!transpose_a) {
    // The leading dims fold into the rows of a single product.
    gemm(scope, dtype, false, transpose_b, 1, batch * m, n, k, a, k, 0, b, ldb,
         0, nullptr, out, stream);
    return;
  }
  // a[i] is [k, m]; b is shared by every batch (stride 0).
  gemm(scope, dtype, true, transpose_b, batch, m, n, k, a, m, m * k, b, ldb, 0,
       nullptr, out, stream);
}

void fsdp_rt_batch_matmul(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                          const void *a, const void *b, int64_t batch,
                          int64_t m, int64_t k, int64_t n, int transpose_a,
                          int transpose_b, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_GEMM, stream, "fsdp_rt_batch_matmul");
  gemm(scope, dtype, transpose_a, transpose_b, batch, m, n, k, a,
       transpose_a ? m : k, m * k, b, transpose_b ? k : n, k * n, nullptr, out,
       stream);
}

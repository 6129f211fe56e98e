//===- AttentionGemm.cuh - Attention as cuBLAS products ---------*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The product-based attention (AttentionGemm.cu) that fsdp_rt_attention and
// fsdp_rt_attention_grad (Attention.cu) call unless
// FSDP_RT_CUDA_ATTENTION=exact selects the per-row kernels.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_ATTENTIONGEMM_CUH
#define FSDP_LIB_RUNTIME_CUDA_ATTENTIONGEMM_CUH

#include "Internal.cuh"

namespace fsdp::rt::cuda {

/// The keys query i sees are [firstKey, endKey): from i - window + 1 with
/// a sliding window > 0 (else 0), to i + 1 when causal (else s). Both
/// attention paths, and the CPU backend, follow this rule.
__host__ __device__ inline int64_t firstKey(int64_t i, int64_t window) {
  return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}
__host__ __device__ inline int64_t endKey(int64_t i, int causal, int64_t s) {
  return causal ? i + 1 : s;
}

/// The arguments of an attention call that describe its shape and mask.
struct AttentionShape {
  int64_t b, s, nq, nkv, d, dv;
  int causal;
  int64_t window;
  double scale;
};

/// Whether attention runs through cuBLAS products (the default) rather
/// than the exact per-row kernels (FSDP_RT_CUDA_ATTENTION=exact); any other
/// value is an error.
bool attentionThroughProducts();

/// fsdp_rt_attention through products, inside the caller's scope.
void attentionProducts(const KernelScope &scope, fsdp_rt_stream stream,
                       fsdp_rt_dtype dtype, const void *q, const void *k,
                       const void *v, const AttentionShape &shape, void *out,
                       float *lse);

/// fsdp_rt_attention_grad through products, inside the caller's scope.
void attentionGradProducts(const KernelScope &scope, fsdp_rt_stream stream,
                           fsdp_rt_dtype dtype, const void *q, const void *k,
                           const void *v, const float *lse, const void *dout,
                           const AttentionShape &shape, void *dq, void *dk,
                           void *dvalue);

} // namespace fsdp::rt::cuda

#endif // FSDP_LIB_RUNTIME_CUDA_ATTENTIONGEMM_CUH

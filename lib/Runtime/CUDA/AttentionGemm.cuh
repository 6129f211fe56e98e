//===- AttentionGemm.cuh - Attention as cuBLAS products ---------*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The attention paths that fsdp_rt_attention and fsdp_rt_attention_grad
// (Attention.cu) choose between: flash kernels (FlashAttention.cu), cuBLAS
// products (AttentionGemm.cu) and exact per-row kernels (Attention.cu).
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
  /// Context parallelism (the flash kernels only): `skv` keys (0: s), and
  /// the queries' and keys' positions, or null; packed rows (the flash
  /// kernels only): the queries' positions in their documents, or null.
  int64_t skv = 0;
  const int64_t *qpos = nullptr, *kpos = nullptr, *dpos = nullptr;
  /// Whether the call is one sequence's queries and keys by index, one
  /// document a row.
  bool byIndex() const {
    return (skv == 0 || skv == s) && !qpos && !kpos && !dpos;
  }
};

/// How attention runs, from FSDP_RT_CUDA_ATTENTION: `flash` (the default:
/// FlashAttention.cuh where it applies, bf16/f16 with head dim 32, 64 or
/// 128, else products), `products` (cuBLAS products, AttentionGemm.cu) or
/// `exact` (the per-row kernels of Attention.cu); any other value is an
/// error.
enum class AttentionPath { Flash, Products, Exact };
AttentionPath attentionPath();

/// fsdp_rt_attention through the flash kernels, inside the caller's scope;
/// false (and nothing queued) when they do not apply to the call.
bool flashAttention(const KernelScope &scope, fsdp_rt_dtype dtype,
                    const void *q, const void *k, const void *v,
                    const AttentionShape &shape, void *out, float *lse);

/// fsdp_rt_attention_grad through the flash kernels, likewise; `dlse` is
/// the statistics' gradient, or null.
bool flashAttentionGrad(const KernelScope &scope, fsdp_rt_dtype dtype,
                        const void *q, const void *k, const void *v,
                        const void *out, const float *lse, const void *dout,
                        const float *dlse, const AttentionShape &shape,
                        void *dq, void *dk, void *dvalue);

/// fsdp_rt_attention through products, inside the caller's scope.
void attentionProducts(const KernelScope &scope, fsdp_rt_stream stream,
                       fsdp_rt_dtype dtype, const void *q, const void *k,
                       const void *v, const AttentionShape &shape, void *out,
                       float *lse);

/// fsdp_rt_attention_grad through products, inside the caller's scope.
void attentionGradProducts(const KernelScope &scope, fsdp_rt_stream stream,
                           fsdp_rt_dtype dtype, const void *q, const void *k,
                           const void *v, const void *out, const float *lse,
                           const void *dout, const AttentionShape &shape,
                           void *dq, void *dk, void *dvalue);

} // namespace fsdp::rt::cuda

#endif // FSDP_LIB_RUNTIME_CUDA_ATTENTIONGEMM_CUH

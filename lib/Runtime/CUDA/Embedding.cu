//===- Embedding.cu - embedding and embedding_grad ------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The lookup copies table rows word by word (any element type), one thread
// per output element. The gradient adds rows of dy into an f32 table with
// atomicAdd, one thread per element of dy, then rounds to the table's type:
// repeated ids add in an unspecified order, so for them the f32 sums (and
// the rounded result) may differ in the last bits from run to run. This is
// the one kernel of the backend that is not deterministic; the CPU backend
// adds in id order.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

using namespace fsdp::rt::cuda;

namespace {
/// out[i, c] = table[ids[i] - first, c], or zero bits (zero in every type)
/// for an id outside the table's rows.
template <typename W>
__global__ void embeddingKernel(const W *table, int64_t vocab, int64_t hidden,
                                int64_t first, fsdp_rt_dtype idsDtype,
                                const void *ids, int64_t n, W *out) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t id = loadIndex(idsDtype, ids, e / hidden) - first;
    out[e] = id >= 0 && id < vocab ? table[id * hidden + e % hidden] : W(0);
  }
}

/// table[ids[i] - first, c] += dy[i, c] in f32, skipping ids outside it.
template <typename E>
__global__ void embeddingGradKernel(fsdp_rt_dtype idsDtype, const void *ids,
                                    const typename E::T *dy, int64_t vocab,
                                    int64_t hidden, int64_t first, int64_t n,
                                    float *table) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t id = loadIndex(idsDtype, ids, e / hidden) - first;
    if (id >= 0 && id < vocab)
      atomicAdd(table + id * hidden + e % hidden, E::load(dy, e));
  }
}

template <typename E>
__global__ void narrowKernel(const float *x, int64_t n, typename E::T *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    E::store(out, i, x[i]);
}
} // namespace

void fsdp_rt_embedding(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *table, int64_t vocab, int64_t hidden,
                       int64_t first_id, fsdp_rt_dtype ids_dtype,
                       const void *ids, int64_t num_ids, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_EMBEDDING, stream, "fsdp_rt_embedding");
  int64_t n = num_ids * hidden;
  if (n == 0)
    return;
  auto launch = [&](auto w) {
    using W = decltype(w);
    embeddingKernel<<<gridFor(n), kThreads, 0, scope.stream()>>>(
        static_cast<const W *>(table), vocab, hidden, first_id, ids_dtype, ids,
        n, static_cast<W *>(out));
  };
  switch (fsdp_rt_dtype_size(dtype)) {
  case 2:
    return launch(uint16_t{});
  case 4:
    return launch(uint32_t{});
  default:
    return launch(uint64_t{});
  }
}

void fsdp_rt_embedding_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                            fsdp_rt_dtype ids_dtype, const void *ids,
                            int64_t num_ids, const void *dy, int64_t vocab,
                            int64_t hidden, int64_t first_id, void *dtable) {
  KernelScope scope(FSDP_RT_KERNEL_EMBEDDING, stream, "fsdp_rt_embedding_grad");
  cudaStream_t s = scope.stream();
  int64_t tableN = vocab * hidden, n = num_ids * hidden;
  if (tableN == 0)
    return;
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    // An f32 table is summed in place; a 16-bit one in an f32 temporary.
    bool wide = dtype == FSDP_RT_F32;
    Temp<float> scratch(wide ? 0 : tableN, s, scope.name());
    float *sums = wide ? static_cast<float *>(dtable) : scratch.get();
    check(cudaMemsetAsync(sums, 0, size_t(tableN) * sizeof(float), s),
          scope.name());
    if (n > 0)
      embeddingGradKernel<E><<<gridFor(n), kThreads, 0, s>>>(
          ids_dtype, ids, asIn<E>(dy), vocab, hidden, first_id, n, sums);
    if (!wide)
      narrowKernel<E>
          <<<gridFor(tableN), kThreads, 0, s>>>(sums, tableN, asOut<E>(dtable));
  });
}

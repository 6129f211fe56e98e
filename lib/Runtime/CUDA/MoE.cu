//===- MoE.cu - Mixture-of-experts calls of the runtime ABI ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Launches MoEKernels.cuh. Counts and routing stay on the device: the
// grouped products launch a tile grid for the buffer's rows in every
// segment and the tiles past a segment's count exit, so no call reads a
// count on the host (the step stays graph-capturable). The products are
// plain tiled kernels, not cuBLAS's grouped GEMM, which takes its sizes
// from the host.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "MoEKernels.cuh"

using namespace fsdp::rt::cuda;

namespace {

template <typename E> using P = Portable<E>;

/// The rows of every slot in expert order (a temporary of `slots`), and
/// the counts into `counts` (or a temporary).
struct SlotRows {
  SlotRows(const int64_t *indices, int64_t slots, int64_t experts,
           int64_t *counts, cudaStream_t stream, const char *where)
      : row(slots, stream, where), start(experts, stream, where),
        scratch(counts ? 0 : experts, stream, where) {
    moe::slotRows<<<1, moe::kThreads, 0, stream>>>(
        indices, slots, experts, counts ? counts : scratch.get(), start.get(),
        row.get());
  }
  Temp<int64_t> row, start, scratch;
};

void requireTopK(int64_t topK, const char *where) {
  if (topK > moe::kMaxTopK)
    fail(where, "top_k above 32 is not built on CUDA");
}

} // namespace

void fsdp_rt_moe_router(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *logits, int64_t tokens, int64_t experts,
                        int64_t top_k, int normalize, void *weights,
                        int64_t *indices) {
  requireTopK(top_k, "fsdp_rt_moe_router");
  launchFloat(FSDP_RT_KERNEL_SOFTMAX, stream, "fsdp_rt_moe_router", dtype,
              tokens == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                moe::router<P<E>>
                    <<<moe::gridOf(tokens), moe::kThreads, 0, scope.stream()>>>(
                        asPortable<E>(logits), tokens, experts, top_k,
                        normalize, asPortable<E>(weights), indices);
              });
}

void fsdp_rt_moe_router_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                             const void *logits, const int64_t *indices,
                             const void *dweights, int64_t tokens,
                             int64_t experts, int64_t top_k, int normalize,
                             void *dlogits) {
  requireTopK(top_k, "fsdp_rt_moe_router_grad");
  launchFloat(FSDP_RT_KERNEL_SOFTMAX, stream, "fsdp_rt_moe_router_grad", dtype,
              tokens == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                moe::routerGrad<P<E>>
                    <<<moe::gridOf(tokens), moe::kThreads, 0, scope.stream()>>>(
                        asPortable<E>(logits), indices, asPortable<E>(dweights),
                        tokens, experts, top_k, normalize,
                        asPortable<E>(dlogits));
              });
}

void fsdp_rt_moe_permute(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *x, const int64_t *indices, int64_t tokens,
                         int64_t hidden, int64_t top_k, int64_t experts,
                         void *rows, int64_t *counts) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_moe_permute");
  int64_t slots = tokens * top_k;
  SlotRows order(indices, slots, experts, counts, scope.stream(), scope.name());
  if (slots * hidden == 0)
    return;
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    moe::permute<P<E>>
        <<<moe::gridOf(slots * hidden), moe::kThreads, 0, scope.stream()>>>(
            asPortable<E>(x), order.row.get(), slots, hidden, top_k,
            asPortable<E>(rows));
  });
}

void fsdp_rt_moe_unpermute(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *rows, const int64_t *indices,
                           const void *weights, int64_t tokens, int64_t hidden,
                           int64_t top_k, int64_t experts, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_moe_unpermute");
  SlotRows order(indices, tokens * top_k, experts, nullptr, scope.stream(),
                 scope.name());
  if (tokens * hidden == 0)
    return;
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    moe::unpermute<P<E>>
        <<<moe::gridOf(tokens * hidden), moe::kThreads, 0, scope.stream()>>>(
            asPortable<E>(rows), order.row.get(), asPortable<E>(weights),
            tokens, hidden, top_k, asPortable<E>(out));
  });
}

void fsdp_rt_moe_unpermute_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *rows, const int64_t *indices,
                                const void *weights, const void *dy,
                                int64_t tokens, int64_t hidden, int64_t top_k,
                                int64_t experts, void *drows, void *dweights) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_moe_unpermute_grad");
  int64_t slots = tokens * top_k;
  SlotRows order(indices, slots, experts, nullptr, scope.stream(),
                 scope.name());
  if (slots == 0)
    return;
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (hidden > 0)
      moe::unpermuteGradRows<P<E>>
          <<<moe::gridOf(slots * hidden), moe::kThreads, 0, scope.stream()>>>(
              order.row.get(), asPortable<E>(weights), asPortable<E>(dy), slots,
              hidden, top_k, asPortable<E>(drows));
    moe::unpermuteGradWeights<P<E>>
        <<<moe::gridOf(slots), moe::kThreads, 0, scope.stream()>>>(
            asPortable<E>(rows), order.row.get(), asPortable<E>(dy), slots,
            hidden, top_k, asPortable<E>(dweights));
  });
}

void fsdp_rt_grouped_linear(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                            const void *x, int64_t rows, int64_t k,
                            const int64_t *counts, int64_t segments,
                            const void *w, int64_t experts, int64_t n,
                            void *out) {
  KernelScope scope(FSDP_RT_KERNEL_GEMM, stream, "fsdp_rt_grouped_linear");
  if (rows * n == 0)
    return;
  Temp<int64_t> start(segments + 1, scope.stream(), scope.name());
  moe::segmentStarts<<<1, 1, 0, scope.stream()>>>(counts, segments,
                                                  start.get());
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (segments > 0) {
      dim3 grid(unsigned((n + moe::kTile - 1) / moe::kTile),
                moe::rowTiles(rows), unsigned(segments));
      moe::groupedProduct<P<E>>
          <<<grid, moe::kTile * moe::kTile, 0, scope.stream()>>>(
              asPortable<E>(x), counts, start.get(), asPortable<E>(w), experts,
              k, n, /*transB=*/true, asPortable<E>(out));
    }
    moe::zeroTail<P<E>>
        <<<moe::gridOf(rows * n), moe::kThreads, 0, scope.stream()>>>(
            start.get(), segments, rows, n, asPortable<E>(out));
  });
}

void fsdp_rt_grouped_linear_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                 const void *x, int64_t rows, int64_t k,
                                 const int64_t *counts, int64_t segments,
                                 const void *w, int64_t experts, int64_t n,
                                 const void *dy, void *dx, void *dw) {
  KernelScope scope(FSDP_RT_KERNEL_GEMM, stream, "fsdp_rt_grouped_linear_grad");
  Temp<int64_t> start(segments + 1, scope.stream(), scope.name());
  moe::segmentStarts<<<1, 1, 0, scope.stream()>>>(counts, segments,
                                                  start.get());
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (rows * k > 0) {
      if (segments > 0) {
        // dx = dy · w[e]: w [E, n, k] untransposed.
        dim3 grid(unsigned((k + moe::kTile - 1) / moe::kTile),
                  moe::rowTiles(rows), unsigned(segments));
        moe::groupedProduct<P<E>>
            <<<grid, moe::kTile * moe::kTile, 0, scope.stream()>>>(
                asPortable<E>(dy), counts, start.get(), asPortable<E>(w),
                experts, n, k, /*transB=*/false, asPortable<E>(dx));
      }
      moe::zeroTail<P<E>>
          <<<moe::gridOf(rows * k), moe::kThreads, 0, scope.stream()>>>(
              start.get(), segments, rows, k, asPortable<E>(dx));
    }
    if (experts * n * k > 0) {
      dim3 grid(unsigned((k + moe::kTile - 1) / moe::kTile),
                unsigned((n + moe::kTile - 1) / moe::kTile), unsigned(experts));
      moe::groupedWeightGrad<P<E>>
          <<<grid, moe::kTile * moe::kTile, 0, scope.stream()>>>(
              asPortable<E>(x), asPortable<E>(dy), counts, start.get(),
              segments, experts, k, n, asPortable<E>(dw));
    }
  });
}

void fsdp_rt_moe_rank_counts(fsdp_rt_stream stream, const int64_t *counts,
                             int64_t n, int64_t ranks, int64_t *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_moe_rank_counts");
  moe::rankCounts<<<1, 1, 0, scope.stream()>>>(counts, n, ranks, out);
}

void fsdp_rt_moe_aux_stats(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *logits, int64_t tokens, int64_t experts,
                           int64_t top_k, float *stats) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_moe_aux_stats");
  requireTopK(top_k, scope.name());
  Temp<float> softmax(2 * tokens, scope.stream(), scope.name());
  Temp<int64_t> chosen(tokens * top_k, scope.stream(), scope.name());
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (tokens > 0)
      moe::routeStats<P<E>>
          <<<moe::gridOf(tokens), moe::kThreads, 0, scope.stream()>>>(
              asPortable<E>(logits), tokens, experts, top_k, softmax.get(),
              chosen.get());
    moe::auxStats<P<E>>
        <<<moe::gridOf(experts), moe::kThreads, 0, scope.stream()>>>(
            asPortable<E>(logits), softmax.get(), chosen.get(), tokens, experts,
            top_k, stats);
  });
}

void fsdp_rt_moe_aux_stats_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *logits, int64_t tokens,
                                int64_t experts, const float *dstats,
                                void *dlogits) {
  launchFloat(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_moe_aux_stats_grad", dtype,
              tokens == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                moe::auxStatsGrad<P<E>>
                    <<<moe::gridOf(tokens), moe::kThreads, 0, scope.stream()>>>(
                        asPortable<E>(logits), dstats, tokens, experts,
                        asPortable<E>(dlogits));
              });
}

void fsdp_rt_moe_aux_combine(fsdp_rt_stream stream, const float *stats,
                             int64_t experts, float *out) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_moe_aux_combine");
  moe::auxCombine<<<1, 1, 0, scope.stream()>>>(stats, experts, out);
}

void fsdp_rt_moe_aux_combine_grad(fsdp_rt_stream stream, const float *stats,
                                  int64_t experts, const float *dy,
                                  float *dstats) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream,
                    "fsdp_rt_moe_aux_combine_grad");
  moe::auxCombineGrad<<<1, 1, 0, scope.stream()>>>(stats, experts, dy, dstats);
}

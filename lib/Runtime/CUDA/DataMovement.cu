//===- DataMovement.cu - transpose, slice, concat, copy, cast, pad --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// These kernels move elements and never look at their values, so they work
// on every element type: each is instantiated for the element's size (2, 4
// or 8 bytes) and copies whole words, one thread per output element. cast
// converts, with the CPU backend's rounding. Plain and strided block copies
// are the CUDA runtime's asynchronous copies.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "RowExchange.cuh"

#include "fsdp/Runtime/RuntimeCUDA.h"

using namespace fsdp::rt::cuda;

namespace {
/// Calls fn(W{}) with W the unsigned word of `dtype`'s size.
template <typename Fn>
void dispatchWord(fsdp_rt_dtype dtype, const char *where, Fn &&fn) {
  switch (fsdp_rt_dtype_size(dtype)) {
  case 2:
    fn(uint16_t{});
    return;
  case 4:
    fn(uint32_t{});
    return;
  case 8:
    fn(uint64_t{});
    return;
  default:
    fail(where, "unsupported element size");
  }
}

/// The output's shape and, per output dim, the input's stride along it.
struct Permutation {
  int rank;
  int64_t outShape[kMaxRank];
  int64_t srcStrides[kMaxRank];
};

/// out[i] = x[Σ_d index_d(i) · srcStrides[d]], index(i) the row-major
/// multi-index of i in the output.
template <typename W>
__global__ void transposeKernel(const W *x, Permutation p, int64_t n, W *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = i, src = 0;
    for (int d = p.rank - 1; d >= 0; --d) {
      src += (rest % p.outShape[d]) * p.srcStrides[d];
      rest /= p.outShape[d];
    }
    out[i] = x[src];
  }
}

/// x is [outer, len, inner]; out is [outer, size, inner] with out[o, p, c] =
/// x[o, start + p, c].
template <typename W>
__global__ void sliceKernel(const W *x, int64_t len, int64_t inner,
                            int64_t start, int64_t size, int64_t n, W *out) {
  int64_t chunk = size * inner;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = e / chunk, rem = e % chunk;
    out[e] = x[(o * len + start) * inner + rem];
  }
}

/// Input x [outer, chunk] (chunk = its size along dim · inner) into the
/// columns [offset, offset + chunk) of out [outer, total].
template <typename W>
__global__ void concatKernel(const W *x, int64_t chunk, int64_t total,
                             int64_t offset, int64_t n, W *out) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x)
    out[(e / chunk) * total + offset + e % chunk] = x[e];
}

/// x [outer, len, inner] into out [outer, before + len + after, inner],
/// zeros (zero bits, zero in every type) around it.
template <typename W>
__global__ void padKernel(const W *x, int64_t len, int64_t inner,
                          int64_t before, int64_t outLen, int64_t n, W *out) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = e / (outLen * inner), rem = e % (outLen * inner);
    int64_t p = rem / inner - before, c = rem % inner;
    out[e] = p >= 0 && p < len ? x[(o * len + p) * inner + c] : W(0);
  }
}
} // namespace

void fsdp_rt_transpose(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *x, const int64_t *shape, int rank,
                       const int64_t *perm, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_transpose");
  if (rank > kMaxRank)
    fail(scope.name(), "rank above 8");
  int64_t inStrides[kMaxRank];
  stridesOf(shape, rank, inStrides);
  // Output dim i is input dim perm[i].
  Permutation p = {};
  p.rank = rank;
  for (int i = 0; i < rank; ++i) {
    p.outShape[i] = shape[perm[i]];
    p.srcStrides[i] = inStrides[perm[i]];
  }
  int64_t n = numElements(shape, rank);
  if (n == 0)
    return;
  dispatchWord(dtype, scope.name(), [&](auto w) {
    using W = decltype(w);
    transposeKernel<<<gridFor(n), kThreads, 0, scope.stream()>>>(
        static_cast<const W *>(x), p, n, static_cast<W *>(out));
  });
}

void fsdp_rt_slice(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                   const int64_t *shape, int rank, int dim, int64_t start,
                   int64_t size, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_slice");
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, inner = v.inner;
  int64_t n = outer * size * inner;
  if (n == 0)
    return;
  dispatchWord(dtype, scope.name(), [&](auto w) {
    using W = decltype(w);
    sliceKernel<<<gridFor(n), kThreads, 0, scope.stream()>>>(
        static_cast<const W *>(x), v.len, inner, start, size, n,
        static_cast<W *>(out));
  });
}

void fsdp_rt_concat(fsdp_rt_stream stream, fsdp_rt_dtype dtype, int num_inputs,
                    const void *const *inputs, const int64_t *dim_sizes,
                    const int64_t *out_shape, int rank, int dim, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_concat");
  if (dim < 0)
    dim += rank;
  int64_t outer = numElements(out_shape, dim),
          inner = numElements(out_shape + dim + 1, rank - dim - 1);
  int64_t total = out_shape[dim] * inner, offset = 0;
  // One launch per input, each filling its band of every outer row.
  for (int t = 0; t < num_inputs; ++t) {
    int64_t chunk = dim_sizes[t] * inner, n = outer * chunk;
    if (n > 0)
      dispatchWord(dtype, scope.name(), [&](auto w) {
        using W = decltype(w);
        concatKernel<<<gridFor(n), kThreads, 0, scope.stream()>>>(
            static_cast<const W *>(inputs[t]), chunk, total, offset, n,
            static_cast<W *>(out));
      });
    offset += chunk;
  }
}

void fsdp_rt_copy(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_copy");
  if (numel <= 0)
    return;
  size_t bytes = size_t(numel) * fsdp_rt_dtype_size(dtype);
  if (hostMemory(x) && hostMemory(out))
    return queueHostCopy(stream, out, bytes, x, bytes, bytes, 1,
                         /*snapshot=*/false);
  check(cudaMemcpyAsync(out, x, bytes, cudaMemcpyDefault, scope.stream()),
        scope.name());
}

void fsdp_rt_copy_2d(fsdp_rt_stream stream, void *dst, size_t dst_pitch,
                     const void *src, size_t src_pitch, size_t width,
                     size_t rows) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_copy_2d");
  if (width == 0 || rows == 0)
    return;
  if (hostMemory(src) && hostMemory(dst))
    return queueHostCopy(stream, dst, dst_pitch, src, src_pitch, width, rows,
                         /*snapshot=*/false);
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                          cudaMemcpyDefault, scope.stream()),
        scope.name());
}

void fsdp_rt_cast(fsdp_rt_stream stream, fsdp_rt_dtype src_dtype, const void *x,
                  fsdp_rt_dtype dst_dtype, int64_t numel, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_cast");
  if (numel == 0)
    return;
  dispatchFloat(src_dtype, scope.name(), [&](auto s) {
    dispatchFloat(dst_dtype, scope.name(), [&](auto d) {
      using Src = decltype(s);
      using Dst = decltype(d);
      launchCast<Src, Dst>(scope.stream(), x, numel, out);
    });
  });
}

void fsdp_rt_pad(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *shape, int rank, int dim, int64_t before,
                 int64_t after, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream, "fsdp_rt_pad");
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, inner = v.inner;
  int64_t outLen = before + v.len + after, n = outer * outLen * inner;
  if (n == 0)
    return;
  dispatchWord(dtype, scope.name(), [&](auto w) {
    using W = decltype(w);
    padKernel<<<gridFor(n), kThreads, 0, scope.stream()>>>(
        static_cast<const W *>(x), v.len, inner, before, outLen, n,
        static_cast<W *>(out));
  });
}

void fsdp_rt_cuda_pack_rows(fsdp_rt_stream stream, const void *src,
                            const int64_t *counts, int n, int64_t capacity,
                            int64_t row_bytes, void *dst) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_cuda_pack_rows");
  rows::packRows<<<rows::rowGrid(n * capacity), rows::kRowThreads, 0,
                   scope.stream()>>>(static_cast<const char *>(src), counts, n,
                                     capacity, row_bytes,
                                     static_cast<char *>(dst));
}

void fsdp_rt_cuda_unpack_rows(fsdp_rt_stream stream, const void *src,
                              const int64_t *counts, int n, int64_t capacity,
                              int64_t row_bytes, void *dst, int64_t dst_rows) {
  KernelScope scope(FSDP_RT_KERNEL_DATA_MOVEMENT, stream,
                    "fsdp_rt_cuda_unpack_rows");
  rows::unpackRows<<<rows::rowGrid(dst_rows), rows::kRowThreads, 0,
                     scope.stream()>>>(static_cast<const char *>(src), counts,
                                       n, capacity, row_bytes,
                                       static_cast<char *>(dst), dst_rows);
}

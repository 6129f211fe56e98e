//===- Softmax.cu - softmax, its grad and reduce_max ----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// x is seen as [outer, len, inner] with the softmax along len. Along the
// last dim (inner = 1) a thread block takes a row and reduces with block
// reductions; along another dim the elements of one softmax are `inner`
// apart, so a thread takes one (outer, inner) column and neighbouring
// threads read neighbouring addresses. The accumulation types are the CPU
// backend's: along the last dim the exponentials are summed in f32, along
// another dim (and every softmax-grad dot product) in double.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

using namespace fsdp::rt::cuda;

namespace {
unsigned rowGrid(int64_t rows) {
  return unsigned(rows < (1 << 20) ? rows : (1 << 20));
}

/// Softmax of each row of [rows, len], subtracting the row maximum.
template <typename E>
__global__ void softmaxRowsKernel(const typename E::T *x, int64_t rows,
                                  int64_t len, typename E::T *out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::T *xr = x + r * len;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      m = fmaxf(m, E::load(xr, i));
    m = blockReduce(m, MaxOp{});
    float sum = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      sum += fastExp(E::load(xr, i) - m);
    float inv = 1.0f / blockReduce(sum, SumOp{});
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      E::store(out + r * len, i, fastExp(E::load(xr, i) - m) * inv);
  }
}

/// Softmax along the middle dim of [outer, len, inner], one thread per
/// (outer, inner) column.
template <typename E>
__global__ void softmaxColumnsKernel(const typename E::T *x, int64_t outer,
                                     int64_t len, int64_t inner,
                                     typename E::T *out) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       c < outer * inner; c += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (c / inner) * len * inner + c % inner;
    float m = E::load(x, base);
    for (int64_t i = 1; i < len; ++i)
      m = fmaxf(m, E::load(x, base + i * inner));
    double sum = 0;
    for (int64_t i = 0; i < len; ++i)
      sum += expf(E::load(x, base + i * inner) - m);
    float inv = float(1.0 / sum);
    for (int64_t i = 0; i < len; ++i)
      E::store(out, base + i * inner,
               expf(E::load(x, base + i * inner) - m) * inv);
  }
}

/// dx = y · (dy - Σ y·dy) along the rows of [rows, len].
template <typename E>
__global__ void softmaxGradRowsKernel(const typename E::T *y,
                                      const typename E::T *dy, int64_t rows,
                                      int64_t len, typename E::T *dx) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::T *yr = y + r * len, *dyr = dy + r * len;
    double dot = 0;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      dot += double(E::load(yr, i)) * double(E::load(dyr, i));
    float fdot = float(blockReduce(dot, SumOp{}));
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      E::store(dx + r * len, i, E::load(yr, i) * (E::load(dyr, i) - fdot));
  }
}

/// The same along the middle dim of [outer, len, inner].
template <typename E>
__global__ void softmaxGradColumnsKernel(const typename E::T *y,
                                         const typename E::T *dy, int64_t outer,
                                         int64_t len, int64_t inner,
                                         typename E::T *dx) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       c < outer * inner; c += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (c / inner) * len * inner + c % inner;
    double dot = 0;
    for (int64_t i = 0; i < len; ++i)
      dot += double(E::load(y, base + i * inner)) *
             double(E::load(dy, base + i * inner));
    float fdot = float(dot);
    for (int64_t i = 0; i < len; ++i) {
      int64_t at = base + i * inner;
      E::store(dx, at, E::load(y, at) * (E::load(dy, at) - fdot));
    }
  }
}

/// out[r] = max of row r of [rows, n].
template <typename E>
__global__ void reduceMaxKernel(const typename E::T *x, int64_t rows, int64_t n,
                                typename E::T *out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      m = fmaxf(m, E::load(x + r * n, i));
    m = blockReduce(m, MaxOp{});
    if (threadIdx.x == 0)
      E::store(out, r, m);
  }
}
} // namespace

void fsdp_rt_softmax(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                     const int64_t *shape, int rank, int dim, void *out) {
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, len = v.len, inner = v.inner;
  launchFloat(FSDP_RT_KERNEL_SOFTMAX, stream, "fsdp_rt_softmax", dtype,
              outer * len * inner == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                if (inner == 1)
                  softmaxRowsKernel<E>
                      <<<rowGrid(outer), kThreads, 0, scope.stream()>>>(
                          asIn<E>(x), outer, len, asOut<E>(out));
                else
                  softmaxColumnsKernel<E>
                      <<<gridFor(outer * inner), kThreads, 0, scope.stream()>>>(
                          asIn<E>(x), outer, len, inner, asOut<E>(out));
              });
}

void fsdp_rt_softmax_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                          const void *y, const void *dy, const int64_t *shape,
                          int rank, int dim, void *dx) {
  AxisView v = viewAround(shape, rank, dim);
  int64_t outer = v.outer, len = v.len, inner = v.inner;
  launchFloat(FSDP_RT_KERNEL_SOFTMAX, stream, "fsdp_rt_softmax_grad", dtype,
              outer * len * inner == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                if (inner == 1)
                  softmaxGradRowsKernel<E>
                      <<<rowGrid(outer), kThreads, 0, scope.stream()>>>(
                          asIn<E>(y), asIn<E>(dy), outer, len, asOut<E>(dx));
                else
                  softmaxGradColumnsKernel<E>
                      <<<gridFor(outer * inner), kThreads, 0, scope.stream()>>>(
                          asIn<E>(y), asIn<E>(dy), outer, len, inner,
                          asOut<E>(dx));
              });
}

void fsdp_rt_reduce_max(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *x, int64_t rows, int64_t n, void *out) {
  // The CPU backend counts reduce_max, the vocabulary-parallel loss's row
  // maximum, as a loss kernel.
  launchFloat(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_reduce_max", dtype,
              rows == 0 || n == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                reduceMaxKernel<E>
                    <<<rowGrid(rows), kThreads, 0, scope.stream()>>>(
                        asIn<E>(x), rows, n, asOut<E>(out));
              });
}

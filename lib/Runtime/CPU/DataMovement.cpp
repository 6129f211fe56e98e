//===- DataMovement.cpp - embedding, layout, cast, pad, embedding_grad ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// These kernels move bytes and never look at values, so they work on every
// element type; cast converts and embedding_grad adds rows, both in f32.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

using namespace fsdp::rt;

/// In each block of the dims before `dim` of x (`shape`), rows
/// [from, from + count) of the dim go to rows [to, to + count) of out's,
/// which has `outLen` rows there; out's other rows become zero bits, which
/// are zero in every element type. A row is the dims after `dim`.
static void copyAlongDim(size_t elt, const void *x, const int64_t *shape,
                         int rank, int dim, int64_t from, int64_t count,
                         int64_t outLen, int64_t to, void *out) {
  AxisView v = viewAround(shape, rank, dim);
  size_t row = size_t(v.inner) * elt;
  const char *src = static_cast<const char *>(x);
  char *block = static_cast<char *>(out);
  for (int64_t o = 0; o < v.outer; ++o, block += outLen * row) {
    std::memset(block, 0, to * row);
    std::memcpy(block + to * row, src + (o * v.len + from) * row, count * row);
    std::memset(block + (to + count) * row, 0, (outLen - to - count) * row);
  }
}

void fsdp_rt_embedding(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *table,
                       int64_t vocab, int64_t hidden, int64_t first_id,
                       fsdp_rt_dtype ids_dtype, const void *ids,
                       int64_t num_ids, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_EMBEDDING);
  size_t rowBytes = hidden * fsdp_rt_dtype_size(dtype);
  parallelFor(num_ids, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      char *row = static_cast<char *>(out) + i * rowBytes;
      int64_t id = loadIndex(ids_dtype, ids, i) - first_id;
      // Zero bits are zero in every element type.
      if (id < 0 || id >= vocab)
        std::memset(row, 0, rowBytes);
      else
        std::memcpy(row, static_cast<const char *>(table) + id * rowBytes,
                    rowBytes);
    }
  });
}

void fsdp_rt_transpose(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                       const int64_t *shape, int rank, const int64_t *perm,
                       void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  size_t elt = fsdp_rt_dtype_size(dtype);
  std::vector<int64_t> inStrides = stridesOf(shape, rank);
  // Walk the output in order; srcStrides[i] is how far the input moves when
  // output dim i advances.
  std::vector<int64_t> outShape(rank), srcStrides(rank), index(rank, 0);
  for (int i = 0; i < rank; ++i) {
    outShape[i] = shape[perm[i]];
    srcStrides[i] = inStrides[perm[i]];
  }
  int64_t n = numElements(shape, rank), src = 0;
  const char *in = static_cast<const char *>(x);
  char *o = static_cast<char *>(out);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(o + i * elt, in + src * elt, elt);
    advance(index, outShape.data(), srcStrides, src);
  }
}

void fsdp_rt_slice(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                   const int64_t *shape, int rank, int dim, int64_t start,
                   int64_t size, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  copyAlongDim(fsdp_rt_dtype_size(dtype), x, shape, rank, dim, start, size,
               size, 0, out);
}

void fsdp_rt_concat(fsdp_rt_stream, fsdp_rt_dtype dtype, int num_inputs,
                    const void *const *inputs, const int64_t *dim_sizes,
                    const int64_t *out_shape, int rank, int dim, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  size_t elt = fsdp_rt_dtype_size(dtype);
  AxisView v = viewAround(out_shape, rank, dim);
  int64_t outer = v.outer, inner = v.inner;
  char *o = static_cast<char *>(out);
  for (int64_t r = 0; r < outer; ++r) {
    for (int i = 0; i < num_inputs; ++i) {
      size_t chunk = dim_sizes[i] * inner * elt;
      std::memcpy(o, static_cast<const char *>(inputs[i]) + r * chunk, chunk);
      o += chunk;
    }
  }
}

/// Elements per thread below which copies and casts stay on one thread.
static constexpr int64_t kMoveGrain = 64 * kBlock;

void fsdp_rt_copy(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  size_t elt = fsdp_rt_dtype_size(dtype);
  parallelFor(numel, kMoveGrain, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char *>(out) + begin * elt,
                static_cast<const char *>(x) + begin * elt,
                (end - begin) * elt);
  });
}

void fsdp_rt_copy_2d(fsdp_rt_stream, void *dst, size_t dst_pitch,
                     const void *src, size_t src_pitch, size_t width,
                     size_t rows) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  for (size_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char *>(dst) + r * dst_pitch,
                static_cast<const char *>(src) + r * src_pitch, width);
}

// FSDP_RT_HOST_ADDRESSABLE=0 makes the host layer treat these buffers as a
// device's, never reading them in place, so that a CPU run takes (and
// tests) the host paths of a GPU run.
int fsdp_rt_host_addressable(void) {
  static const int addressable = [] {
    const char *value = std::getenv("FSDP_RT_HOST_ADDRESSABLE");
    return value && std::strcmp(value, "0") == 0 ? 0 : 1;
  }();
  return addressable;
}

void fsdp_rt_cast(fsdp_rt_stream, fsdp_rt_dtype src_dtype, const void *x,
                  fsdp_rt_dtype dst_dtype, int64_t numel, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  size_t srcSize = fsdp_rt_dtype_size(src_dtype),
         dstSize = fsdp_rt_dtype_size(dst_dtype);
  // Straight from one type to the other when either is f32, else through
  // an f32 block.
  parallelFor(numel, kMoveGrain, [&](int64_t begin, int64_t end) {
    const char *src = static_cast<const char *>(x) + begin * srcSize;
    char *dst = static_cast<char *>(out) + begin * dstSize;
    if (src_dtype == FSDP_RT_F32) {
      fromFloat(dst_dtype, reinterpret_cast<const float *>(src), end - begin,
                dst);
      return;
    }
    if (dst_dtype == FSDP_RT_F32) {
      toFloat(src_dtype, src, end - begin, reinterpret_cast<float *>(dst));
      return;
    }
    float block[kBlock];
    for (int64_t b = 0; b < end - begin; b += kBlock) {
      int64_t len = std::min(kBlock, end - begin - b);
      toFloat(src_dtype, src + b * srcSize, len, block);
      fromFloat(dst_dtype, block, len, dst + b * dstSize);
    }
  });
}

void fsdp_rt_embedding_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,
                            fsdp_rt_dtype ids_dtype, const void *ids,
                            int64_t num_ids, const void *dy, int64_t vocab,
                            int64_t hidden, int64_t first_id, void *dtable) {
  KernelTimer timer(FSDP_RT_KERNEL_EMBEDDING);
  FloatInput fdy(dtype, dy, num_ids * hidden);
  FloatOutput fo(dtype, dtable, vocab * hidden);
  float *table = fo.get();
  std::fill(table, table + vocab * hidden, 0.0f);
  for (int64_t i = 0; i < num_ids; ++i) {
    int64_t id = loadIndex(ids_dtype, ids, i) - first_id;
    if (id < 0 || id >= vocab)
      continue;
    float *row = table + id * hidden;
    const float *src = fdy.get() + i * hidden;
    for (int64_t j = 0; j < hidden; ++j)
      row[j] += src[j];
  }
  fo.finish();
}

void fsdp_rt_pad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *shape, int rank, int dim, int64_t before,
                 int64_t after, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_DATA_MOVEMENT);
  int64_t len = shape[dim < 0 ? dim + rank : dim];
  copyAlongDim(fsdp_rt_dtype_size(dtype), x, shape, rank, dim, 0, len,
               before + len + after, before, out);
}

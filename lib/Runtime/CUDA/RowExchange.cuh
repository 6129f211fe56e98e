//===- RowExchange.cuh - Rows by device counts, for all_to_all_v -*- CUDA -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// NCCL's host API takes sizes from the host, and all_to_all_v's counts are
// on the device, where reading them would stall the step. So the NCCL
// transport exchanges fixed blocks of `capacity` rows per member and these
// kernels move rows between the packed layout (member 0's rows, then
// member 1's, ...) and the blocks, reading the counts on the device: pack
// before the exchange, unpack (and zero the rest) after it. Written over
// Portable.cuh, so that the emulator runs them (emulated-kernels.test).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_ROWEXCHANGE_CUH
#define FSDP_LIB_RUNTIME_CUDA_ROWEXCHANGE_CUH

#include "Portable.cuh"

namespace fsdp::rt::cuda::rows {

constexpr int kRowThreads = 128;

/// Copies `bytes` from `src` to `dst` (or zeros `dst` when `src` is null)
/// with the block's threads.
PORTABLE_DEVICE void copyRow(const char *src, char *dst, int64_t bytes) {
  for (int64_t b = threadIdx.x; b < bytes; b += blockDim.x)
    dst[b] = src ? src[b] : char(0);
}

/// Block j of `dst` ([n, capacity] rows) gets member j's rows of the packed
/// `src`: the counts[j] rows after the first counts[0] + ... + counts[j-1],
/// at most `capacity` of them. One block of threads per destination row.
PORTABLE_KERNEL(kRowThreads)
void packRows(const char *src, const int64_t *counts, int n, int64_t capacity,
              int64_t rowBytes, char *dst) {
  for (int64_t slot = blockIdx.x; slot < n * capacity; slot += gridDim.x) {
    int64_t member = slot / capacity, k = slot % capacity, first = 0;
    for (int64_t j = 0; j < member; ++j)
      first += counts[j];
    if (k < counts[member])
      copyRow(src + (first + k) * rowBytes, dst + slot * rowBytes, rowBytes);
  }
}

/// Row r of the packed `dst` (`dstRows` of them) gets row r - first_i of
/// block i of `src` ([n, capacity] rows) for the member i whose rows it
/// falls among (first_i = counts[0] + ... + counts[i-1], each count capped
/// at `capacity`), or zeros past them all. One block per destination row.
PORTABLE_KERNEL(kRowThreads)
void unpackRows(const char *src, const int64_t *counts, int n,
                int64_t capacity, int64_t rowBytes, char *dst,
                int64_t dstRows) {
  for (int64_t r = blockIdx.x; r < dstRows; r += gridDim.x) {
    const char *from = nullptr;
    int64_t first = 0;
    for (int i = 0; i < n && !from; ++i) {
      int64_t count = counts[i] < capacity ? counts[i] : capacity;
      if (r < first + count)
        from = src + (i * capacity + r - first) * rowBytes;
      first += count;
    }
    copyRow(from, dst + r * rowBytes, rowBytes);
  }
}

/// Thread blocks for `rows` rows (the kernels stride over the rest).
inline unsigned rowGrid(int64_t rows) {
  return unsigned(rows < 1 ? 1 : rows < (1 << 20) ? rows : (1 << 20));
}

} // namespace fsdp::rt::cuda::rows

#endif // FSDP_LIB_RUNTIME_CUDA_ROWEXCHANGE_CUH

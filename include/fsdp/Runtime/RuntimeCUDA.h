/*===- RuntimeCUDA.h - What the CUDA backend adds to Runtime.h ----*- C -*-===*\
|*                                                                            *|
|* Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM     *|
|* Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception        *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

/* The CUDA stream behind an ABI stream, for code that queues its own work
 * (NCCL collectives) in the runtime's stream order, and the kernels the
 * NCCL transport queues. Only the CUDA backend defines them. */

#ifndef FSDP_RUNTIME_RUNTIMECUDA_H
#define FSDP_RUNTIME_RUNTIMECUDA_H

#include "fsdp/Runtime/Runtime.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA stream of `stream`; NULL names the compute stream. */
cudaStream_t fsdp_rt_cuda_stream(fsdp_rt_stream stream);

/* all_to_all_v over NCCL (RowExchange.cuh), on `stream`, with `counts` an
 * i64[n] in device memory. pack: block j of `dst` ([n, capacity] rows of
 * `row_bytes`) gets member j's rows of the packed `src` (the counts[j] rows
 * after those of members 0..j-1), at most `capacity`. unpack: the inverse,
 * into the packed `dst` of `dst_rows` rows, the rows past them zeroed. */
void fsdp_rt_cuda_pack_rows(fsdp_rt_stream stream, const void *src,
                            const int64_t *counts, int n, int64_t capacity,
                            int64_t row_bytes, void *dst);
void fsdp_rt_cuda_unpack_rows(fsdp_rt_stream stream, const void *src,
                              const int64_t *counts, int n, int64_t capacity,
                              int64_t row_bytes, void *dst, int64_t dst_rows);

#ifdef __cplusplus
}
#endif

#endif /* FSDP_RUNTIME_RUNTIMECUDA_H */

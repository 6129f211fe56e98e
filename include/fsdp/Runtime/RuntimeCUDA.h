/*===- RuntimeCUDA.h - What the CUDA backend adds to Runtime.h ----*- C -*-===*\
|*                                                                            *|
|* Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM     *|
|* Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception        *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

/* The CUDA stream behind an ABI stream, for code that queues its own work
 * (NCCL collectives) in the runtime's stream order. Only the CUDA backend
 * defines it. */

#ifndef FSDP_RUNTIME_RUNTIMECUDA_H
#define FSDP_RUNTIME_RUNTIMECUDA_H

#include "fsdp/Runtime/Runtime.h"

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA stream of `stream`; NULL names the compute stream. */
cudaStream_t fsdp_rt_cuda_stream(fsdp_rt_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* FSDP_RUNTIME_RUNTIMECUDA_H */

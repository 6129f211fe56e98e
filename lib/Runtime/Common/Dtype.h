//===- Dtype.h - A value per runtime element type ---------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What each library (oneDNN, MPI, NCCL, cuBLAS) calls an element type, and
// the types' sizes, as one table per library instead of one switch each.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_DTYPE_H
#define FSDP_LIB_RUNTIME_COMMON_DTYPE_H

#include "fsdp/Runtime/Runtime.h"

namespace fsdp::rt {

/// One value per `fsdp_rt_dtype`, read by the dtype.
template <typename T> struct DtypeTable {
  T f32, bf16, f16, i32, i64;

  T operator[](fsdp_rt_dtype dtype) const {
    switch (dtype) {
    case FSDP_RT_BF16:
      return bf16;
    case FSDP_RT_F16:
      return f16;
    case FSDP_RT_I32:
      return i32;
    case FSDP_RT_I64:
      return i64;
    default:
      return f32;
    }
  }
};

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_DTYPE_H

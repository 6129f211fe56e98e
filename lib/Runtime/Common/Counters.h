//===- Counters.h - The runtime counters both backends fill -----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The counters behind Runtime.h's fsdp_rt_collective_*, fsdp_rt_kernel_*
// and fsdp_rt_host_syncs, kept once for both backends: Counters.cpp defines
// the ABI functions that only read them, and each backend adds to them
// where its work happens (a CPU kernel's timer, the CUDA timing events, a
// wait of the host) and defines the ones that must first settle its own
// state (CUDA reads pending timing events before the kernel times).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_COUNTERS_H
#define FSDP_LIB_RUNTIME_COMMON_COUNTERS_H

#include "fsdp/Runtime/Runtime.h"

#include <cstdint>

namespace fsdp::rt::counters {

/// One kernel call of class `cls` (its time comes apart, when known).
void addKernelCall(fsdp_rt_kernel_class cls);
/// `nanos` of kernel time of class `cls`, and of the ABI function `name`
/// (its row of fsdp_rt_kernel_profile).
void addKernelTime(fsdp_rt_kernel_class cls, const char *name, int64_t nanos);
/// One wait of the host for the backend.
void addHostSync();
/// `pairs` query-key pairs scored by a forward attention.
void addAttentionPairs(int64_t pairs);
/// The kernel time counted for `cls` so far.
int64_t kernelTime(fsdp_rt_kernel_class cls);
/// Zeroes every counter and the profile (fsdp_rt_counters_reset).
void reset();

} // namespace fsdp::rt::counters

#endif // FSDP_LIB_RUNTIME_COMMON_COUNTERS_H

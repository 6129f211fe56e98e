//===- Profile.h - Kernel time per ABI function ----------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The table behind fsdp_rt_kernel_profile: calls and nanoseconds per name,
// added by each backend where it adds a call's time to its kernel class
// (the CPU timer when it closes, the CUDA timing events when they are
// read), so both backends report the same way.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_PROFILE_H
#define FSDP_LIB_RUNTIME_COMMON_PROFILE_H

#include <cstdint>

namespace fsdp::rt {

/// Adds one call of `nanos` nanoseconds to `name`'s row.
void profileAdd(const char *name, int64_t nanos);
/// Drops every row (fsdp_rt_counters_reset).
void profileReset();
/// fsdp_rt_kernel_profile on the table: rows by total time, longest first.
int profileRead(int max, const char **names, int64_t *calls, int64_t *timeNs);

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_PROFILE_H

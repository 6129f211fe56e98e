//===- Counters.cpp - The runtime counters both backends fill -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Counters.h"
#include "Dtype.h"
#include "Profile.h"

#include <atomic>

namespace {
constexpr int kNumMasks = 1 << FSDP_RT_MAX_MESH_AXES;
std::atomic<int64_t> collectiveBytes[FSDP_RT_NUM_COLLECTIVE_KINDS][kNumMasks];
std::atomic<int64_t> collectiveCalls[FSDP_RT_NUM_COLLECTIVE_KINDS][kNumMasks];
std::atomic<int64_t> kernelNanos[FSDP_RT_NUM_KERNEL_CLASSES];
std::atomic<int64_t> kernelCalls[FSDP_RT_NUM_KERNEL_CLASSES];
std::atomic<int64_t> hostSyncs{0};
std::atomic<int64_t> attentionPairs{0};
} // namespace

void fsdp::rt::counters::addKernelCall(fsdp_rt_kernel_class cls) {
  kernelCalls[cls] += 1;
}

void fsdp::rt::counters::addKernelTime(fsdp_rt_kernel_class cls,
                                       const char *name, int64_t nanos) {
  kernelNanos[cls] += nanos;
  profileAdd(name, nanos);
}

void fsdp::rt::counters::addHostSync() { hostSyncs += 1; }

void fsdp::rt::counters::addAttentionPairs(int64_t pairs) {
  attentionPairs += pairs;
}

int64_t fsdp::rt::counters::kernelTime(fsdp_rt_kernel_class cls) {
  return kernelNanos[cls].load();
}

void fsdp::rt::counters::reset() {
  for (auto &row : collectiveBytes)
    for (auto &c : row)
      c = 0;
  for (auto &row : collectiveCalls)
    for (auto &c : row)
      c = 0;
  for (auto &c : kernelNanos)
    c = 0;
  for (auto &c : kernelCalls)
    c = 0;
  hostSyncs = 0;
  attentionPairs = 0;
  profileReset();
}

void fsdp_rt_count_collective(fsdp_rt_collective_kind kind, uint32_t axis_mask,
                              int64_t bytes) {
  collectiveBytes[kind][axis_mask % kNumMasks] += bytes;
  collectiveCalls[kind][axis_mask % kNumMasks] += 1;
}

int64_t fsdp_rt_collective_bytes(fsdp_rt_collective_kind kind,
                                 uint32_t axis_mask) {
  return collectiveBytes[kind][axis_mask % kNumMasks].load();
}

int64_t fsdp_rt_collective_calls(fsdp_rt_collective_kind kind,
                                 uint32_t axis_mask) {
  return collectiveCalls[kind][axis_mask % kNumMasks].load();
}

int64_t fsdp_rt_kernel_calls(fsdp_rt_kernel_class cls) {
  return kernelCalls[cls].load();
}

int64_t fsdp_rt_host_syncs(void) { return hostSyncs.load(); }

int64_t fsdp_rt_attention_pairs(void) { return attentionPairs.load(); }

size_t fsdp_rt_dtype_size(fsdp_rt_dtype dtype) {
  constexpr fsdp::rt::DtypeTable<size_t> sizes{4, 2, 2, 4, 8};
  return sizes[dtype];
}

//===- Threads.cpp - Threads per rank -------------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Threads.h"

#include <algorithm>
#include <sched.h>
#include <sys/sysinfo.h>

int fsdp::rt::threadsPerRank(int localRanks) {
  int share = get_nprocs() / std::max(1, localRanks);
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
    share = std::min(share, CPU_COUNT(&mask));
  return std::max(1, share);
}

//===- Threads.h - Threads per rank ----------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// How many threads one rank computes with on the host, when OMP_NUM_THREADS
// does not say: the CPU backend's kernels (OpenMP) and the host optimizer's
// thread team (CPU offload) count the same way.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_THREADS_H
#define FSDP_LIB_RUNTIME_COMMON_THREADS_H

namespace fsdp::rt {

/// The node's processors shared among its `localRanks` ranks, and no more
/// than this process may run on: a launcher that binds each rank to a core
/// (Open MPI's default up to 2 ranks) or a socket sets that mask, and
/// threads beyond it would only take turns. At least 1.
int threadsPerRank(int localRanks);

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_THREADS_H

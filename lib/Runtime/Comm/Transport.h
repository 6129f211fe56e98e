//===- Transport.h - What the collectives ask of a transport ----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The collectives have one front end (Collectives.cpp: the program ABI's
// fsdp_op_<name>_start and fsdp_op_<name> for each line of Collectives.def,
// their argument checks, the counters, how blocks are laid out and staged)
// over one transport, linked in its place: MPI.cpp on the host (the CPU
// runtime) or NCCL.cpp on GPUs. A transport owns the futures (fsdp_future),
// moves bytes within a group and finishes collectives in fsdp_wait; this
// header is all the front end uses of it.
//
// A collective runs as: open (the future, its result, the input held until
// the wait), stage (buffers that live until the wait), launch (the data
// movement from here on is ordered after the work queued so far), the
// swaps and transfers, in order, then started. reduceScatter, allReduce and
// exchangeRows stage and launch on their own: how they stage (widened
// floats, padded row blocks) is the transport's.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMM_TRANSPORT_H
#define FSDP_LIB_RUNTIME_COMM_TRANSPORT_H

#include "../Host/Host.h"

#include <vector>

namespace fsdp::comm {

/// Opens the future of collective `op` over `g` (`mask`: its axes, for
/// messages): a new result tensor of type `r`, and a reference to `x` that
/// is released after the wait.
fsdp_future *open(const char *op, const host::Group &g, uint32_t mask,
                  const fsdp_type &r, fsdp_tensor *x);
/// The tensor `f` yields at its wait.
fsdp_tensor *resultOf(fsdp_future *f);
/// A staging buffer of `bytes`, freed after the wait.
char *stage(fsdp_future *f, int64_t bytes);
/// Orders the data movement that follows after the work queued so far
/// (NCCL: the group's stream waits on the compute stream).
void launch(fsdp_future *f);

/// Views `src` as [a, b, piece] bytes and writes it as [b, a, piece] at
/// `dst`, in order with the transfer: before it, or once it has completed
/// (`afterTransfer`).
void swapBlocks(fsdp_future *f, bool afterTransfer, const void *src, void *dst,
                int64_t a, int64_t b, int64_t piece);

/// `bytes` from every member, in group order, at `dst`.
void allGather(fsdp_future *f, const void *src, void *dst, int64_t bytes);
/// The root's `bytes` at `dst` on every member (`src`: the root's).
void broadcast(fsdp_future *f, const void *src, void *dst, int64_t bytes,
               int root);

/// One member's part of an exchange: what goes to it and what comes from
/// it (either may be empty).
struct PeerBlock {
  int peer;
  const void *send;
  int64_t sendBytes;
  void *recv;
  int64_t recvBytes;
};
/// Point-to-point transfers with the members of `blocks`, all in flight at
/// once (a member may be this rank).
void exchange(fsdp_future *f, const std::vector<PeerBlock> &blocks);

/// reduce_scatter of `x` into the result with `reduction`; `outer` result
/// elements come before the scatter dim (blocks to rearrange when > 1).
void reduceScatter(fsdp_future *f, const fsdp_tensor *x, int64_t outer,
                   fsdp_reduction reduction);
/// all_reduce of `x` into the result with `reduction`.
void allReduce(fsdp_future *f, const fsdp_tensor *x, fsdp_reduction reduction);
/// all_to_all_v: rows of `rowBytes` of `x` out by `sendCounts`, into the
/// result by `recvCounts` (i64 tensors of the group size), the result's
/// rows past them zero. Returns the bytes it sends to other members, for
/// the counters.
int64_t exchangeRows(fsdp_future *f, const fsdp_tensor *x,
                     const fsdp_tensor *sendCounts,
                     const fsdp_tensor *recvCounts, int64_t rowBytes);

/// Ends the start of `f` (an asynchronous one goes to the transport's
/// progress engine) and returns it.
fsdp_future *started(fsdp_program &p, fsdp_future *f);
/// Brackets the start of a collective the caller waits at once (the
/// synchronous forms); the transport may skip what overlap needs.
void markSynchronous(bool on);

} // namespace fsdp::comm

#endif // FSDP_LIB_RUNTIME_COMM_TRANSPORT_H

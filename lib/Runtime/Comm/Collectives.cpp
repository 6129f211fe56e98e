//===- Collectives.cpp - The collectives' front end -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The program ABI's collectives (Collectives.def), whatever the transport:
// each start checks its operands against the result type and the group,
// counts the bytes it sends (Accounting.h's rules, which the compiler's
// reports use too), lays blocks out so that the transport moves contiguous
// ones, and hands the transfer to the transport (Transport.h). The
// synchronous forms are a start waited at once.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"

#include "fsdp/Runtime/Accounting.h"

using namespace fsdp::host;
using fsdp::accounting::Collective;
namespace accounting = fsdp::accounting;
namespace comm = fsdp::comm;

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

namespace {

/// Checks every collective makes of its operand `x` and result type `r`.
void checkOperand(const char *op, const fsdp_type &r, const fsdp_tensor *x) {
  if (!x)
    fail(op, "operand is null");
  if (r.dtype != x->type.dtype)
    fail(op, "result is " + typeString(r) + " but operand is " +
                 typeString(x->type));
}

/// Fails unless `dim` is a dim of `x`.
void checkDim(const char *op, const fsdp_type &x, int64_t dim) {
  if (dim < 0 || dim >= x.rank)
    fail(op,
         "dim " + std::to_string(dim) + " out of range for " + typeString(x));
}

/// Fails unless `r` is `x` with dim `dim` multiplied by `mul` (`dim` < 0:
/// equal to `x`).
void checkScaledDim(const char *op, const fsdp_type &r, const fsdp_type &x,
                    int64_t dim, int64_t mul) {
  bool ok = r.rank == x.rank && dim < x.rank;
  for (int64_t i = 0; ok && i < x.rank; ++i)
    ok = r.dims[i] == (i == dim ? x.dims[i] * mul : x.dims[i]);
  if (ok)
    return;
  if (dim < 0)
    fail(op, "result " + typeString(r) + " differs from " + typeString(x));
  fail(op, typeString(r) + " is not " + typeString(x) + " with dim " +
               std::to_string(dim) + " times the group size " +
               std::to_string(mul));
}

/// Fails unless `r` holds rows (dim 0) of `x`: the same dims but the first.
void checkRows(const char *op, const fsdp_type &r, const fsdp_type &x) {
  bool ok = x.rank >= 1 && r.rank == x.rank;
  for (int64_t i = 1; ok && i < x.rank; ++i)
    ok = r.dims[i] == x.dims[i];
  if (!ok)
    fail(op, "result " + typeString(r) + " is not rows of " + typeString(x));
}

/// The type of the block an all-to-all over `n` ranks sends each peer;
/// fails unless `x` splits along `splitDim` and `r` is the blocks joined
/// along `concatDim`.
fsdp_type allToAllBlock(const char *op, const fsdp_type &r, const fsdp_type &x,
                        int64_t n, int64_t splitDim, int64_t concatDim) {
  if (splitDim < 0 || splitDim >= x.rank || concatDim < 0 ||
      concatDim >= x.rank || x.dims[splitDim] % n != 0)
    fail(op, "cannot split dim " + std::to_string(splitDim) + " of " +
                 typeString(x) + " into " + std::to_string(n) +
                 " blocks and join along dim " + std::to_string(concatDim));
  fsdp_type block = x;
  block.dims[splitDim] /= n;
  fsdp_type want = block;
  want.dims[concatDim] *= n;
  checkScaledDim(op, r, want, -1, 1);
  return block;
}

/// Fails unless `counts` (`what`) is an i64 tensor of one count per member
/// of a group of `n`.
void checkCounts(const char *op, const char *what, const fsdp_tensor *counts,
                 int64_t n) {
  if (!counts)
    fail(op, std::string(what) + " is null");
  if (counts->type.dtype != FSDP_RT_I64 || counts->type.rank != 1 ||
      counts->type.dims[0] != n)
    fail(op, std::string(what) + " is " + typeString(counts->type) +
                 ", expected i64[" + std::to_string(n) +
                 "] (a count per member of the group)");
}

/// The product of the first `n` of `dims`.
int64_t leadingProduct(const int64_t *dims, int64_t n) {
  int64_t p = 1;
  for (int64_t i = 0; i < n; ++i)
    p *= dims[i];
  return p;
}

/// Adds one call sending `bytes` to the counters of (`kind`, `mask`).
void count(Collective kind, uint32_t mask, int64_t bytes) {
  fsdp_rt_count_collective(fsdp_rt_collective_kind(kind), mask, bytes);
}

/// What every start does first: the group, the operand check, the future,
/// and the counters by the kind's traffic (a routed collective's bytes are
/// known only to its transport, which returns them).
struct Start {
  const char *op;
  const Group &g;
  fsdp_future *f;

  Start(fsdp_program *p, Collective kind, const fsdp_type &r, fsdp_tensor *x,
        uint32_t mask)
      : op(accounting::nameOf(kind)), g(groupOf(*p, op, mask)) {
    checkOperand(op, r, x);
    // Reductions, shifts and broadcasts keep their operand's shape.
    accounting::Traffic traffic = accounting::trafficOf(kind);
    if (traffic == accounting::Traffic::Reduce ||
        traffic == accounting::Traffic::Shift ||
        traffic == accounting::Traffic::Root)
      checkScaledDim(op, r, x->type, -1, 1);
    f = comm::open(op, g, mask, r, x);
    if (traffic != accounting::Traffic::Routed)
      count(kind, mask, accounting::bytesSent(kind, byteSize(x->type), g.size));
  }

  char *result() const { return static_cast<char *>(comm::resultOf(f)->data); }
};

} // namespace

//===----------------------------------------------------------------------===//
// Starts
//===----------------------------------------------------------------------===//

fsdp_future *fsdp_op_all_gather_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t dim) {
  Start s(p, Collective::AllGather, r, x, axis_mask);
  checkDim(s.op, x->type, dim);
  checkScaledDim(s.op, r, x->type, dim, s.g.size);
  // Blocks arrive as [n, x]; along dim d > 0 they are [n, outer, piece] and
  // the result is [outer, n, piece].
  int64_t bytes = byteSize(x->type);
  int64_t outer = leadingProduct(x->type.dims, dim);
  accounting::Staging staging =
      accounting::allGatherStaging(byteSize(r), outer);
  char *recv = staging.recv ? comm::stage(s.f, staging.recv) : nullptr;
  comm::launch(s.f);
  comm::allGather(s.f, x->data, recv ? recv : s.result(), bytes);
  if (recv)
    comm::swapBlocks(s.f, true, recv, s.result(), s.g.size, outer,
                     outer ? bytes / outer : 0);
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_reduce_scatter_start(fsdp_program *p, fsdp_type r,
                                          fsdp_tensor *x, uint32_t axis_mask,
                                          fsdp_reduction reduction,
                                          int64_t dim) {
  Start s(p, Collective::ReduceScatter, r, x, axis_mask);
  checkDim(s.op, x->type, dim);
  checkScaledDim(s.op, x->type, r, dim, s.g.size);
  // Block i (member i's part) must be contiguous: [outer, n, piece] ->
  // [n, outer, piece].
  comm::reduceScatter(s.f, x, leadingProduct(r.dims, dim), reduction);
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_all_reduce_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      fsdp_reduction reduction) {
  Start s(p, Collective::AllReduce, r, x, axis_mask);
  comm::allReduce(s.f, x, reduction);
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_all_to_all_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t split_dim, int64_t concat_dim) {
  Start s(p, Collective::AllToAll, r, x, axis_mask);
  int64_t n = s.g.size;
  const fsdp_type &in = x->type;
  // The block each rank sends to one peer.
  fsdp_type block = allToAllBlock(s.op, r, in, n, split_dim, concat_dim);
  int64_t bytes = byteSize(in), blockBytes = bytes / n;
  // Send side: [outer, n, piece] along split_dim -> [n, outer, piece];
  // receive side: [n, outer, piece] -> [outer, n, piece] along concat_dim.
  int64_t outer = leadingProduct(in.dims, split_dim);
  int64_t outerRecv = leadingProduct(block.dims, concat_dim);
  accounting::Staging staging =
      accounting::allToAllStaging(bytes, n, outer, outerRecv);
  char *send = staging.send ? comm::stage(s.f, staging.send) : nullptr;
  char *recv = staging.recv ? comm::stage(s.f, staging.recv) : nullptr;
  comm::launch(s.f);
  const char *src = static_cast<const char *>(x->data);
  if (send) {
    comm::swapBlocks(s.f, false, src, send, outer, n, blockBytes / outer);
    src = send;
  }
  char *dst = recv ? recv : s.result();
  std::vector<comm::PeerBlock> blocks;
  for (int peer = 0; peer < n; ++peer)
    blocks.push_back({peer, src + peer * blockBytes, blockBytes,
                      dst + peer * blockBytes, blockBytes});
  comm::exchange(s.f, blocks);
  if (recv)
    comm::swapBlocks(s.f, true, recv, s.result(), n, outerRecv,
                     blockBytes / outerRecv);
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_permute_start(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                   uint32_t axis_mask, int64_t offset) {
  Start s(p, Collective::Permute, r, x, axis_mask);
  int64_t bytes = byteSize(x->type), n = s.g.size;
  int64_t shift = ((offset % n) + n) % n;
  int to = int((s.g.rank + shift) % n), from = int((s.g.rank - shift + n) % n);
  comm::launch(s.f);
  if (to == from)
    comm::exchange(s.f, {{to, x->data, bytes, s.result(), bytes}});
  else
    comm::exchange(s.f, {{from, nullptr, 0, s.result(), bytes},
                         {to, x->data, bytes, nullptr, 0}});
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_broadcast_start(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *x, uint32_t axis_mask,
                                     int64_t root) {
  Start s(p, Collective::Broadcast, r, x, axis_mask);
  if (root < 0 || root >= s.g.size)
    fail(s.op, "root " + std::to_string(root) + " is not in a group of " +
                   std::to_string(s.g.size));
  comm::launch(s.f);
  comm::broadcast(s.f, x->data, s.result(), byteSize(x->type), int(root));
  return comm::started(*p, s.f);
}

fsdp_future *fsdp_op_all_to_all_v_start(fsdp_program *p, fsdp_type r,
                                        fsdp_tensor *x,
                                        fsdp_tensor *send_counts,
                                        fsdp_tensor *recv_counts,
                                        uint32_t axis_mask) {
  Start s(p, Collective::AllToAllV, r, x, axis_mask);
  checkRows(s.op, r, x->type);
  checkCounts(s.op, "send_counts", send_counts, s.g.size);
  checkCounts(s.op, "recv_counts", recv_counts, s.g.size);
  fsdp_type row = x->type;
  row.dims[0] = 1;
  count(Collective::AllToAllV, axis_mask,
        comm::exchangeRows(s.f, x, send_counts, recv_counts, byteSize(row)));
  return comm::started(*p, s.f);
}

//===----------------------------------------------------------------------===//
// Synchronous forms
//===----------------------------------------------------------------------===//

// Each is its start, waited at once.
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS)               \
  fsdp_tensor *fsdp_op_##name(fsdp_program *p, fsdp_type r,                    \
                              fsdp_tensor *x FSDP_UNPARENTHESIZE PARAMS) {     \
    comm::markSynchronous(true);                                               \
    fsdp_future *f = fsdp_op_##name##_start(p, r, x FSDP_UNPARENTHESIZE ARGS); \
    comm::markSynchronous(false);                                              \
    return fsdp_wait(p, f);                                                    \
  }
#include "fsdp/Runtime/Collectives.def"

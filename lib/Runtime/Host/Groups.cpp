//===- Groups.cpp - Communicators and the collectives' shared checks -----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What every collectives backend (MPI on the host, NCCL on GPUs) shares: one
// MPI communicator per declared axis set, split from MPI_COMM_WORLD once,
// the checks of each collective's operands, and the rank-dependent local
// ops.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

using namespace fsdp::host;

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

void fsdp::host::createGroups(fsdp_program &p) {
  // Rank = row-major index of the mesh coordinates, last axis fastest.
  int64_t rest = p.worldRank;
  p.coords.assign(p.axes.size(), 0);
  for (int64_t i = int64_t(p.axes.size()) - 1; i >= 0; --i) {
    p.coords[i] = rest % p.axes[i].size;
    rest /= p.axes[i].size;
  }
  for (uint32_t mask : p.groupMasks) {
    // Ranks sharing every coordinate outside the mask form one group,
    // ordered row-major over the masked axes.
    int64_t color = 0, key = 0;
    for (size_t i = 0; i < p.axes.size(); ++i) {
      if (mask & (1u << i))
        key = key * p.axes[i].size + p.coords[i];
      else
        color = color * p.axes[i].size + p.coords[i];
    }
    Group g;
    MPI_Comm_split(MPI_COMM_WORLD, int(color), int(key), &g.comm);
    MPI_Comm_size(g.comm, &g.size);
    MPI_Comm_rank(g.comm, &g.rank);
    p.groups[mask] = g;
  }
  // After the device is chosen: the pinned copies belong to it.
  startCommunication(p);
  for (auto &[mask, g] : p.groups) {
    g.rankHost = static_cast<int64_t *>(fsdp_rt_host_alloc(sizeof(int64_t)));
    if (!g.rankHost)
      failAll(p, "groups", "out of host memory");
    *g.rankHost = g.rank;
  }
}

void fsdp::host::freeGroups(fsdp_program &p) {
  stopCommunication(p);
  for (auto &[mask, g] : p.groups) {
    MPI_Comm_free(&g.comm);
    fsdp_rt_host_free(g.rankHost);
  }
  p.groups.clear();
}

//===----------------------------------------------------------------------===//
// Checks
//===----------------------------------------------------------------------===//

const Group &fsdp::host::groupOf(const fsdp_program &p, const char *op,
                                 uint32_t mask) {
  auto it = p.groups.find(mask);
  if (it == p.groups.end())
    fail(op, "no communicator for axis mask " + std::to_string(mask) +
                 " (declare it with fsdp_prog_group)");
  return it->second;
}

void fsdp::host::checkOperand(const char *op, const fsdp_type &r,
                              const fsdp_tensor *x) {
  if (!x)
    fail(op, "operand is null");
  if (r.dtype != x->type.dtype)
    fail(op, "result is " + typeString(r) + " but operand is " +
                 typeString(x->type));
}

void fsdp::host::checkDim(const char *op, const fsdp_type &x, int64_t dim) {
  if (dim < 0 || dim >= x.rank)
    fail(op,
         "dim " + std::to_string(dim) + " out of range for " + typeString(x));
}

void fsdp::host::checkScaledDim(const char *op, const fsdp_type &r,
                                const fsdp_type &x, int64_t dim, int64_t mul) {
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

fsdp_type fsdp::host::allToAllBlock(const char *op, const fsdp_type &r,
                                    const fsdp_type &x, int64_t n,
                                    int64_t splitDim, int64_t concatDim) {
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

void fsdp::host::checkRoot(const char *op, const Group &g, int64_t root) {
  if (root < 0 || root >= g.size)
    fail(op, "root " + std::to_string(root) + " is not in a group of " +
                 std::to_string(g.size));
}

int64_t fsdp::host::leadingProduct(const int64_t *dims, int64_t n) {
  int64_t p = 1;
  for (int64_t i = 0; i < n; ++i)
    p *= dims[i];
  return p;
}

//===----------------------------------------------------------------------===//
// Synchronous forms
//===----------------------------------------------------------------------===//

namespace {
/// Runs `start` as a synchronous collective: started and waited at once.
template <typename Start>
fsdp_tensor *synchronously(fsdp_program *p, Start start) {
  markSynchronous(true);
  fsdp_future *f = start();
  markSynchronous(false);
  return fsdp_wait(p, f);
}
} // namespace

fsdp_tensor *fsdp_op_all_gather(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                uint32_t axis_mask, int64_t dim) {
  return synchronously(
      p, [&] { return fsdp_op_all_gather_start(p, r, x, axis_mask, dim); });
}

fsdp_tensor *fsdp_op_reduce_scatter(fsdp_program *p, fsdp_type r,
                                    fsdp_tensor *x, uint32_t axis_mask,
                                    fsdp_reduction reduction, int64_t dim) {
  return synchronously(p, [&] {
    return fsdp_op_reduce_scatter_start(p, r, x, axis_mask, reduction, dim);
  });
}

fsdp_tensor *fsdp_op_all_reduce(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                uint32_t axis_mask, fsdp_reduction reduction) {
  return synchronously(p, [&] {
    return fsdp_op_all_reduce_start(p, r, x, axis_mask, reduction);
  });
}

fsdp_tensor *fsdp_op_all_to_all(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                uint32_t axis_mask, int64_t split_dim,
                                int64_t concat_dim) {
  return synchronously(p, [&] {
    return fsdp_op_all_to_all_start(p, r, x, axis_mask, split_dim, concat_dim);
  });
}

fsdp_tensor *fsdp_op_permute(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                             uint32_t axis_mask, int64_t offset) {
  return synchronously(
      p, [&] { return fsdp_op_permute_start(p, r, x, axis_mask, offset); });
}

fsdp_tensor *fsdp_op_broadcast(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                               uint32_t axis_mask, int64_t root) {
  return synchronously(
      p, [&] { return fsdp_op_broadcast_start(p, r, x, axis_mask, root); });
}

//===----------------------------------------------------------------------===//
// Rank-dependent local ops
//===----------------------------------------------------------------------===//

fsdp_tensor *fsdp_op_axis_index(fsdp_program *p, fsdp_type r,
                                uint32_t axis_mask) {
  const Group &g = groupOf(*p, "axis_index", axis_mask);
  if (r.dtype != FSDP_RT_I64 || r.rank != 0)
    fail("axis_index", "result is " + typeString(r) + ", expected i64[]");
  fsdp_tensor *out = fsdp_tensor_new(p, r);
  fsdp_rt_copy_to_device(nullptr, out->data, g.rankHost, sizeof(int64_t));
  out->hostKnown = true;
  out->hostValue = double(g.rank);
  return out;
}

fsdp_tensor *fsdp_op_all_slice(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                               uint32_t axis_mask, int64_t dim) {
  const Group &g = groupOf(*p, "all_slice", axis_mask);
  if (dim < 0 || dim >= x->type.rank || r.rank != x->type.rank ||
      r.dims[dim] * g.size != x->type.dims[dim])
    fail("all_slice", "result " + typeString(r) + " is not a block of " +
                          typeString(x->type) + " along dim " +
                          std::to_string(dim) + " over " +
                          std::to_string(g.size) + " ranks");
  return fsdp_op_slice(p, r, x, dim, int64_t(g.rank) * r.dims[dim]);
}

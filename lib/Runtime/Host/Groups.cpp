//===- Groups.cpp - Communicators and the rank-dependent local ops --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What every collectives transport (MPI on the host, NCCL on GPUs) shares:
// one MPI communicator per declared axis set, split from MPI_COMM_WORLD
// once, and the rank-dependent local ops. The collectives themselves are
// lib/Runtime/Comm.
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
// Groups
//===----------------------------------------------------------------------===//

const Group &fsdp::host::groupOf(const fsdp_program &p, const char *op,
                                 uint32_t mask) {
  auto it = p.groups.find(mask);
  if (it == p.groups.end())
    fail(op, "no communicator for axis mask " + std::to_string(mask) +
                 " (declare it with fsdp_prog_group)");
  return it->second;
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

//===- Layout.cpp - Where a rank's block sits in the whole tensor ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A block of a sharded tensor is a set of runs: each run of the last local
// dim within one group is contiguous in the whole row-major tensor.
// Initialization, loading Hugging Face weights and resharding checkpoints
// all walk these runs, so a rank touches only its own elements.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

using namespace fsdp::host;

std::vector<Run> fsdp::host::runsOf(const Layout &l) {
  int64_t rank = int64_t(l.local.size());
  if (rank == 0)
    return {{0, 0, 1}};
  // Local index i of dim d is element g·(whole/groups) + block·piece + j of
  // the whole dim, where piece = local/groups, g = i / piece, j = i % piece.
  auto global = [&](int64_t d, int64_t i) {
    int64_t piece = l.local[d] / l.groups[d];
    return (i / piece) * (l.whole[d] / l.groups[d]) + l.block[d] * piece +
           i % piece;
  };
  int64_t last = l.local[rank - 1];
  int64_t runs = l.groups[rank - 1];
  int64_t run = last / runs;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d)
    rows *= l.local[d];
  std::vector<Run> out;
  if (last == 0)
    return out;
  std::vector<int64_t> coord(size_t(rank), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
      coord[d] = rest % l.local[d];
      rest /= l.local[d];
    }
    bool padding = false;
    for (int64_t d = 0; d + 1 < rank; ++d)
      padding |= global(d, coord[d]) >= l.whole[d];
    if (padding)
      continue;
    for (int64_t k = 0; k < runs; ++k) {
      int64_t first = global(rank - 1, k * run), begin = 0;
      for (int64_t d = 0; d < rank; ++d)
        begin = begin * l.whole[d] + (d == rank - 1 ? first : global(d, coord[d]));
      int64_t count = std::min(run, l.whole[rank - 1] - first);
      if (count <= 0)
        continue;
      // Runs contiguous in both the block and the whole tensor merge.
      Run next{r * last + k * run, begin, count};
      if (!out.empty() && out.back().local + out.back().count == next.local &&
          out.back().global + out.back().count == next.global)
        out.back().count += count;
      else
        out.push_back(next);
    }
  }
  return out;
}

const Param &fsdp::host::layoutOwner(const fsdp_program &p,
                                     const Param &param) {
  // An optimizer state `<param>.<state>` has its parameter's block shape.
  if (param.state)
    for (const Param &other : p.params)
      if (!other.state && param.name.size() > other.name.size() &&
          param.name.compare(0, other.name.size() + 1, other.name + ".") == 0 &&
          other.type.rank == param.type.rank &&
          std::equal(other.type.dims, other.type.dims + other.type.rank,
                     param.type.dims))
        return other;
  return param;
}

Layout fsdp::host::layoutOf(const fsdp_program &p, const Param &param) {
  const Param *owner = &layoutOwner(p, param);
  Layout l;
  int64_t rank = param.type.rank;
  l.local.assign(param.type.dims, param.type.dims + rank);
  if (owner->globalDims.empty()) {
    l.whole = l.local;
    l.groups.assign(size_t(rank), 1);
    l.block.assign(size_t(rank), 0);
    return l;
  }
  l.whole = owner->globalDims;
  l.groups = owner->dimGroups;
  for (int64_t d = 0; d < rank; ++d)
    l.block.push_back(blockIndex(p, owner->dimOrder[d]));
  return l;
}

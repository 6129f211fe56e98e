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

#include <algorithm>

using namespace fsdp::host;

namespace {

/// The size of an outer block of dim `d`: a plain split rounds up (the
/// last blocks end in padding, a vocabulary that tp does not divide).
int64_t outerSize(const Layout &l, size_t d) {
  return l.groups[d] == 1 ? (l.whole[d] + l.outerParts[d] - 1) / l.outerParts[d]
                          : l.whole[d] / l.outerParts[d];
}

/// The whole tensor's index of local index `i` of dim `d`, or -1 in the
/// padding of either level.
int64_t globalIndex(const Layout &l, size_t d, int64_t i) {
  int64_t size = outerSize(l, d);
  int64_t piece = size / l.groups[d];
  int64_t t = l.inner[d] * l.local[d] + i;
  if (t >= size)
    return -1;
  int64_t g =
      (t / piece) * (l.whole[d] / l.groups[d]) + l.outer[d] * piece + t % piece;
  return g < l.whole[d] ? g : -1;
}

} // namespace

std::vector<Run> fsdp::host::runsOf(const Layout &l) {
  size_t rank = l.local.size();
  if (rank == 0)
    return {{0, 0, 1}};
  size_t lastDim = rank - 1;
  int64_t last = l.local[lastDim];
  int64_t rows = 1;
  for (size_t d = 0; d < lastDim; ++d)
    rows *= l.local[d];
  std::vector<Run> out;
  if (last == 0)
    return out;
  int64_t size = outerSize(l, lastDim);
  int64_t piece = size / l.groups[lastDim];
  std::vector<int64_t> coord(rank, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, rowStart = 0;
    bool padding = false;
    for (size_t d = lastDim; d-- > 0;) {
      coord[d] = rest % l.local[d];
      rest /= l.local[d];
    }
    for (size_t d = 0; d < lastDim; ++d) {
      int64_t g = globalIndex(l, d, coord[d]);
      padding |= g < 0;
      rowStart = rowStart * l.whole[d] + g;
    }
    if (padding)
      continue;
    // The last dim in segments: each ends at a group piece, or the padding.
    for (int64_t i = 0; i < last;) {
      int64_t t = l.inner[lastDim] * last + i;
      int64_t g = globalIndex(l, lastDim, i);
      if (g < 0)
        break;
      int64_t count = std::min(
          {last - i, size - t, piece - t % piece, l.whole[lastDim] - g});
      Run next{r * last + i, rowStart * l.whole[lastDim] + g, count};
      // Runs contiguous in both the block and the whole tensor merge.
      if (!out.empty() && out.back().local + out.back().count == next.local &&
          out.back().global + out.back().count == next.global)
        out.back().count += count;
      else
        out.push_back(next);
      i += count;
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
  const Param &owner = layoutOwner(p, param);
  size_t rank = size_t(param.type.rank);
  Layout l;
  l.local.assign(param.type.dims, param.type.dims + rank);
  if (owner.globalDims.empty())
    return wholeLayout(l.local);
  l.whole = owner.globalDims;
  l.groups = owner.dimGroups;
  for (size_t d = 0; d < rank; ++d) {
    const std::vector<int> &axes = owner.dimOrder[d];
    size_t split = axes.size() - size_t(owner.dimInner[d]);
    std::vector<int> outer(axes.begin(), axes.begin() + split),
        inner(axes.begin() + split, axes.end());
    int64_t outerParts = 1, innerParts = 1;
    for (int axis : outer)
      outerParts *= p.axes[size_t(axis)].size;
    for (int axis : inner)
      innerParts *= p.axes[size_t(axis)].size;
    // Before the communicators exist (validate()), block 0 stands in.
    bool placed = !p.coords.empty();
    l.outerParts.push_back(outerParts);
    l.outer.push_back(placed ? blockIndex(p, outer) : 0);
    l.innerParts.push_back(innerParts);
    l.inner.push_back(placed ? blockIndex(p, inner) : 0);
  }
  if (std::string error = checkLayout(l); !error.empty())
    fail("describe", "sharded parameter '" + owner.name + "': " + error);
  return l;
}

Layout fsdp::host::wholeLayout(const std::vector<int64_t> &shape) {
  std::vector<int64_t> ones(shape.size(), 1), zeros(shape.size(), 0);
  return {shape, shape, ones, ones, zeros, ones, zeros};
}

std::string fsdp::host::checkLayout(const Layout &l) {
  for (size_t d = 0; d < l.local.size(); ++d) {
    int64_t split = l.groups[d] * l.outerParts[d];
    if (split <= 0 || l.innerParts[d] <= 0 ||
        (l.groups[d] > 1 && l.whole[d] % split != 0) ||
        l.local[d] * l.innerParts[d] < outerSize(l, d) ||
        (l.innerParts[d] == 1 && l.local[d] != outerSize(l, d)))
      return "dim " + std::to_string(d) + ": a block of " +
             std::to_string(l.local[d]) + " does not fit " +
             std::to_string(l.whole[d]) + " split in " +
             std::to_string(l.groups[d]) + " group(s) x " +
             std::to_string(l.outerParts[d]) + " x " +
             std::to_string(l.innerParts[d]) + " parts";
  }
  return "";
}

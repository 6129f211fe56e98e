//===- Collectives.cpp - What a step's collectives send and stage ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/Collectives.h"
#include "fsdp/Analysis/StepBuffers.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

fsdp::accounting::Collective
fsdp::collectiveKind(dist::CollectiveOpInterface op) {
  using accounting::Collective;
  return TypeSwitch<Operation *, Collective>(op)
      .Case([](dist::AllGatherOp) { return Collective::AllGather; })
      .Case([](dist::ReduceScatterOp) { return Collective::ReduceScatter; })
      .Case([](dist::AllReduceOp) { return Collective::AllReduce; })
      .Case([](dist::AllToAllOp) { return Collective::AllToAll; })
      .Case([](dist::PermuteOp) { return Collective::Permute; })
      .Default([](Operation *) { return Collective::Broadcast; });
}

uint32_t fsdp::axisMask(dist::CollectiveOpInterface op, dist::MeshOp mesh) {
  uint32_t mask = 0;
  for (Attribute listed : op.getMeshAxes())
    for (StringRef axis : mesh.expandAxis(cast<StringAttr>(listed).getValue()))
      for (auto [i, a] : llvm::enumerate(mesh.getAxes()))
        if (cast<StringAttr>(a).getValue() == axis)
          mask |= 1u << i;
  return mask;
}

std::string fsdp::groupName(uint32_t mask, dist::MeshOp mesh) {
  std::string name;
  for (auto [i, a] : llvm::enumerate(mesh.getAxes()))
    if (mask & (1u << i))
      name += (name.empty() ? "" : ",") + cast<StringAttr>(a).getValue().str();
  return "{" + name + "}";
}

int64_t fsdp::groupSize(dist::CollectiveOpInterface op, dist::MeshOp mesh) {
  int64_t n = 1;
  for (Attribute listed : op.getMeshAxes())
    for (StringRef axis : mesh.expandAxis(cast<StringAttr>(listed).getValue()))
      n *= mesh.getAxisSize(axis).value_or(1);
  return n;
}

fsdp::accounting::Staging fsdp::stagingOf(dist::CollectiveOpInterface op,
                                          int64_t n) {
  RankedTensorType in = op.getInput().getType();
  RankedTensorType out = op.getResultTensorType();
  // The elements before `dim` of `shape`.
  auto outer = [](ArrayRef<int64_t> shape, int64_t dim) {
    int64_t product = 1;
    for (int64_t d = 0; d < dim; ++d)
      product *= shape[d];
    return product;
  };
  Type element = in.getElementType();
  bool half = element.isBF16() || element.isF16();
  return TypeSwitch<Operation *, fsdp::accounting::Staging>(op)
      .Case([&](dist::AllGatherOp o) {
        return accounting::allGatherStaging(
            bytesOf(out), outer(in.getShape(), o.getGatherDim()));
      })
      .Case([&](dist::ReduceScatterOp o) {
        return accounting::reduceScatterStaging(
            in.getNumElements(), out.getNumElements(),
            (in.getElementTypeBitWidth() + 7) / 8, half,
            outer(out.getShape(), o.getScatterDim()));
      })
      .Case([&](dist::AllReduceOp) {
        return accounting::allReduceStaging(in.getNumElements(), half);
      })
      .Case([&](dist::AllToAllOp o) {
        SmallVector<int64_t> block(in.getShape());
        block[o.getSplitDim()] /= n;
        return accounting::allToAllStaging(
            bytesOf(in), n, outer(in.getShape(), o.getSplitDim()),
            outer(block, o.getConcatDim()));
      })
      .Default([](Operation *) { return fsdp::accounting::Staging(); });
}

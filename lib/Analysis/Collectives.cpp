//===- Collectives.cpp - What a step's collectives send and stage ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/Collectives.h"

using namespace mlir;

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

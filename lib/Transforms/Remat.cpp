//===- Remat.cpp - Activation checkpointing as rematerialization ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Remat.h"
#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace fsdp;

namespace {

/// The decoder layer of each forward op ("" for none): its path's, or, for
/// an op without a path, the layer of the ops with paths on both sides of
/// it when they agree (a TP collective, a cast inside the layer).
SmallVector<std::string> layersOf(ArrayRef<Operation *> forward) {
  SmallVector<std::string> layers(forward.size());
  SmallVector<bool> hasPath(forward.size());
  for (auto [i, op] : llvm::enumerate(forward))
    if (auto path = op->getAttrOfType<StringAttr>("path")) {
      layers[i] = decoderLayerOf(path.getValue());
      hasPath[i] = true;
    }
  // The layer of the next op with a path, from the back.
  std::string after;
  for (size_t i = forward.size(); i-- > 0;) {
    if (hasPath[i])
      after = layers[i];
    else
      layers[i] = after;
  }
  std::string before;
  for (size_t i = 0; i < forward.size(); ++i) {
    if (hasPath[i])
      before = layers[i];
    else if (layers[i] != before)
      layers[i].clear();
  }
  return layers;
}

/// The values a layer of `ops` keeps for the backward besides its inputs:
/// its outputs (read by other forward ops), and with `selective` the policy's
/// saved results.
DenseSet<Value> keptValues(ArrayRef<Operation *> ops,
                           const DenseSet<Operation *> &inLayer,
                           const DenseSet<Operation *> &inForward,
                           bool selective) {
  DenseSet<Value> kept;
  int64_t matmuls = 0;
  for (Operation *op : ops) {
    bool keep = false;
    if (selective) {
      if (op->hasTrait<nn::RematProduct>())
        keep = ++matmuls % 2 == 1;
      // Collectives are kept, but ring attention's K/V blocks, which go
      // round the ring again.
      keep |= op->hasTrait<nn::RematSaved>() ||
              (isa<dist::CollectiveOpInterface>(op) && !isRingStep(op));
    }
    for (Value result : op->getResults())
      if (keep || llvm::any_of(result.getUsers(), [&](Operation *user) {
            return inForward.contains(user) && !inLayer.contains(user);
          }))
        kept.insert(result);
  }
  return kept;
}

} // namespace

SmallVector<std::string> fsdp::decoderLayers(ArrayRef<Operation *> forward) {
  SmallVector<std::string> layers;
  for (std::string &name : layersOf(forward))
    if (!name.empty() && (layers.empty() || layers.back() != name))
      layers.push_back(name);
  return layers;
}

RematStats fsdp::rematerialize(OpBuilder &b, ArrayRef<Operation *> forward,
                               Operation *backwardStart,
                               const RematPlan &plan) {
  RematStats stats;
  // Ring attention's K/V blocks are passed round again before the layer's
  // backward rather than kept: a layer keeps only its own block.
  bool ring = llvm::any_of(forward, isRingStep);
  if (!plan.any() && !ring)
    return stats;
  DenseSet<Operation *> inForward(forward.begin(), forward.end());
  llvm::MapVector<StringRef, SmallVector<Operation *>> layers;
  SmallVector<std::string> names = layersOf(forward);
  for (auto [op, name] : llvm::zip(forward, names))
    if (!name.empty())
      layers[name].push_back(op);

  DenseSet<Operation *> clones;
  auto inBackward = [&](OpOperand &use) {
    Operation *user = use.getOwner();
    return !inForward.contains(user) && !clones.contains(user) &&
           backwardStart->isBeforeInBlock(user);
  };
  for (auto [index, entry] : llvm::enumerate(layers)) {
    ArrayRef<Operation *> ops = entry.second;
    Checkpointing mode = plan.modeOf(static_cast<int64_t>(index));
    bool checkpointed =
        mode == Checkpointing::Full || mode == Checkpointing::Selective;
    if (!checkpointed && !llvm::any_of(ops, isRingStep))
      continue;
    DenseSet<Operation *> inLayer(ops.begin(), ops.end());
    DenseSet<Value> kept;
    if (checkpointed) {
      kept =
          keptValues(ops, inLayer, inForward, mode == Checkpointing::Selective);
    } else {
      // Everything but the ring's blocks.
      for (Operation *op : ops)
        if (!isRingStep(op))
          kept.insert(op->result_begin(), op->result_end());
    }
    // The values to recompute: the layer's, not kept, read in the backward;
    // then what they are computed from, back to kept values and inputs.
    llvm::SetVector<Value> needed;
    Operation *first = nullptr;
    for (Operation *op : ops)
      for (Value result : op->getResults())
        for (OpOperand &use : result.getUses())
          if (!kept.contains(result) && inBackward(use)) {
            needed.insert(result);
            if (!first || use.getOwner()->isBeforeInBlock(first))
              first = use.getOwner();
          }
    if (needed.empty())
      continue;
    DenseSet<Operation *> recompute;
    SmallVector<Operation *> work;
    for (Value v : needed)
      if (recompute.insert(v.getDefiningOp()).second)
        work.push_back(v.getDefiningOp());
    while (!work.empty())
      for (Value operand : work.pop_back_val()->getOperands()) {
        Operation *def = operand.getDefiningOp();
        if (def && inLayer.contains(def) && !kept.contains(operand) &&
            recompute.insert(def).second)
          work.push_back(def);
      }
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(first);
    IRMapping map;
    for (Operation *op : ops) {
      if (!recompute.contains(op))
        continue;
      Operation *copy = b.clone(*op, map);
      copy->setAttr("fsdp.recompute", b.getUnitAttr());
      clones.insert(copy);
      if (checkpointed)
        ++stats.ops;
      if (isa<dist::CollectiveOpInterface>(op))
        ++(checkpointed ? stats.collectives : stats.ringCollectives);
    }
    for (Value v : needed)
      v.replaceUsesWithIf(map.lookup(v), inBackward);
    ++(checkpointed ? stats.layers : stats.ringLayers);
  }
  return stats;
}

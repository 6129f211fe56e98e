//===- FSDPGradients.cpp - FSDP's part of the backward --------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "FSDPGradients.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace fsdp;
using namespace fsdp::nn;

GradientBuilder::GatherHook
DeferredGradSync::forMicrobatch(GradientBuilder &grads, bool last) {
  return [this, &grads, last](Operation *gather, Value dy) -> Value {
    auto unit = gather->getAttrOfType<StringAttr>("fsdp.unit");
    if (!unit)
      return dy;
    Value &sum = pending[unit.getValue()];
    sum = sum ? grads.make<AddOp>(sum, dy).getResult() : dy;
    if (!last)
      return Value();
    return std::exchange(sum, Value());
  };
}

void fsdp::regatherForBackward(OpBuilder &b, ArrayRef<Operation *> forward,
                               Operation *backwardStart) {
  DenseSet<Operation *> inForward(forward.begin(), forward.end());
  for (Operation *op : forward) {
    auto gather = dyn_cast<dist::AllGatherOp>(op);
    if (!gather || !gather->hasAttr("fsdp.reshard"))
      continue;
    // The unpacking: the gather, then the forward's splits, reshapes and
    // dist.copy (Megatron's f on a sequence-parallel norm weight), so that
    // the backward holds nothing of the forward's gathered unit.
    SmallVector<Operation *> chain = {gather};
    for (size_t i = 0; i < chain.size(); ++i)
      for (Operation *user : chain[i]->getUsers())
        if (inForward.contains(user) &&
            isa<SplitOp, ReshapeOp, dist::CopyOp>(user) &&
            !llvm::is_contained(chain, user))
          chain.push_back(user);
    Operation *first = nullptr;
    for (Operation *link : chain)
      for (Operation *user : link->getUsers())
        if (!inForward.contains(user) && backwardStart->isBeforeInBlock(user) &&
            (!first || user->isBeforeInBlock(first)))
          first = user;
    if (!first)
      continue;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(first);
    IRMapping map;
    for (Operation *link : chain) {
      Operation *copy = b.clone(*link, map);
      copy->removeAttr("fsdp.reshard");
      if (link == gather.getOperation())
        copy->setAttr("fsdp.regather", b.getUnitAttr());
    }
    for (Operation *link : chain)
      for (Value result : link->getResults())
        result.replaceUsesWithIf(map.lookup(result), [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return !inForward.contains(user) &&
                 user != map.lookup(result).getDefiningOp() &&
                 backwardStart->isBeforeInBlock(user);
        });
  }
}

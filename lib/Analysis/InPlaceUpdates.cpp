//===- InPlaceUpdates.cpp - Optimizer updates that reuse buffers ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/InPlaceUpdates.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "llvm/ADT/SmallVector.h"

using namespace mlir;
using namespace fsdp;

Value fsdp::sharedBufferOperand(Operation *op) {
  if (isa<dist::CopyOp, dist::WaitOp, nn::ReshapeOp>(op))
    return op->getOperand(0);
  // A slice along a dim with only unit dims before it is contiguous.
  auto contiguous = [](Value input, int64_t dim) {
    ArrayRef<int64_t> shape =
        cast<RankedTensorType>(input.getType()).getShape();
    return llvm::all_of(shape.take_front(dim), [](int64_t d) { return d == 1; })
               ? input
               : Value();
  };
  if (auto slice = dyn_cast<nn::SliceOp>(op))
    return contiguous(slice.getInput(), slice.getDim());
  // nn.split runs as one slice per piece.
  if (auto split = dyn_cast<nn::SplitOp>(op)) {
    int64_t dim = static_cast<int64_t>(split.getDim());
    return contiguous(split.getInput(),
                      dim < 0 ? dim + split.getInput().getType().getRank()
                              : dim);
  }
  if (auto slice = dyn_cast<dist::AllSliceOp>(op))
    return contiguous(slice.getInput(), slice.getSliceDim());
  return {};
}

/// The position in `body` of the last op that reads `arg`'s buffer: a use
/// of it or of a view of it, or the wait of an async collective on either.
static unsigned lastRead(BlockArgument arg, Block &body,
                         const DenseMap<Operation *, unsigned> &position) {
  unsigned last = 0;
  auto reach = [&](Operation *user) {
    if (Operation *op = body.findAncestorOpInBlock(*user))
      last = std::max(last, position.lookup(op));
  };
  SmallVector<Value> views = {arg};
  while (!views.empty()) {
    Value v = views.pop_back_val();
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      reach(user);
      if (sharedBufferOperand(user) == v)
        views.append(user->result_begin(), user->result_end());
      // The collective reads its input until its wait.
      auto collective = dyn_cast<dist::CollectiveOpInterface>(user);
      if (collective && collective.isAsync())
        for (Operation *wait : user->getResult(0).getUsers())
          reach(wait);
    }
  }
  return last;
}

bool fsdp::defersUpdates(func::FuncOp step) {
  if (step.isExternal())
    return false;
  bool any = false;
  for (auto adamw : step.getBody().front().getOps<nn::AdamWOp>()) {
    any = true;
    for (Operation *user : adamw->getUsers())
      if (!isa<func::ReturnOp>(user))
        return false;
  }
  return any;
}

InPlaceUpdates::InPlaceUpdates(func::FuncOp step) {
  if (step.isExternal())
    return;
  Block &body = step.getBody().front();
  DenseMap<Operation *, unsigned> position;
  for (Operation &op : body)
    position[&op] = position.size();
  Operation *terminator = body.getTerminator();
  for (unsigned i = 0; i < step.getNumResults(); ++i) {
    auto updates = step.getResultAttrOfType<IntegerAttr>(
        i, nn::NNDialect::kUpdatesAttrName);
    auto result = dyn_cast<OpResult>(terminator->getOperand(i));
    if (!updates || !result || result.getOwner()->getBlock() != &body)
      continue;
    auto update = dyn_cast<nn::UpdateOpInterface>(result.getOwner());
    if (!update)
      continue;
    OpOperand &operand = update.getUpdatedOperand(result.getResultNumber());
    auto arg = dyn_cast<BlockArgument>(operand.get());
    if (!arg || arg.getOwner() != &body ||
        int64_t(arg.getArgNumber()) != updates.getInt() ||
        lastRead(arg, body, position) > position.lookup(update))
      continue;
    reused[result] = int(operand.getOperandNumber()) + 1;
  }
}

//===- ReleasePlan.cpp - Where a step releases its tensor handles ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/ReleasePlan.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

using namespace mlir;
using namespace fsdp;

void ReleasePlan::add(Block &body) {
  for (Operation &op : body) {
    for (Value operand : op.getOperands())
      if (isReleased(operand))
        lastUse[operand] = &op;
    for (Value result : op.getResults())
      if (isReleased(result) && result.use_empty())
        lastUse[result] = &op;
  }
  for (Operation &op : body) {
    for (OpOperand &operand : op.getOpOperands()) {
      auto it = lastUse.find(operand.get());
      if (it == lastUse.end() || it->second != &op)
        continue;
      // Listed once even when the op uses the value twice.
      if (llvm::none_of(
              op.getOperands().take_front(operand.getOperandNumber()),
              [&](Value earlier) { return earlier == operand.get(); }))
        deaths[&op].operands.push_back(operand.getOperandNumber());
    }
    for (OpResult result : op.getResults())
      if (isReleased(result) && result.use_empty())
        deaths[&op].results.push_back(result.getResultNumber());
  }
}

bool ReleasePlan::isReleased(Value v) {
  return isa<OpResult>(v) && isa<RankedTensorType>(v.getType());
}

ArrayRef<unsigned> ReleasePlan::operandsDyingAt(Operation *op) const {
  auto it = deaths.find(op);
  return it == deaths.end() ? ArrayRef<unsigned>() : it->second.operands;
}

ArrayRef<unsigned> ReleasePlan::unusedResults(Operation *op) const {
  auto it = deaths.find(op);
  return it == deaths.end() ? ArrayRef<unsigned>() : it->second.results;
}

Operation *ReleasePlan::releasedAfter(Value v) const {
  return lastUse.lookup(v);
}

//===- MemoryReplay.cpp - The runtime's allocations of one step, replayed -===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "MemoryReplay.h"
#include "PassUtils.h"

#include "fsdp/Conversion/NNToRuntime/InPlaceUpdates.h"
#include "fsdp/Conversion/NNToRuntime/ReleasePlan.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace fsdp;

MemoryReplay fsdp::replayMemory(func::FuncOp step, dist::MeshOp mesh) {
  MemoryReplay r;
  Block &body = step.getBody().front();
  // The arguments stay for the whole step.
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    int64_t bytes = bytesOf(arg.getType());
    bool host = bool(step.getArgAttr(i, "fsdp.host"));
    if (step.getArgAttr(i, nn::NNDialect::kParamAttrName))
      (host ? r.host.params : r.params) += bytes;
    else if (step.getArgAttr(i, nn::NNDialect::kStateAttrName))
      (host ? r.host.state : r.state) += bytes;
    else
      (host ? r.host.inputs : r.inputs) += bytes;
  }

  // The runtime's buffers: each op result is a new one, but dist.copy and
  // dist.wait hand out another reference to their operand's, nn.reshape
  // and a contiguous nn.slice a view that holds one, and an in-place
  // optimizer update its operand's (InPlaceUpdates.h). A buffer is
  // freed when every handle to it is released where the lowering releases
  // it (ReleasePlan.h); the step's results are kept.
  DenseMap<Value, Value> buffer;
  auto bufferOf = [&](Value v) {
    auto it = buffer.find(v);
    return it == buffer.end() ? v : it->second;
  };
  DenseMap<Value, int64_t> references;
  // Bytes live on the device and, under CPU offload, on the host: an op
  // placed on the host (or a host copy) allocates its results there.
  int64_t live = 0, liveHost = 0;
  auto release = [&](Value v) {
    Value b = bufferOf(v);
    if (!isa<BlockArgument>(b) && --references[b] == 0)
      (resultsOnHost(b.getDefiningOp()) ? liveHost : live) -=
          bytesOf(b.getType());
  };
  ReleasePlan plan(body);
  InPlaceUpdates inPlace(step);
  // Deferred AdamW calls hold their operands (and results the step drops)
  // until the step's end.
  bool deferred = r.deferred = defersUpdates(step);
  SmallVector<Value> heldToEnd;
  // Per started future: its input and the staging it holds.
  DenseMap<Value, std::pair<Value, int64_t>> pending;
  for (Operation &op : body.without_terminator()) {
    if (!r.saved &&
        isa<nn::CrossEntropyGradOp, nn::CrossEntropyPartialGradOp>(op))
      r.saved = live;
    Value shared = sharedBufferOperand(&op);
    for (Value result : op.getResults()) {
      int reused = inPlace.reusedOperand(result);
      if (shared)
        buffer[result] = bufferOf(shared);
      else if (reused >= 0)
        buffer[result] = bufferOf(op.getOperand(unsigned(reused)));
      else
        (resultsOnHost(&op) ? liveHost : live) += bytesOf(result.getType());
      if (ReleasePlan::isReleased(result))
        ++references[bufferOf(result)];
    }
    // A collective's staging buffers live while it runs. An async one
    // keeps its input and the staging it transfers through until its
    // wait (Collectives.cpp's fsdp_future).
    int64_t staging = 0;
    if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op)) {
      int64_t n = groupSize(collective, mesh);
      staging = stagingBytes(collective, n);
      if (collective.isAsync()) {
        Value input = collective.getInput();
        if (!isa<BlockArgument>(bufferOf(input)))
          ++references[bufferOf(input)];
        int64_t held = heldStagingBytes(collective, n);
        pending[op.getResult(0)] = {input, held};
        r.peak = std::max(r.peak, live + staging);
        live += held;
        staging = 0;
      }
    }
    if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      auto [input, held] = pending.lookup(wait.getFuture());
      if (input)
        release(input);
      live -= held;
    }
    r.peak = std::max(r.peak, live + staging);
    r.host.peak = std::max(r.host.peak, liveHost);
    if (auto gather = dyn_cast<dist::AllGatherOp>(op);
        gather && gather->hasAttr("fsdp.unit"))
      r.gathered = std::max(r.gathered, bytesOf(gather.getType()));
    if (isa<nn::UpdateOpInterface>(op)) {
      r.grads += bytesOf(op.getOperand(1).getType());
      r.updates += op.getNumResults();
      r.updatesInPlace += llvm::count_if(op.getResults(), [&](Value v) {
        return inPlace.reusedOperand(v) >= 0;
      });
    }
    // What activation checkpointing trades for the memory: the FLOPs of
    // the recomputed ops, against the forward's (ops with a module path).
    if (auto costed = dyn_cast<nn::CostOpInterface>(op)) {
      if (op.hasAttr("fsdp.recompute"))
        r.recomputedFlops += costed.getCost().flops;
      else if (op.hasAttr("path"))
        r.forwardFlops += costed.getCost().flops;
    }
    bool held = deferred && isa<nn::AdamWOp>(op);
    for (unsigned i : plan.operandsDyingAt(&op))
      held ? heldToEnd.push_back(op.getOperand(i)) : release(op.getOperand(i));
    for (unsigned i : plan.unusedResults(&op))
      held ? heldToEnd.push_back(op.getResult(i)) : release(op.getResult(i));
  }
  for (Value v : heldToEnd)
    release(v);
  return r;
}

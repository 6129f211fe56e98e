//===- MemoryReplay.cpp - The runtime's allocations of one step, replayed -===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/MemoryReplay.h"
#include "fsdp/Analysis/Collectives.h"
#include "fsdp/Analysis/InPlaceUpdates.h"
#include "fsdp/Analysis/StepBuffers.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace fsdp;

MemoryReplay fsdp::replayMemory(func::FuncOp step, dist::MeshOp mesh,
                                bool planned) {
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

  // The runtime's buffers (StepBuffers.h), as bytes allocated and freed per
  // op: on the host, on the device outside the memory plan's arena, and on
  // the device in all.
  StepBuffers buffers(step);
  std::optional<MemoryPlan> plan;
  if (planned) {
    plan = planMemory(buffers);
    r.plan = MemoryReplay::Plan{plan->arena, plan->planned, plan->livePeak};
  }
  unsigned ops = buffers.numOps();
  struct Delta {
    int64_t host = 0, device = 0, all = 0;
  };
  SmallVector<Delta> allocated(ops + 1), freed(ops + 1);
  for (auto [i, b] : llvm::enumerate(buffers.buffers())) {
    auto count = [&](Delta &d) {
      if (b.host) {
        d.host += b.bytes;
        return;
      }
      d.all += b.bytes;
      if (!plan || plan->offsets[i] < 0)
        d.device += b.bytes;
    };
    count(allocated[b.allocated]);
    if (!b.kept())
      count(freed[b.freed]);
  }
  // Device bytes outside the arena and in all, and the peak of the former.
  int64_t live = 0, liveHost = 0, liveAll = 0, outside = 0;
  InPlaceUpdates inPlace(step);
  r.deferred = defersUpdates(step);
  // Per started future: the staging it holds until its wait.
  DenseMap<Value, int64_t> pending;
  unsigned at = 0;
  for (Operation &op : body.without_terminator()) {
    if (!r.saved &&
        isa<nn::CrossEntropyGradOp, nn::CrossEntropyPartialGradOp>(op))
      r.saved = liveAll;
    live += allocated[at].device;
    liveHost += allocated[at].host;
    liveAll += allocated[at].all;
    // A collective's staging buffers live while it runs. An async one
    // keeps the staging it transfers through until its wait
    // (Collectives.cpp's fsdp_future).
    int64_t staging = 0;
    if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op)) {
      int64_t n = groupSize(collective, mesh);
      staging = stagingBytes(collective, n);
      if (collective.isAsync()) {
        int64_t held = heldStagingBytes(collective, n);
        pending[op.getResult(0)] = held;
        r.peak = std::max(r.peak, liveAll + staging);
        outside = std::max(outside, live + staging);
        live += held;
        liveAll += held;
        staging = 0;
      }
    }
    if (auto wait = dyn_cast<dist::WaitOp>(op)) {
      live -= pending.lookup(wait.getFuture());
      liveAll -= pending.lookup(wait.getFuture());
    }
    r.peak = std::max(r.peak, liveAll + staging);
    outside = std::max(outside, live + staging);
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
    live -= freed[at].device;
    liveHost -= freed[at].host;
    liveAll -= freed[at].all;
    ++at;
  }
  if (r.plan)
    r.plan->outside = outside;
  return r;
}

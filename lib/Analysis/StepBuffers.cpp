//===- StepBuffers.cpp - A step's buffers and its memory plan -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/StepBuffers.h"

#include "fsdp/Analysis/InPlaceUpdates.h"
#include "fsdp/Analysis/ReleasePlan.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "llvm/Support/Parallel.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <tuple>

using namespace mlir;
using namespace fsdp;

bool fsdp::resultsOnHost(Operation *op) {
  return isa<nn::ToHostOp>(op) ||
         (op->hasAttr("fsdp.host") && !isa<nn::ToDeviceOp>(op));
}

bool fsdp::optimizerOnHostCores(ModuleOp module) {
  auto where = module->getAttrOfType<StringAttr>(kOffloadOptimizerAttr);
  return where && where.getValue() == "cpu";
}

int64_t fsdp::bytesOf(Type type) {
  if (auto future = dyn_cast<dist::FutureType>(type))
    type = future.getValueType();
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor ? dist::bytesOfTensor(tensor) : 0;
}

StepBuffers::StepBuffers(func::FuncOp step) {
  if (step.isExternal())
    return;
  Block &body = step.getBody().front();
  // The buffer each handle refers to (itself when it has one of its own),
  // and the references to each buffer.
  DenseMap<Value, Value> buffer;
  auto bufferOf = [&](Value v) {
    auto it = buffer.find(v);
    return it == buffer.end() ? v : it->second;
  };
  DenseMap<Value, unsigned> listed;
  DenseMap<Value, int64_t> references;
  auto release = [&](Value v, unsigned at) {
    Value b = bufferOf(v);
    if (isa<BlockArgument>(b) || --references[b] != 0)
      return;
    auto it = listed.find(b);
    if (it != listed.end())
      list[it->second].freed = at;
  };
  ReleasePlan plan(body);
  InPlaceUpdates inPlace(step);
  bool deferred = defersUpdates(step);
  SmallVector<Value> heldToEnd;
  // Per started future: the input its collective reads until the wait.
  DenseMap<Value, Value> reading;
  for (Operation &op : body.without_terminator()) {
    unsigned at = ops++;
    Value shared = sharedBufferOperand(&op);
    for (Value result : op.getResults()) {
      int reused = inPlace.reusedOperand(result);
      if (shared) {
        buffer[result] = bufferOf(shared);
      } else if (reused >= 0) {
        buffer[result] = bufferOf(op.getOperand(unsigned(reused)));
      } else if (isa<RankedTensorType, dist::FutureType>(result.getType())) {
        listed[result] = list.size();
        StepBuffer b;
        b.value = result;
        b.bytes = bytesOf(result.getType());
        b.host = resultsOnHost(&op);
        b.allocated = at;
        list.push_back(b);
      }
      if (ReleasePlan::isReleased(result))
        ++references[bufferOf(result)];
    }
    auto collective = dyn_cast<dist::CollectiveOpInterface>(op);
    if (collective && collective.isAsync()) {
      Value input = collective.getInput();
      if (!isa<BlockArgument>(bufferOf(input)))
        ++references[bufferOf(input)];
      reading[op.getResult(0)] = input;
    }
    if (auto wait = dyn_cast<dist::WaitOp>(op))
      if (Value input = reading.lookup(wait.getFuture()))
        release(input, at);
    bool held = deferred && isa<nn::AdamWOp>(op);
    for (unsigned i : plan.operandsDyingAt(&op))
      held ? heldToEnd.push_back(op.getOperand(i))
           : release(op.getOperand(i), at);
    for (unsigned i : plan.unusedResults(&op))
      held ? heldToEnd.push_back(op.getResult(i))
           : release(op.getResult(i), at);
  }
  for (Value v : heldToEnd)
    release(v, ops);
}

/// Places `order`'s buffers in turn: each at the lowest offset of the
/// smallest gap the buffers already placed leave during its lifetime (best
/// fit), or above them all. Returns the arena's size. The placed buffers
/// stay in offset order, so a placement is one pass over them (those whose
/// lifetimes miss this one's skipped), ending early on an exact fit: no
/// smaller gap exists, and a later one of the same size would lie higher.
static int64_t place(ArrayRef<StepBuffer> buffers, ArrayRef<unsigned> order,
                     SmallVectorImpl<int64_t> &offsets) {
  struct Placed {
    int64_t begin, end;
    unsigned allocated, freed;
  };
  int64_t arena = 0;
  std::vector<Placed> placed;
  placed.reserve(order.size());
  for (unsigned i : order) {
    const StepBuffer &b = buffers[i];
    int64_t size = MemoryPlan::slot(b.bytes);
    int64_t best = -1, bestGap = std::numeric_limits<int64_t>::max();
    int64_t top = 0;
    // Branch-free but for an exact fit: about a quarter of the placed
    // buffers meet a lifetime, in no order a predictor could learn.
    for (const Placed &other : placed) {
      bool meets = (other.allocated <= b.freed) & (b.allocated <= other.freed);
      int64_t gap = other.begin - top;
      bool fits = meets & (gap >= size) & (gap < bestGap);
      best = fits ? top : best;
      bestGap = fits ? gap : bestGap;
      if (fits & (gap == size))
        break;
      int64_t raised = std::max(top, other.end);
      top = meets ? raised : top;
    }
    if (best < 0)
      best = top;
    offsets[i] = best;
    arena = std::max(arena, best + size);
    Placed entry{best, best + size, b.allocated, b.freed};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), entry,
                                   [](const Placed &x, const Placed &y) {
                                     return std::make_pair(x.begin, x.end) <
                                            std::make_pair(y.begin, y.end);
                                   }),
                  entry);
  }
  return arena;
}

namespace {
/// What a plan depends on: per buffer its size, lifetime and placement,
/// and the step's op count. The memory report and the lowering plan the
/// same step; the second asks the memo of the first.
struct PlanInput {
  std::vector<std::tuple<int64_t, unsigned, unsigned, bool>> buffers;
  unsigned numOps = 0;
  bool operator==(const PlanInput &other) const {
    return numOps == other.numOps && buffers == other.buffers;
  }
};
} // namespace

static MemoryPlan computePlan(const StepBuffers &step);

MemoryPlan fsdp::planMemory(const StepBuffers &step) {
  PlanInput input;
  input.numOps = step.numOps();
  for (const StepBuffer &b : step.buffers())
    input.buffers.emplace_back(b.bytes, b.allocated, b.freed, b.host);
  static std::mutex mutex;
  static std::optional<std::pair<PlanInput, MemoryPlan>> last;
  std::lock_guard<std::mutex> lock(mutex);
  if (!last || !(last->first == input))
    last.emplace(std::move(input), computePlan(step));
  return last->second;
}

static MemoryPlan computePlan(const StepBuffers &step) {
  ArrayRef<StepBuffer> buffers = step.buffers();
  MemoryPlan plan;
  SmallVector<unsigned> order;
  for (auto [i, b] : llvm::enumerate(buffers))
    if (!b.host && !b.kept())
      order.push_back(unsigned(i));
  plan.planned = int64_t(order.size());
  // Lifetimes counted in the ops that allocate or free a planned buffer,
  // so that ops that do neither (views, waits) change no order.
  SmallVector<unsigned> points;
  for (unsigned i : order)
    points.append({buffers[i].allocated, buffers[i].freed});
  llvm::sort(points);
  points.erase(llvm::unique(points), points.end());
  auto rank = [&](unsigned at) {
    return int64_t(llvm::lower_bound(points, at) - points.begin());
  };
  SmallVector<int64_t> sizes(buffers.size()), lengths(buffers.size());
  for (unsigned i : order) {
    sizes[i] = MemoryPlan::slot(buffers[i].bytes);
    lengths[i] = rank(buffers[i].freed) - rank(buffers[i].allocated) + 1;
  }
  auto size = [&](unsigned i) { return sizes[i]; };
  auto length = [&](unsigned i) { return lengths[i]; };
  // Orders to try, each stable (ties in allocation order, so the plan is
  // deterministic); the smallest arena wins.
  SmallVector<std::function<bool(unsigned, unsigned)>> orders = {
      [&](unsigned a, unsigned b) { return size(a) > size(b); },
      [&](unsigned a, unsigned b) {
        return size(a) * length(a) > size(b) * length(b);
      },
      [&](unsigned a, unsigned b) {
        return std::make_pair(length(a), size(a)) >
               std::make_pair(length(b), size(b));
      },
      [&](unsigned, unsigned) { return false; },
  };
  // The orders are placed independently (in parallel); the first of the
  // smallest wins, whatever finishes first.
  SmallVector<SmallVector<int64_t>> offsets(
      orders.size(), SmallVector<int64_t>(buffers.size(), -1));
  SmallVector<int64_t> arenas(orders.size());
  llvm::parallelFor(0, orders.size(), [&](size_t k) {
    SmallVector<unsigned> sorted(order);
    llvm::stable_sort(sorted, orders[k]);
    arenas[k] = place(buffers, sorted, offsets[k]);
  });
  plan.arena = std::numeric_limits<int64_t>::max();
  for (size_t k = 0; k < orders.size(); ++k)
    if (arenas[k] < plan.arena) {
      plan.arena = arenas[k];
      plan.offsets = offsets[k];
    }
  // The arena's lower bound: the most planned bytes live during one op.
  SmallVector<int64_t> delta(step.numOps() + 2, 0);
  for (unsigned i : order) {
    delta[buffers[i].allocated] += size(i);
    delta[buffers[i].freed + 1] -= size(i);
  }
  int64_t live = 0;
  for (int64_t d : delta)
    plan.livePeak = std::max(plan.livePeak, live += d);
  return plan;
}

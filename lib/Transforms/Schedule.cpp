//===- Schedule.cpp - Overlap FSDP's collectives with compute -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// fsdp-schedule: FSDP2's prefetch as a reordering of the per-rank program.
// A collective becomes a start (its result a `!dist.future`) and a
// `dist.wait`; a layer's all-gather starts units ahead, at the beginning of
// an earlier unit's compute, and a gradient reduce-scatter is waited where
// its result is first needed; ring attention's permutes over cp are waited
// where their block is first needed, so each overlaps the attention before
// it. Only independent ops change places, so the numbers are those of the
// synchronous program.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

namespace fsdp {
#define GEN_PASS_DEF_SCHEDULEPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

constexpr llvm::StringLiteral kUnit = "fsdp.unit", kRegather = "fsdp.regather",
                              kRoot = "<root>";

/// An async collective: its start and its wait.
struct Async {
  Operation *start;
  dist::WaitOp wait;
};

/// `ops`, all in one block, in the block's order.
SmallVector<Operation *> inBlockOrder(llvm::SetVector<Operation *> &ops) {
  SmallVector<Operation *> ordered = ops.takeVector();
  llvm::sort(ordered,
             [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

class Scheduler {
public:
  explicit Scheduler(func::FuncOp step)
      : body(step.getBody().front()), builder(step.getContext()) {}

  /// Makes the collective `op` asynchronous: a start where `op` stands and
  /// a wait right after it.
  Async makeAsync(Operation *op);
  /// Moves `start` (and the pure ops computing its operands that come
  /// after `point`) right after `point`, or after the last op it depends on
  /// that cannot move.
  void hoist(Operation *start, Operation *point);
  /// Moves `wait`, with the pure ops that only rearrange its value, down to
  /// right before the first op that needs them, but not past `limit`.
  void sink(dist::WaitOp wait, Operation *limit);
  /// Starts the gathers of `chain` (in program order) `depth` units ahead.
  unsigned prefetch(ArrayRef<Operation *> chain, int64_t depth);
  /// Checks the schedule; emits an error at the offending op on failure.
  LogicalResult verify(unsigned &collectives, unsigned &groups);

  Block &body;
  OpBuilder builder;
};

Async Scheduler::makeAsync(Operation *op) {
  builder.setInsertionPoint(op);
  Operation *start = builder.clone(*op);
  Value result = op->getResult(0);
  start->getResult(0).setType(dist::FutureType::get(
      op->getContext(), cast<RankedTensorType>(result.getType())));
  auto wait = dist::WaitOp::create(builder, op->getLoc(), result.getType(),
                                   start->getResult(0));
  result.replaceAllUsesWith(wait.getResult());
  op->erase();
  return {start, wait};
}

void Scheduler::hoist(Operation *start, Operation *point) {
  for (;;) {
    llvm::SetVector<Operation *> slice;
    Operation *blocker = nullptr;
    SmallVector<Value> work(start->getOperands());
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || def->getBlock() != &body || !point->isBeforeInBlock(def) ||
          slice.contains(def))
        continue;
      if (!isMemoryEffectFree(def) || def->getNumRegions()) {
        if (!blocker || blocker->isBeforeInBlock(def))
          blocker = def;
        continue;
      }
      slice.insert(def);
      llvm::append_range(work, def->getOperands());
    }
    if (blocker) {
      point = blocker;
      continue;
    }
    Operation *cursor = point;
    for (Operation *op : inBlockOrder(slice)) {
      op->moveAfter(cursor);
      cursor = op;
    }
    start->moveAfter(cursor);
    return;
  }
}

void Scheduler::sink(dist::WaitOp wait, Operation *limit) {
  // The wait and the pure ops (not collectives) whose operands are its
  // value, their results or values defined before it: the gradient's
  // cast, slices, reshapes.
  llvm::SetVector<Operation *> chain;
  chain.insert(wait);
  for (size_t i = 0; i < chain.size(); ++i)
    for (Operation *user : chain[i]->getUsers()) {
      if (user->getBlock() != &body || chain.contains(user) ||
          !isMemoryEffectFree(user) || user->getNumRegions() ||
          isa<dist::CollectiveOpInterface>(user))
        continue;
      bool fromChainOrBefore = llvm::all_of(user->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || def->getBlock() != &body || chain.contains(def) ||
               def->isBeforeInBlock(wait);
      });
      if (fromChainOrBefore)
        chain.insert(user);
    }
  // The first op outside the chain that uses a value of it.
  Operation *first = nullptr;
  for (Operation *op : chain)
    for (Operation *user : op->getUsers()) {
      Operation *at = body.findAncestorOpInBlock(*user);
      if (!at || chain.contains(at))
        continue;
      if (!first || at->isBeforeInBlock(first))
        first = at;
    }
  if (!first)
    first = body.getTerminator();
  if (limit && limit->isBeforeInBlock(first))
    first = limit;
  for (Operation *op : inBlockOrder(chain))
    op->moveBefore(first);
}

unsigned Scheduler::prefetch(ArrayRef<Operation *> chain, int64_t depth) {
  if (depth <= 0)
    return 0;
  SmallVector<Async> units;
  for (Operation *gather : chain)
    units.push_back(makeAsync(gather));
  // Unit i, at the start of its compute (its wait), issues the gathers of
  // units i+1 .. i+depth that are not issued yet; unit 0 issues 1..depth.
  for (size_t j = 1; j < units.size(); ++j) {
    Operation *point =
        units[std::max<int64_t>(0, int64_t(j) - depth)].wait.getOperation();
    if (point->isBeforeInBlock(units[j - 1].start))
      point = units[j - 1].start;
    if (point->isBeforeInBlock(units[j].start))
      hoist(units[j].start, point);
  }
  // Every unit but the first starts ahead; an empty chain (no resharded
  // unit to gather again) starts none.
  return units.empty() ? 0 : units.size() - 1;
}

LogicalResult Scheduler::verify(unsigned &collectives, unsigned &groups) {
  llvm::SetVector<Attribute> seen;
  for (Operation &op : body) {
    auto collective = dyn_cast<dist::CollectiveOpInterface>(op);
    if (!collective)
      continue;
    ++collectives;
    seen.insert(collective.getMeshAxes());
    if (!collective.isAsync())
      continue;
    Value future = op.getResult(0);
    if (!future.hasOneUse() || !isa<dist::WaitOp>(*future.user_begin()))
      return op.emitOpError("is started asynchronously but not waited "
                            "exactly once");
    auto wait = cast<dist::WaitOp>(*future.user_begin());
    if (wait->getBlock() != &body || !op.isBeforeInBlock(wait))
      return wait.emitOpError("waits before its collective starts");
    for (Operation *user : wait.getResult().getUsers()) {
      Operation *at = body.findAncestorOpInBlock(*user);
      if (at && at->isBeforeInBlock(wait))
        return (user->emitOpError("uses a collective's result before its "
                                  "wait")
                    .attachNote(wait.getLoc())
                << "the wait");
    }
  }
  groups = seen.size();
  return success();
}

/// The depth `option` asks for, else the parallel config's (forward or
/// backward), else 1 (FSDP2's implicit prefetch).
int64_t depthOf(ModuleOp module, int64_t option, bool forward) {
  if (option >= 0)
    return option;
  if (ParallelConfigAttr config = ParallelConfigAttr::of(module))
    return forward ? config.getForwardPrefetch() : config.getBackwardPrefetch();
  return 1;
}

/// Whether `op` syncs gradients over data-parallel axes.
bool isGradientSync(dist::CollectiveOpInterface op) {
  if (!isa<dist::ReduceScatterOp, dist::AllReduceOp>(op.getOperation()) ||
      op.isAsync())
    return false;
  return llvm::all_of(op.getMeshAxes(), [](Attribute axis) {
    StringRef name = cast<StringAttr>(axis).getValue();
    return name == "dp_replicate" || name == "dp_shard";
  });
}

struct SchedulePass
    : EntryFunctionPass<SchedulePass, fsdp::impl::SchedulePassBase> {
  using EntryFunctionPass::EntryFunctionPass;
  static constexpr llvm::StringLiteral kPurpose = "schedule";

  void runOnEntry(ModuleOp module, func::FuncOp step) {
    Scheduler scheduler(step);
    SmallVector<Operation *> forward, backward, syncs, ring;
    for (Operation &op : scheduler.body) {
      auto collective = dyn_cast<dist::CollectiveOpInterface>(op);
      if (!collective)
        continue;
      if (isRingStep(&op) && !collective.isAsync()) {
        ring.push_back(&op);
        continue;
      }
      auto unit = op.getAttrOfType<StringAttr>(kUnit);
      if (isa<dist::AllGatherOp>(op) && unit && unit.getValue() != kRoot &&
          !collective.isAsync())
        (op.hasAttr(kRegather) ? backward : forward).push_back(&op);
      else if (overlapGradientSync && isGradientSync(collective))
        syncs.push_back(&op);
    }
    unsigned prefetched =
        scheduler.prefetch(forward, depthOf(module, forwardDepth, true)) +
        scheduler.prefetch(backward, depthOf(module, backwardDepth, false));
    numPrefetched += prefetched;
    // One gradient sync in flight, as FSDP2 keeps it: a sync's future
    // holds the unit's whole gradient, so it is waited before the next
    // starts (or where its result is needed, if that is earlier).
    for (auto [i, op] : llvm::enumerate(syncs))
      scheduler.sink(scheduler.makeAsync(op).wait,
                     i + 1 < syncs.size() ? syncs[i + 1] : nullptr);
    numOverlapped += syncs.size();
    // Ring attention: each K/V block's permute runs while the block before
    // it is attended to.
    for (Operation *op : ring)
      scheduler.sink(scheduler.makeAsync(op).wait, nullptr);
    numRingSteps += ring.size();
    unsigned collectives = 0, groups = 0;
    if (failed(scheduler.verify(collectives, groups)))
      return signalPassFailure();
    if (!remark)
      return;
    step.emitRemark() << "fsdp-schedule: " << prefetched
                      << " all-gathers started ahead, " << syncs.size()
                      << " gradient syncs waited later, one in flight; "
                      << collectives << " collectives over " << groups
                      << " groups, each issued in the same order on every "
                         "rank of its group (one program, no rank-dependent "
                         "branch), every future waited once before its use";
  }
};

} // namespace

//===- Offload.cpp - CPU offload of parameters, gradients and state -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-offload` (Passes.td): places the step's parameter blocks,
// optimizer state and the optimizer's inputs in host memory, runs the
// optimizer ops and what only they need on the host, and puts a placement
// copy (nn.to_device / nn.to_host) wherever a value crosses between the two.
// Placement is one unit attribute, `fsdp.host`, on arguments and ops: the
// lowering, the memory replay and the runtime all read it, so the report's
// host and device memory are what the runtime allocates.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Interfaces/RuntimeCallInterface.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace fsdp {
#define GEN_PASS_DEF_OFFLOADPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

constexpr StringLiteral kHost = "fsdp.host";

/// Whether `v` lives in host memory: a host argument, a host copy, or a
/// result of an op placed on the host.
bool isHost(func::FuncOp step, Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return bool(step.getArgAttr(arg.getArgNumber(), kHost));
  return resultsOnHost(v.getDefiningOp());
}

/// Places the parameter blocks, optimizer state and step count of `step`
/// (a training step or its eval step) in host memory for the whole run;
/// returns how many.
int64_t placeArguments(func::FuncOp step) {
  UnitAttr unit = UnitAttr::get(step.getContext());
  int64_t offloaded = 0;
  for (BlockArgument arg : step.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto input =
        step.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kInputAttrName);
    if (step.getArgAttr(i, nn::NNDialect::kParamAttrName) ||
        step.getArgAttr(i, nn::NNDialect::kStateAttrName) ||
        (input && input.getValue() == "optimizer_step")) {
      step.setArgAttr(i, kHost, unit);
      ++offloaded;
    }
  }
  return offloaded;
}

/// Ops placed on the host: runtime calls other than collectives (which
/// communicate device buffers) and the placement copies.
bool canRunOnHost(Operation *op) {
  return isa<RuntimeCallOpInterface>(op) &&
         !isa<dist::CollectiveOpInterface, nn::ToHostOp, nn::ToDeviceOp>(op);
}

struct OffloadPass : fsdp::impl::OffloadPassBase<OffloadPass> {
  using OffloadPassBase::OffloadPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ParallelConfigAttr config = ParallelConfigAttr::of(module);
    bool on = enable == FromConfig::True ||
              (enable == FromConfig::Config && config &&
               config.getOffloadPolicy() == OffloadPolicy::CPU);
    if (!on)
      return markAllAnalysesPreserved();
    if (optimizer != "cpu" && optimizer != "gpu") {
      module.emitError("fsdp-offload: option 'optimizer' is '")
          << optimizer << "'; expected 'cpu' or 'gpu'";
      return signalPassFailure();
    }
    func::FuncOp step = lookupEntry(module, entry, "offload");
    if (!step)
      return signalPassFailure();
    module->setAttr(kOffloadOptimizerAttr,
                    StringAttr::get(&getContext(), optimizer));
    Block &body = step.getBody().front();
    UnitAttr unit = UnitAttr::get(&getContext());

    // Parameter blocks, optimizer state and the step count live on the
    // host for the whole run.
    if (!placeArguments(step)) {
      step.emitOpError("has no parameters to offload (offload_policy)");
      return signalPassFailure();
    }

    // Each updated gradient goes to the host where it is produced; its
    // readers (the update, clipping's norm) read the host copy.
    SmallVector<Operation *> updates;
    for (Operation &op : body)
      if (isa<nn::UpdateOpInterface>(op))
        updates.push_back(&op);
    OpBuilder b(&getContext());
    for (Operation *update : updates) {
      Value grad = update->getOperand(1);
      if (isHost(step, grad))
        continue;
      if (isa<BlockArgument>(grad))
        b.setInsertionPointToStart(&body);
      else
        b.setInsertionPointAfter(grad.getDefiningOp());
      Value copy = nn::ToHostOp::create(b, grad.getLoc(), grad);
      grad.replaceAllUsesExcept(copy, copy.getDefiningOp());
    }

    // The updates and what feeds them run on the host: the slice of their
    // operands up to host values (in a training step: clipping's norms).
    // Collectives (and their waits) stay on the device, but the slice goes on
    // through them: clipping's partial norms are summed on the host, only the
    // scalars cross.
    SmallVector<Operation *> worklist(updates.begin(), updates.end());
    DenseSet<Operation *> visited(updates.begin(), updates.end());
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      if (canRunOnHost(op))
        op->setAttr(kHost, unit);
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && def->getBlock() == &body && !isHost(step, v) &&
            (canRunOnHost(def) ||
             isa<dist::WaitOp, dist::CollectiveOpInterface>(def)) &&
            visited.insert(def).second)
          worklist.push_back(def);
      }
    }

    insertCopies(step);
    // The eval step (fsdp-build-train-step's eval) reads the same arguments:
    // its parameter blocks come to the device before their all-gathers too.
    if (func::FuncOp eval = lookupEvalStep(step)) {
      placeArguments(eval);
      insertCopies(eval);
    }
  }

  /// A placement copy wherever an op of `step` reads a tensor of the other
  /// side.
  void insertCopies(func::FuncOp step) {
    OpBuilder b(&getContext());
    SmallVector<Operation *> ops;
    for (Operation &op : step.getBody().front().without_terminator())
      if (!isa<nn::ToHostOp, nn::ToDeviceOp>(op))
        ops.push_back(&op);
    for (Operation *op : ops) {
      bool host = op->hasAttr(kHost);
      for (OpOperand &operand : op->getOpOperands()) {
        Value v = operand.get();
        if (!isa<RankedTensorType>(v.getType()) || isHost(step, v) == host)
          continue;
        b.setInsertionPoint(op);
        Value copy =
            host ? nn::ToHostOp::create(b, op->getLoc(), v).getResult()
                 : nn::ToDeviceOp::create(b, op->getLoc(), v).getResult();
        operand.set(copy);
      }
    }
  }
};

} // namespace

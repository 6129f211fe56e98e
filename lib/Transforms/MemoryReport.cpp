//===- MemoryReport.cpp - Per-rank memory of one step, without running ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-memory-report`: replays the step function's allocations
// the way the runtime makes them (every op result is a new tensor, released
// where the lowering releases it; dist.copy shares its input's; collectives
// stage through temporary buffers) and reports the bytes one rank holds: its
// parameter blocks, optimizer state, data, gradients, the largest gathered
// FSDP unit, and the estimated peak.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Conversion/NNToRuntime/ReleasePlan.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

namespace fsdp {
#define GEN_PASS_DEF_MEMORYREPORTPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

struct MemoryReportPass : fsdp::impl::MemoryReportPassBase<MemoryReportPass> {
  using MemoryReportPassBase::MemoryReportPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp step = lookupEntry(module, entry, "report on");
    if (!step)
      return signalPassFailure();
    Block &body = step.getBody().front();
    dist::MeshOp mesh = dist::findMesh(module);
    if (!mesh && !step.getOps<dist::CollectiveOpInterface>().empty()) {
      module.emitError("has collectives but no dist.mesh to size them");
      return signalPassFailure();
    }

    // The arguments stay for the whole step.
    int64_t params = 0, state = 0, inputs = 0;
    for (BlockArgument arg : step.getArguments()) {
      unsigned i = arg.getArgNumber();
      int64_t bytes = bytesOf(arg.getType());
      if (step.getArgAttr(i, nn::NNDialect::kParamAttrName))
        params += bytes;
      else if (step.getArgAttr(i, nn::NNDialect::kStateAttrName))
        state += bytes;
      else
        inputs += bytes;
    }

    // The runtime's buffers: each op result is a new one, but dist.copy and
    // dist.wait hand out another reference to their operand's. A buffer is
    // freed when every handle to it is released where the lowering releases
    // it (ReleasePlan.h); the step's results are kept.
    DenseMap<Value, Value> buffer;
    auto bufferOf = [&](Value v) {
      auto it = buffer.find(v);
      return it == buffer.end() ? v : it->second;
    };
    DenseMap<Value, int64_t> references;
    int64_t live = 0, peak = 0, gathered = 0, grads = 0;
    double recomputedFlops = 0, forwardFlops = 0;
    // The bytes live when the backward starts (at the loss's gradient):
    // what the forward saved for it, the activation memory of the
    // literature's formulas.
    std::optional<int64_t> saved;
    auto release = [&](Value v) {
      Value b = bufferOf(v);
      if (!isa<BlockArgument>(b) && --references[b] == 0)
        live -= bytesOf(b.getType());
    };
    ReleasePlan plan(body);
    // Per started future: its input and the staging it holds.
    DenseMap<Value, std::pair<Value, int64_t>> pending;
    for (Operation &op : body.without_terminator()) {
      if (!saved &&
          isa<nn::CrossEntropyGradOp, nn::CrossEntropyPartialGradOp>(op))
        saved = live;
      for (Value result : op.getResults()) {
        if (isa<dist::CopyOp, dist::WaitOp>(op))
          buffer[result] = bufferOf(op.getOperand(0));
        else
          live += bytesOf(result.getType());
        if (ReleasePlan::isReleased(result))
          ++references[bufferOf(result)];
      }
      // A collective's staging buffers live while it runs. An async one
      // keeps its input and the staging it transfers through until its
      // wait (Collectives.cpp's fsdp_future).
      int64_t staging = 0;
      if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op)) {
        staging = stagingBytes(collective, groupSize(collective, mesh));
        if (collective.isAsync()) {
          Value input = collective.getInput();
          if (!isa<BlockArgument>(bufferOf(input)))
            ++references[bufferOf(input)];
          int64_t held =
              heldStagingBytes(collective, groupSize(collective, mesh));
          pending[op.getResult(0)] = {input, held};
          peak = std::max(peak, live + staging);
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
      peak = std::max(peak, live + staging);
      if (auto gather = dyn_cast<dist::AllGatherOp>(op);
          gather && gather->hasAttr("fsdp.unit"))
        gathered = std::max(gathered, bytesOf(gather.getType()));
      if (isa<nn::AdamWOp, nn::SGDOp>(op))
        grads += bytesOf(op.getOperand(1).getType());
      // What activation checkpointing trades for the memory: the FLOPs of
      // the recomputed ops, against the forward's (ops with a module path).
      if (auto costed = dyn_cast<nn::CostOpInterface>(op)) {
        if (op.hasAttr("fsdp.recompute"))
          recomputedFlops += costed.getCost().flops;
        else if (op.hasAttr("path"))
          forwardFlops += costed.getCost().flops;
      }
      for (unsigned i : plan.operandsDyingAt(&op))
        release(op.getOperand(i));
      for (unsigned i : plan.unusedResults(&op))
        release(op.getResult(i));
    }
    int64_t fixed = params + state + inputs;
    int64_t estimate = fixed + peak;
    // The dtypes the training step runs in (fsdp-build-train-step).
    llvm::json::Object precision;
    std::string precisionText;
    if (auto dtypes = module->getAttrOfType<DictionaryAttr>("fsdp.precision"))
      for (StringRef key : {"param", "reduce", "output", "master"})
        if (auto dtype = dtypes.getAs<StringAttr>(key)) {
          precision[key] = dtype.getValue();
          precisionText += (precisionText.empty() ? "" : ", ") + key.str() +
                           " " + dtype.getValue().str();
        }

    auto write = [&](raw_ostream &os) {
      if (format == ReportFormat::Json) {
        os << llvm::formatv("{0:2}",
                            llvm::json::Value(llvm::json::Object{
                                {"parameters", params},
                                {"optimizer_state", state},
                                {"inputs", inputs},
                                {"gradients", grads},
                                {"largest_gathered_unit", gathered},
                                {"temporaries_peak", peak},
                                {"estimated_peak", estimate},
                                {"recomputed_flops", recomputedFlops},
                                {"saved_for_backward", saved.value_or(0)},
                                {"forward_flops", forwardFlops},
                                {"precision", std::move(precision)}}))
           << "\n";
      } else {
        auto row = [&](StringRef what, int64_t bytes) {
          os << llvm::formatv("{0,-34} {1,16}\n", what, bytes);
        };
        os << llvm::formatv("{0,-34} {1,16}\n", "memory per rank", "bytes");
        row("parameters (this rank's blocks)", params);
        row("optimizer state", state);
        row("inputs", inputs);
        row("gradients (blocks, at the update)", grads);
        row("largest gathered unit", gathered);
        row("activations and temporaries, peak", peak);
        if (saved)
          row("saved for the backward", *saved);
        row("estimated peak", estimate);
        if (!precisionText.empty())
          os << "precision: " << precisionText << "\n";
        if (recomputedFlops > 0)
          os << llvm::formatv("activation checkpointing recomputes {0:e3} "
                              "FLOPs per step ({1:f2} of the forward's "
                              "{2:e3})\n",
                              recomputedFlops, recomputedFlops / forwardFlops,
                              forwardFlops);
      }
    };
    if (failed(writeReport(module, output, "", write)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace

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

#include "MemoryReplay.h"
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
    dist::MeshOp mesh = dist::findMesh(module);
    if (!mesh && !step.getOps<dist::CollectiveOpInterface>().empty()) {
      module.emitError("has collectives but no dist.mesh to size them");
      return signalPassFailure();
    }

    MemoryReplay r = replayMemory(step, mesh);
    int64_t params = r.params, state = r.state, inputs = r.inputs,
            grads = r.grads, gathered = r.gathered, peak = r.peak;
    double recomputedFlops = r.recomputedFlops, forwardFlops = r.forwardFlops;
    std::optional<int64_t> saved = r.saved;
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

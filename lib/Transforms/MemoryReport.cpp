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

#include "fsdp/Analysis/MemoryReplay.h"
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

struct MemoryReportPass
    : ReportPass<MemoryReportPass, fsdp::impl::MemoryReportPassBase> {
  using ReportPass::ReportPass;

  void runOnEntry(ModuleOp module, func::FuncOp step) {
    FailureOr<dist::MeshOp> mesh = meshForCollectives(module, step, "size");
    if (failed(mesh))
      return signalPassFailure();
    MemoryReplay r = replayMemory(step, *mesh, memoryPlan);
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

    llvm::json::Object json{{"parameters", r.params},
                            {"optimizer_state", r.state},
                            {"inputs", r.inputs},
                            {"gradients", r.grads},
                            {"largest_gathered_unit", r.gathered},
                            {"temporaries_peak", r.peak},
                            {"estimated_peak", r.estimate()},
                            {"recomputed_flops", r.recomputedFlops},
                            {"saved_for_backward", r.saved.value_or(0)},
                            {"forward_flops", r.forwardFlops},
                            {"optimizer_results", r.updates},
                            {"optimizer_results_in_place", r.updatesInPlace},
                            {"adamw_deferred", r.deferred},
                            {"precision", std::move(precision)}};
    if (r.plan)
      json["memory_plan"] =
          llvm::json::Object{{"arena", r.plan->arena},
                             {"buffers", r.plan->buffers},
                             {"live_peak", r.plan->livePeak},
                             {"outside_peak", r.plan->outside}};
    else
      json["memory_plan"] = nullptr;
    if (r.offloaded())
      json["host"] = llvm::json::Object{{"parameters", r.host.params},
                                        {"optimizer_state", r.host.state},
                                        {"inputs", r.host.inputs},
                                        {"temporaries_peak", r.host.peak},
                                        {"estimated_peak", r.host.estimate()}};
    auto table = [&](raw_ostream &os) {
      auto row = [&](StringRef what, int64_t bytes) {
        os << llvm::formatv("{0,-34} {1,16}\n", what, bytes);
      };
      os << llvm::formatv("{0,-34} {1,16}\n", "memory per rank", "bytes");
      row("parameters (this rank's blocks)", r.params);
      row("optimizer state", r.state);
      row("inputs", r.inputs);
      row("gradients (blocks, at the update)", r.grads);
      row("largest gathered unit", r.gathered);
      row("activations and temporaries, peak", r.peak);
      if (r.plan) {
        row("memory plan arena", r.plan->arena);
        row("outside the arena, peak", r.plan->outside);
      }
      if (r.saved)
        row("saved for the backward", *r.saved);
      row("estimated peak", r.estimate());
      if (r.offloaded()) {
        os << llvm::formatv("{0,-34} {1,16}\n",
                            "host memory per rank (CPU offload)", "bytes");
        row("parameters (this rank's blocks)", r.host.params);
        row("optimizer state", r.host.state);
        row("inputs", r.host.inputs);
        row("gradients, optimizer results, peak", r.host.peak);
        row("estimated peak", r.host.estimate());
      }
      if (r.plan)
        os << llvm::formatv("memory plan: {0} buffers in an arena of {1} "
                            "bytes; at most {2} bytes of them live at "
                            "once ({3:f1}% packing overhead)\n",
                            r.plan->buffers, r.plan->arena, r.plan->livePeak,
                            r.plan->livePeak
                                ? 100.0 *
                                      double(r.plan->arena - r.plan->livePeak) /
                                      double(r.plan->livePeak)
                                : 0.0);
      if (!precisionText.empty())
        os << "precision: " << precisionText << "\n";
      if (r.updates > 0)
        os << llvm::formatv("optimizer: {0} of {1} results updated in "
                            "place{2}\n",
                            r.updatesInPlace, r.updates,
                            r.deferred ? "; AdamW deferred to the step's end, "
                                         "multi-tensor"
                                       : "");
      if (r.recomputedFlops > 0)
        os << llvm::formatv("activation checkpointing recomputes {0:e3} "
                            "FLOPs per step ({1:f2} of the forward's "
                            "{2:e3})\n",
                            r.recomputedFlops,
                            r.recomputedFlops / r.forwardFlops, r.forwardFlops);
    };
    if (failed(writePassReport(module, report.get(), "memory", format, output,
                               std::move(json), table)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace

std::unique_ptr<Pass>
fsdp::createMemoryReportPass(const MemoryReportPassOptions &options,
                             std::shared_ptr<JsonReport> report) {
  return MemoryReportPass::create(std::move(report), options);
}

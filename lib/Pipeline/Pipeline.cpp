//===- Pipeline.cpp - The compile pipeline, as one registered pass --------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Pipeline/Pipeline.h"
#include "fsdp/Conversion/Passes.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

LogicalResult fsdp::buildPipeline(OpPassManager &pm,
                                  const PipelineOptions &options,
                                  raw_ostream &errors) {
  // Each report rewrites the file, so stdout would get three objects.
  if (options.reportJson == "-") {
    errors << "fsdp-pipeline: `report-json` needs a file, not -\n";
    return failure();
  }
  // The plan stays null unless fsdp-tp-plan resolves one (tp > 1).
  std::shared_ptr<JsonReport> json;
  if (!options.reportJson.empty())
    json = std::make_shared<JsonReport>(options.reportJson,
                                        llvm::json::Object{{"plan", nullptr}});
  if (options.isParallel()) {
    ParallelConfigPassOptions config;
    config.config = options.config;
    config.worldSize = options.worldSize;
    config.tp = options.tp;
    config.sequenceParallel = options.sequenceParallel;
    pm.addPass(createParallelConfigPass(config));
    TPPlanPassOptions plan;
    plan.strictPlan = options.strictPlan;
    if (options.report)
      plan.report = "-";
    pm.addPass(json ? createTPPlanPass(plan, json) : createTPPlanPass(plan));
    pm.addPass(createPartitionPass());
    pm.addPass(createContextParallelPass());
    pm.addPass(createExpertParallelPass());
    FSDPShardPassOptions shard;
    shard.vocabUnits = options.vocabUnits;
    pm.addPass(createFSDPShardPass(shard));
  }
  if (!options.trace.empty() && options.simulate.empty()) {
    errors << "fsdp-pipeline: `trace` needs `simulate`\n";
    return failure();
  }
  if (!options.step.empty() &&
      failed(parsePassPipeline(options.step, pm, errors)))
    return failure();
  if (options.isParallel())
    pm.addPass(createAsyncTPPass());
  if (options.isParallel() && options.schedule) {
    SchedulePassOptions schedule;
    schedule.remark = false;
    pm.addPass(createSchedulePass(schedule));
  }
  // CPU offload (the config's offload_policy; otherwise nothing to do).
  if (options.isParallel()) {
    OffloadPassOptions offload;
    offload.optimizer = options.offloadOptimizer;
    pm.addPass(createOffloadPass(offload));
  }
  MemoryReportPassOptions memory;
  memory.memoryPlan = options.memoryPlan;
  if (options.report) {
    pm.addPass(createCommReportPass());
    pm.addPass(createMemoryReportPass(memory));
  }
  if (json) {
    pm.addPass(createCommReportPass(json));
    pm.addPass(createMemoryReportPass(memory, json));
  }
  if (!options.simulate.empty()) {
    SimulatePassOptions simulate;
    simulate.hardware = options.simulate;
    simulate.trace = options.trace;
    pm.addPass(createSimulatePass(simulate));
  }
  if (options.lower) {
    LowerToRuntimePassOptions lowering;
    lowering.outlineLayers = options.outlineLayers;
    lowering.memoryPlan = options.memoryPlan;
    pm.addPass(createLowerToRuntimePass(lowering));
  }
  return success();
}

void fsdp::registerPipeline() {
  // Registered by hand rather than through PassPipelineRegistration, whose
  // builder cannot fail: a `step` that does not parse must.
  registerPassPipeline(
      "fsdp-pipeline",
      "Graph to per-rank program to runtime calls: fsdp-tp-plan, "
      "fsdp-partition, fsdp-context-parallel and fsdp-shard when a parallel "
      "option is given, the "
      "`step` passes, fsdp-schedule when parallel, the reports, "
      "fsdp-lower-to-runtime",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        PipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        return buildPipeline(pm, options, llvm::errs());
      },
      [](function_ref<void(const detail::PassOptions &)> describe) {
        describe(PipelineOptions());
      });
}

//===- Pipeline.h - The compile pipeline, one registered pass ---*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `fsdp-pipeline`: graph to per-rank program to runtime calls. fsdp-opt runs
// it by name, fsdp-compile and embedding programs call `buildPipeline`.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_PIPELINE_PIPELINE_H
#define FSDP_PIPELINE_PIPELINE_H

#include "fsdp/Conversion/Passes.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Pass/PassOptions.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace fsdp {

struct PipelineOptions : public mlir::PassPipelineOptions<PipelineOptions> {
  Option<std::string> config{*this, "config",
                             llvm::cl::desc("parallel.json (docs/"
                                            "parallel-config.md)")};
  Option<int64_t> worldSize{
      *this, "world-size",
      llvm::cl::desc("Ranks the program runs on (0: the config's smallest "
                     "world)"),
      llvm::cl::init(0)};
  Option<int64_t> tp{*this, "tp",
                     llvm::cl::desc("Tensor-parallel size (0: the config's "
                                    "tp_size)"),
                     llvm::cl::init(0)};
  Option<FromConfig> sequenceParallel{
      *this, "sequence-parallel", llvm::cl::desc("Sequence parallelism"),
      llvm::cl::init(FromConfig::Config),
      llvm::cl::values(clEnumValN(FromConfig::Config, "config",
                                  "the config's sequence_parallel"),
                       clEnumValN(FromConfig::True, "true", "on"),
                       clEnumValN(FromConfig::False, "false", "off"))};
  Option<bool> parallel{
      *this, "parallel",
      llvm::cl::desc("Plan, partition and shard even when no other parallel "
                     "option is given (the config's defaults on one rank)"),
      llvm::cl::init(false)};
  Option<bool> strictPlan{
      *this, "strict-plan",
      llvm::cl::desc("A tp_plan key that matches no module is an error"),
      llvm::cl::init(false)};
  Option<bool> vocabUnits{
      *this, "vocab-units",
      llvm::cl::desc("FSDP: trainable untied vocabulary tables get their own "
                     "units"),
      llvm::cl::init(false)};
  Option<std::string> step{
      *this, "step",
      llvm::cl::desc("Passes run on the per-rank program before the reports "
                     "and lowering, as a pipeline (e.g. "
                     "'fsdp-build-train-step{lr=1e-3}')")};
  Option<bool> schedule{
      *this, "schedule",
      llvm::cl::desc("Overlap FSDP's collectives with compute (fsdp-schedule, "
                     "at the config's prefetch depths) after the `step` "
                     "passes of a parallel program"),
      llvm::cl::init(true)};
  Option<bool> report{
      *this, "report",
      llvm::cl::desc("Print the plan, communication and memory tables on "
                     "stdout"),
      llvm::cl::init(false)};
  Option<std::string> reportJson{
      *this, "report-json",
      llvm::cl::desc("Write the plan, communication and memory reports here, "
                     "as one JSON object {\"plan\": ..., \"communication\": "
                     "..., \"memory\": ...} (the plan null without tensor "
                     "parallelism)")};
  Option<std::string> simulate{
      *this, "simulate",
      llvm::cl::desc("Predict the step's time on this hardware model (JSON, "
                     "docs/simulator.md) and print it (fsdp-simulate)")};
  Option<std::string> trace{
      *this, "trace",
      llvm::cl::desc("With `simulate`: write the predicted step as a "
                     "Chrome/Perfetto trace here")};
  Option<bool> outlineLayers{
      *this, "outline-layers",
      llvm::cl::desc("Lower the runs of ops that repeat per layer once, as "
                     "functions"),
      llvm::cl::init(true)};
  Option<bool> memoryPlan{
      *this, "memory-plan",
      llvm::cl::desc("Place the step's device buffers at offsets the "
                     "compiler plans in one arena (the memory report "
                     "counts it)"),
      llvm::cl::init(true)};
  Option<std::string> offloadOptimizer{
      *this, "offload-optimizer",
      llvm::cl::desc("Under the config's offload_policy, where the optimizer "
                     "runs: cpu (the host's cores, as FSDP2) or gpu (kernels "
                     "reading pinned host memory); fsdp-offload's "
                     "`optimizer`"),
      llvm::cl::init("cpu")};
  Option<bool> lower{
      *this, "lower",
      llvm::cl::desc("Lower to runtime calls (EmitC), ready for the C++ "
                     "emitter"),
      llvm::cl::init(true)};

  /// Whether any option asks for the parallel passes.
  bool isParallel() const {
    return parallel || !config.empty() || worldSize > 0 || tp > 0 ||
           sequenceParallel != FromConfig::Config;
  }
};

/// Adds the pipeline `options` describe to `pm` (on a module): the TP plan,
/// partitioner and FSDP sharding when parallel, the `step` passes, the
/// reports, and the lowering to runtime calls. Fails (with a message on
/// `errors`) when `step` does not parse or an option is wrong.
llvm::LogicalResult buildPipeline(mlir::OpPassManager &pm,
                                  const PipelineOptions &options,
                                  llvm::raw_ostream &errors = llvm::errs());

/// Registers `fsdp-pipeline` for fsdp-opt's `--pass-pipeline`.
void registerPipeline();

} // namespace fsdp

#endif // FSDP_PIPELINE_PIPELINE_H

//===- LowerToRuntime.cpp - The fsdp-lower-to-runtime pass ----------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-lower-to-runtime` over the conversion in
// lib/Conversion/NNToRuntime. The contract with the runtime is
// include/fsdp/Runtime/Program.h.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/StepFunction.h"
#include "fsdp/Conversion/NNToRuntime/NNToRuntime.h"
#include "fsdp/Conversion/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"

namespace fsdp {
#define GEN_PASS_DEF_LOWERTORUNTIMEPASS
#include "fsdp/Conversion/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

struct LowerToRuntimePass
    : EntryFunctionPass<LowerToRuntimePass,
                        fsdp::impl::LowerToRuntimePassBase> {
  using EntryFunctionPass::EntryFunctionPass;
  static constexpr llvm::StringLiteral kPurpose = "lower";

  void runOnEntry(ModuleOp module, func::FuncOp func) {
    RuntimeLoweringStats stats;
    if (failed(lowerToRuntime(module, func, outlineLayers, memoryPlan, stats)))
      return signalPassFailure();
    numOpCalls += stats.opCalls;
    numReleases += stats.releases;
    numLayerFunctions += stats.layerFunctions;
    numLayerCalls += stats.layerCalls;
    numLayerLoops += stats.layerLoops;
  }
};

} // namespace

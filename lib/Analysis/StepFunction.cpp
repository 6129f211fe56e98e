//===- StepFunction.cpp - The step function a pass works on ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/StepFunction.h"

using namespace mlir;

func::FuncOp fsdp::lookupEntry(ModuleOp module, StringRef entry,
                               StringRef purpose) {
  auto func = module.lookupSymbol<func::FuncOp>(entry);
  if (func && func.getBody().hasOneBlock())
    return func;
  module.emitError("no single-block function @") << entry << " to " << purpose;
  return nullptr;
}

std::string fsdp::evalStepName(StringRef entry) {
  return (entry + "_eval").str();
}

func::FuncOp fsdp::lookupEvalStep(func::FuncOp entry) {
  auto module = entry->getParentOfType<ModuleOp>();
  return module ? module.lookupSymbol<func::FuncOp>(
                      evalStepName(entry.getSymName()))
                : nullptr;
}

FailureOr<fsdp::dist::MeshOp>
fsdp::meshForCollectives(ModuleOp module, func::FuncOp step, StringRef verb) {
  dist::MeshOp mesh = dist::findMesh(module);
  if (!mesh && !step.getOps<dist::CollectiveOpInterface>().empty()) {
    module.emitError("has collectives but no dist.mesh to ") << verb << " them";
    return failure();
  }
  return mesh;
}

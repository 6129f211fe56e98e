//===- FsdpMlir.cpp - The compiler's entry point for embedding programs ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Compiler.h"
#include "fsdp/Import/GraphImport.h"
#include "fsdp/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"

using namespace mlir;

std::unique_ptr<MLIRContext> fsdp::createContext() {
  DialectRegistry registry;
  registerAllDialects(registry);
  // Registering twice is harmless; a step pipeline string needs them.
  registerAllPasses();
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

OwningOpRef<ModuleOp> fsdp::importGraphFile(llvm::StringRef json,
                                            llvm::StringRef fileName,
                                            MLIRContext *context) {
  return importGraph(json, fileName, context);
}

llvm::LogicalResult fsdp::runPipeline(ModuleOp module,
                                      const PipelineOptions &options) {
  PassManager pm(module->getContext());
  if (failed(buildPipeline(pm, options)))
    return failure();
  return pm.run(module);
}

llvm::LogicalResult fsdp::emitProgram(ModuleOp module, llvm::raw_ostream &os) {
  return emitc::translateToCpp(module, os);
}

//===- InitAll.cpp - Register every fsdp-mlir dialect and pass ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/InitAll.h"
#include "fsdp/Conversion/Passes.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/Gradient.h"
#include "fsdp/Pipeline/Pipeline.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

void fsdp::registerAllDialects(mlir::DialectRegistry &registry) {
  registry
      .insert<fsdp::nn::NNDialect, fsdp::dist::DistDialect, fsdp::FSDPDialect,
              mlir::func::FuncDialect, mlir::emitc::EmitCDialect>();
  fsdp::nn::registerDistGradientModels(registry);
}

void fsdp::registerAllPasses() {
  mlir::registerTransformsPasses();
  fsdp::registerFSDPPasses();
  fsdp::registerFSDPConversionPasses();
  fsdp::registerPipeline();
}

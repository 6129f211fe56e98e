//===- fsdp-opt.cpp - The fsdp-mlir optimizer driver ----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// mlir-opt with the nn and dist dialects and the fsdp-* passes.
//
//===----------------------------------------------------------------------===//

#include "fsdp/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  fsdp::registerAllDialects(registry);
  fsdp::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "fsdp-mlir optimizer driver\n", registry));
}

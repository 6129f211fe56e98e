//===- fsdp-translate.cpp - Translations in and out of fsdp-mlir ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// mlir-translate with `--import-graph` (graph.json to nn ops),
// `--param-table`, and upstream's `--mlir-to-cpp` for lowered programs.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Import/GraphImport.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

namespace mlir {
// Defined in MLIRTargetCpp; declared in mlir/InitAllTranslations.h, which
// would also pull in every other translation.
void registerToCppTranslation();
} // namespace mlir

int main(int argc, char **argv) {
  fsdp::registerGraphTranslations();
  mlir::registerToCppTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "fsdp-mlir translation driver\n"));
}

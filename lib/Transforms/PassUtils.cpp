//===- PassUtils.cpp - Pieces the fsdp passes share -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;

void fsdp::replaceFunction(OpBuilder &b, func::FuncOp old, func::FuncOp now,
                           Location loc, ValueRange results,
                           ArrayRef<DictionaryAttr> argAttrs,
                           ArrayRef<DictionaryAttr> resultAttrs) {
  func::ReturnOp::create(b, loc, results);
  now.setFunctionType(b.getFunctionType(now.getArgumentTypes(),
                                        TypeRange(ValueRange(results))));
  now.setAllArgAttrs(argAttrs);
  now.setAllResultAttrs(resultAttrs);
  for (NamedAttribute attr : old->getDiscardableAttrs())
    now->setAttr(attr.getName(), attr.getValue());
  old.erase();
}

LogicalResult
fsdp::writeReport(Operation *op, StringRef path, StringRef what,
                  llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file)
    return op->emitError(what) << error;
  write(file->os());
  file->keep();
  return success();
}

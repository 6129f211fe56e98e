//===- FSDPDialect.h - FSDP's annotations -----------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_FSDP_IR_FSDPDIALECT_H
#define FSDP_DIALECT_FSDP_IR_FSDPDIALECT_H

#include "fsdp/Parallel/ParallelConfig.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"

namespace fsdp {
/// Parses a keyword naming a value of the config enum `E` (EnumNames).
template <typename E>
mlir::FailureOr<E> parseEnumParameter(mlir::AsmParser &parser) {
  llvm::StringRef keyword;
  llvm::SMLoc loc = parser.getCurrentLocation();
  if (failed(parser.parseKeyword(&keyword)))
    return mlir::failure();
  if (std::optional<E> value = enumNamed<E>(keyword))
    return *value;
  auto diag = parser.emitError(loc, "expected one of");
  for (const char *name : EnumNames<E>::names)
    diag << " '" << name << "'";
  return diag << ", got '" << keyword << "'";
}
} // namespace fsdp

#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/FSDP/IR/FSDPAttrs.h.inc"

#endif // FSDP_DIALECT_FSDP_IR_FSDPDIALECT_H

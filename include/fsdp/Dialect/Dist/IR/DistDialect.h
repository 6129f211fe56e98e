//===- DistDialect.h - The dist dialect -------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTDIALECT_H
#define FSDP_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/SymbolTable.h"

#include "fsdp/Dialect/Dist/IR/DistOpsDialect.h.inc"

#include "fsdp/Dialect/Dist/IR/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/Dist/IR/DistAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "fsdp/Dialect/Dist/IR/DistOpsTypes.h.inc"

#endif // FSDP_DIALECT_DIST_IR_DISTDIALECT_H

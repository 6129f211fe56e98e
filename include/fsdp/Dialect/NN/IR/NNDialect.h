//===- NNDialect.h - The nn dialect -----------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNDIALECT_H
#define FSDP_DIALECT_NN_IR_NNDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "fsdp/Dialect/NN/IR/NNOpsDialect.h.inc"

#include "fsdp/Dialect/NN/IR/NNEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/NN/IR/NNAttrs.h.inc"

#endif // FSDP_DIALECT_NN_IR_NNDIALECT_H

//===- Passes.h - fsdp-mlir passes ------------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_TRANSFORMS_PASSES_H
#define FSDP_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace fsdp {

#define GEN_PASS_DECL
#include "fsdp/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fsdp/Transforms/Passes.h.inc"

} // namespace fsdp

#endif // FSDP_TRANSFORMS_PASSES_H

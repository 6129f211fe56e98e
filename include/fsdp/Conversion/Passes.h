//===- Passes.h - fsdp-mlir conversions -------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The conversions out of the nn and dist dialects: fsdp-lower-to-runtime,
// the per-rank program to calls of the runtime's C ABI in EmitC.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_CONVERSION_PASSES_H
#define FSDP_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"

#include <memory>

namespace fsdp {

#define GEN_PASS_DECL
#include "fsdp/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fsdp/Conversion/Passes.h.inc"

} // namespace fsdp

#endif // FSDP_CONVERSION_PASSES_H

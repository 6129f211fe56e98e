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

/// The optimizer fsdp-build-train-step appends.
enum class Optimizer { AdamW, SGD, None };

/// A floating-point element type chosen by an option; `Same` is the
/// default of the options that follow another dtype.
enum class Dtype { F32, BF16, F16, Same };

/// The layout of a report.
enum class ReportFormat { Table, Json };

/// An on/off option whose default is the parallel config's value.
enum class FromConfig { Config, True, False };

/// FSDP2's reshard_after_forward: None (every layer but the last), True,
/// False, or the parallel config's choice.
enum class Reshard { Config, None, True, False };

/// Activation checkpointing (fsdp-build-train-step): none, every decoder
/// layer recomputed from its input, the selective op policy, or the
/// parallel config's choice.
enum class Checkpointing { Config, None, Full, Selective };

#define GEN_PASS_DECL
#include "fsdp/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "fsdp/Transforms/Passes.h.inc"

} // namespace fsdp

#endif // FSDP_TRANSFORMS_PASSES_H

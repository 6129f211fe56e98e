//===- Passes.h - fsdp-mlir passes ------------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_TRANSFORMS_PASSES_H
#define FSDP_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "llvm/Support/JSON.h"

#include <memory>

namespace fsdp {

/// The optimizer fsdp-build-train-step appends.
enum class Optimizer { AdamW, SGD, None };

/// The learning-rate schedule fsdp-build-train-step applies
/// (transformers' get_scheduler: constant, linear, cosine).
enum class LrSchedule { Constant, Linear, Cosine };

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

/// One JSON object that several reports of a pipeline fill, a member each
/// (fsdp-pipeline's `report-json`). Each report rewrites the whole file, so
/// that it holds every member written so far and nothing from an earlier
/// compile.
class JsonReport {
public:
  JsonReport(std::string path, llvm::json::Object members)
      : path(std::move(path)), members(std::move(members)) {}

  /// Sets `member` to `value` and rewrites the file; when it cannot be
  /// written, emits the reason at `op` and fails.
  llvm::LogicalResult write(mlir::Operation *op, llvm::StringRef member,
                            llvm::json::Value value);

private:
  std::string path;
  llvm::json::Object members;
};

/// The report passes writing their JSON into `report` (as `plan`,
/// `communication` and `memory`) instead of to their `output`.
std::unique_ptr<mlir::Pass>
createTPPlanPass(const TPPlanPassOptions &options,
                 std::shared_ptr<JsonReport> report);
std::unique_ptr<mlir::Pass>
createCommReportPass(std::shared_ptr<JsonReport> report);
std::unique_ptr<mlir::Pass>
createMemoryReportPass(const MemoryReportPassOptions &options,
                       std::shared_ptr<JsonReport> report);

} // namespace fsdp

#endif // FSDP_TRANSFORMS_PASSES_H

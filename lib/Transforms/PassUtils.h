//===- PassUtils.h - Pieces the fsdp passes share ---------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_TRANSFORMS_PASSUTILS_H
#define FSDP_LIB_TRANSFORMS_PASSUTILS_H

#include "fsdp/Analysis/Collectives.h"
#include "fsdp/Analysis/StepBuffers.h"
#include "fsdp/Analysis/StepFunction.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace fsdp {

/// Finishes a pass that rebuilt function `old` as `now`: returns `results`
/// at `loc`, gives `now` its type and argument and result attributes, carries
/// `old`'s own attributes (`nn.model`, ...) over, and erases `old`.
void replaceFunction(mlir::OpBuilder &b, mlir::func::FuncOp old,
                     mlir::func::FuncOp now, mlir::Location loc,
                     mlir::ValueRange results,
                     llvm::ArrayRef<mlir::DictionaryAttr> argAttrs,
                     llvm::ArrayRef<mlir::DictionaryAttr> resultAttrs);

/// The module's dist.mesh when its axis `axis` has more than one rank (that
/// size in `size`), else null: a pass that splits over `axis` has nothing
/// to do.
dist::MeshOp meshSplitting(mlir::ModuleOp module, llvm::StringRef axis,
                           int64_t &size);

/// Rebuilds `op` on `operands` with `attrs` by its shape rule (the ranks'
/// shapes), mapping its results in `map`; an op without one "cannot be
/// <how> (not an nn op)".
llvm::LogicalResult rebuildOnRanks(mlir::OpBuilder &b, mlir::Operation &op,
                                   mlir::ValueRange operands,
                                   mlir::DictionaryAttr attrs,
                                   mlir::IRMapping &map, llvm::StringRef how);

/// The function a pass builds in place of `old`, op by op, on new argument
/// types: created just before `old` with an entry block, at whose end `b` is
/// set. `replace` finishes it as replaceFunction does; a rewrite that fails
/// before then leaves the module as it was, since the new function goes with
/// this object.
class RebuiltFunction {
public:
  RebuiltFunction(mlir::OpBuilder &b, mlir::func::FuncOp old,
                  mlir::TypeRange argTypes);
  RebuiltFunction(const RebuiltFunction &) = delete;
  RebuiltFunction &operator=(const RebuiltFunction &) = delete;
  ~RebuiltFunction();

  mlir::Block *entry() { return &now.front(); }
  /// The new values of `old`'s results, through `map`.
  llvm::SmallVector<mlir::Value> results(const mlir::IRMapping &map);
  /// `old`'s result attributes, each after `update(i, attrs)`.
  llvm::SmallVector<mlir::DictionaryAttr>
  resultAttrs(llvm::function_ref<void(unsigned, mlir::NamedAttrList &)> update);
  /// replaceFunction(b, old, now, ...): the new function takes `old`'s place.
  void replace(mlir::Location loc, mlir::ValueRange results,
               llvm::ArrayRef<mlir::DictionaryAttr> argAttrs,
               llvm::ArrayRef<mlir::DictionaryAttr> resultAttrs);

private:
  mlir::OpBuilder &b;
  mlir::func::FuncOp old, now;
};

/// Whether `op` passes context parallelism's ring-attention blocks on: a
/// dist.permute over cp (fsdp-context-parallel's, of a layer's keys and
/// values or of their positions, or its transpose in the backward).
bool isRingStep(mlir::Operation *op);

/// For a collective `op` cloned as `copy` onto operands whose dims shrank
/// (the batch split over data-parallel ranks, the sequence over cp): gives
/// each of `copy`'s results of operand 0's rank the old result's shape,
/// each dim scaled as operand 0's same dim was. Fails, with an error at
/// `op`, where a dim does not scale evenly.
llvm::LogicalResult followOperandSplit(mlir::Operation *op,
                                       mlir::Operation *copy);

/// The decoder layer a parameter name or module path belongs to: its first
/// element of a module list, `<path>.<name>.<index>` (`model.layers.3.mlp.
/// up_proj.weight` and `model.layers.3` give `model.layers.3`; GPT-2's
/// `transformer.h.3`; a plain model's `blocks.3`), or "" outside any.
std::string decoderLayerOf(llvm::StringRef name);

/// Writes a report to `path` (- for stdout) with `write`; when the file
/// cannot be opened, emits `what` and the reason at `op` and fails.
llvm::LogicalResult
writeReport(mlir::Operation *op, llvm::StringRef path, llvm::StringRef what,
            llvm::function_ref<void(llvm::raw_ostream &)> write);

/// A report pass's output: member `member` of the shared JSON report when
/// there is one, else `json` or the table `table` writes (by `format`) to
/// `path`.
llvm::LogicalResult
writePassReport(mlir::Operation *op, JsonReport *report, llvm::StringRef member,
                ReportFormat format, llvm::StringRef path,
                llvm::json::Object json,
                llvm::function_ref<void(llvm::raw_ostream &)> table);

/// A report pass over the entry function; its output goes to `report`, the
/// shared JSON report, when that is set.
template <typename Derived, template <typename> class Base>
struct ReportPass : EntryFunctionPass<Derived, Base> {
  using EntryFunctionPass<Derived, Base>::EntryFunctionPass;
  static constexpr llvm::StringLiteral kPurpose = "report on";

  std::shared_ptr<JsonReport> report;

  /// The pass with `options`, writing into `report`.
  template <typename... Options>
  static std::unique_ptr<mlir::Pass> create(std::shared_ptr<JsonReport> report,
                                            const Options &...options) {
    auto pass = std::make_unique<Derived>(options...);
    pass->report = std::move(report);
    return pass;
  }
};

} // namespace fsdp

#endif // FSDP_LIB_TRANSFORMS_PASSUTILS_H

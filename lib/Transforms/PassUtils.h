//===- PassUtils.h - Pieces the fsdp passes share ---------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_TRANSFORMS_PASSUTILS_H
#define FSDP_LIB_TRANSFORMS_PASSUTILS_H

#include "fsdp/Conversion/NNToRuntime/StepBuffers.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Runtime/Accounting.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
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

/// The function `entry` of `module` a pass works on, or null after the
/// error "no single-block function @<entry> to <purpose>" at the module.
/// Every pass finds its entry function this way.
mlir::func::FuncOp lookupEntry(mlir::ModuleOp module, llvm::StringRef entry,
                               llvm::StringRef purpose);

/// The module's dist.mesh (null when it has none and `step` needs none);
/// fails after "has collectives but no dist.mesh to <verb> them" at the
/// module when `step` has collectives and the module no mesh.
llvm::FailureOr<dist::MeshOp> meshForCollectives(mlir::ModuleOp module,
                                                 mlir::func::FuncOp step,
                                                 llvm::StringRef verb);

/// The decoder layer a parameter name or module path belongs to: its first
/// element of a module list, `<path>.<name>.<index>` (`model.layers.3.mlp.
/// up_proj.weight` and `model.layers.3` give `model.layers.3`; GPT-2's
/// `transformer.h.3`; a plain model's `blocks.3`), or "" outside any.
std::string decoderLayerOf(llvm::StringRef name);

/// The runtime's name for collective `op` (Accounting.h).
accounting::Collective collectiveKind(dist::CollectiveOpInterface op);

/// The mesh axes `op` communicates over, as a mask (bit i: axis i of
/// `mesh`), views expanded.
uint32_t axisMask(dist::CollectiveOpInterface op, dist::MeshOp mesh);

/// The group of the axes in `mask`, as the reports name it: "{dp,tp}".
std::string groupName(uint32_t mask, dist::MeshOp mesh);

/// The ranks in `op`'s group on `mesh`.
int64_t groupSize(dist::CollectiveOpInterface op, dist::MeshOp mesh);

/// The staging bytes the runtime allocates while `op` runs over `n` ranks,
/// by the runtime's own rules (Accounting.h).
accounting::Staging stagingOf(dist::CollectiveOpInterface op, int64_t n);
inline int64_t stagingBytes(dist::CollectiveOpInterface op, int64_t n) {
  return stagingOf(op, n).total();
}
/// The part of it an asynchronous `op` holds until its wait.
inline int64_t heldStagingBytes(dist::CollectiveOpInterface op, int64_t n) {
  return accounting::heldUntilWait(collectiveKind(op), stagingOf(op, n));
}

/// Writes a report to `path` (- for stdout) with `write`; when the file
/// cannot be opened, emits `what` and the reason at `op` and fails.
llvm::LogicalResult
writeReport(mlir::Operation *op, llvm::StringRef path, llvm::StringRef what,
            llvm::function_ref<void(llvm::raw_ostream &)> write);

} // namespace fsdp

#endif // FSDP_LIB_TRANSFORMS_PASSUTILS_H

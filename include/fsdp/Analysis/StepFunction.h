//===- StepFunction.h - The step function a pass works on -------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_STEPFUNCTION_H
#define FSDP_ANALYSIS_STEPFUNCTION_H

#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace fsdp {

/// The function `entry` of `module` a pass works on, or null after the
/// error "no single-block function @<entry> to <purpose>" at the module.
/// Every pass finds its entry function this way.
mlir::func::FuncOp lookupEntry(mlir::ModuleOp module, llvm::StringRef entry,
                               llvm::StringRef purpose);

/// The name of the eval step fsdp-build-train-step{eval=true} builds beside
/// the step `entry`: `<entry>_eval`.
std::string evalStepName(llvm::StringRef entry);
/// The eval step beside `entry` in its module, or null when there is none.
mlir::func::FuncOp lookupEvalStep(mlir::func::FuncOp entry);

/// The module's dist.mesh (null when it has none and `step` needs none);
/// fails after "has collectives but no dist.mesh to <verb> them" at the
/// module when `step` has collectives and the module no mesh.
llvm::FailureOr<dist::MeshOp> meshForCollectives(mlir::ModuleOp module,
                                                 mlir::func::FuncOp step,
                                                 llvm::StringRef verb);

/// A pass over the module's entry function (its option `entry`): finds it
/// as lookupEntry does, for `Derived::kPurpose`, and runs
/// `Derived::runOnEntry(module, function)`; fails where there is none.
template <typename Derived, template <typename> class Base>
struct EntryFunctionPass : Base<Derived> {
  using Base<Derived>::Base;

  void runOnOperation() final {
    mlir::ModuleOp module = this->getOperation();
    mlir::func::FuncOp function =
        lookupEntry(module, this->entry, Derived::kPurpose);
    if (!function)
      return this->signalPassFailure();
    static_cast<Derived *>(this)->runOnEntry(module, function);
  }
};

} // namespace fsdp

#endif // FSDP_ANALYSIS_STEPFUNCTION_H

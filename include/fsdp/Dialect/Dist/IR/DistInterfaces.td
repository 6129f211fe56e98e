//===- DistInterfaces.td - dist dialect interfaces ---------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTINTERFACES_TD
#define FSDP_DIALECT_DIST_IR_DISTINTERFACES_TD

include "mlir/IR/OpBase.td"

def Dist_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::fsdp::dist";
  let description = [{
    A collective over a group of ranks: those that share their coordinates
    on every mesh axis except `mesh_axes`. The communication and memory
    reports and the lowering treat all collectives alike through this
    interface.
  }];
  let methods = [
    InterfaceMethod<"The mesh the collective runs on.",
      "::mlir::FlatSymbolRefAttr", "getMeshAttr">,
    InterfaceMethod<"The mesh axes that form the group, major to minor.",
      "::mlir::ArrayAttr", "getMeshAxes">,
    InterfaceMethod<"The tensor sent.",
      "::mlir::TypedValue<::mlir::RankedTensorType>", "getInput">,
    InterfaceMethod<[{
        Checks the result shape for a group of `groupSize` ranks; emits an
        error and fails otherwise.
      }],
      "::llvm::LogicalResult", "verifyGroupShape",
      (ins "int64_t":$groupSize)>,
  ];
  let extraSharedClassDeclaration = [{
    /// The tensor the collective produces (the future's value when async).
    ::mlir::RankedTensorType getResultTensorType() {
      return ::fsdp::dist::getCollectiveResultTensorType($_op->getResult(0).getType());
    }
    /// Whether the op starts an asynchronous transfer.
    bool isAsync() {
      return ::llvm::isa<::fsdp::dist::FutureType>($_op->getResult(0).getType());
    }
  }];
}

#endif // FSDP_DIALECT_DIST_IR_DISTINTERFACES_TD

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
    reports, the simulator and the lowering treat all collectives alike
    through this interface. Each collective is one line of
    `include/fsdp/Runtime/Collectives.def` (its kind, name, traffic and
    runtime ABI), which its op names as its `kind`.
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
    InterfaceMethod<[{
        The collective's kind (Collectives.def), which gives its name, its
        traffic and the bytes one rank sends.
      }],
      "::fsdp::accounting::Collective", "getCollectiveKind", (ins), [{}],
      [{ return ConcreteOp::kCollectiveKind; }]>,
    InterfaceMethod<[{
        The buffers the runtime allocates while the collective runs over
        `groupSize` ranks (Accounting.h's rules): none unless the op says.
      }],
      "::fsdp::accounting::Staging", "getStaging",
      (ins "int64_t":$groupSize), [{}],
      [{ return ::fsdp::accounting::Staging(); }]>,
  ];
  let extraSharedClassDeclaration = [{
    /// The tensor the collective produces (the future's value when async).
    ::mlir::RankedTensorType getResultTensorType() {
      return ::fsdp::dist::getCollectiveResultTensorType($_op->getResult(0).getType());
    }
    /// The bytes one rank sends over `groupSize` ranks, by the kind's
    /// traffic. Routed rows (all_to_all_v) move at most the smaller of the
    /// input and the result: an expert dispatch's rows, or a combine's
    /// return of them from a buffer sized for the worst routing.
    int64_t getBytesSent(int64_t groupSize) {
      int64_t bytes = ::fsdp::dist::bytesOfTensor($_op.getInput().getType());
      if (::fsdp::accounting::trafficOf($_op.getCollectiveKind()) ==
          ::fsdp::accounting::Traffic::Routed)
        bytes = std::min(bytes, ::fsdp::dist::bytesOfTensor(
                                    getResultTensorType()));
      return ::fsdp::accounting::bytesSent($_op.getCollectiveKind(), bytes,
                                           groupSize);
    }
    /// Whether the op starts an asynchronous transfer.
    bool isAsync() {
      return ::llvm::isa<::fsdp::dist::FutureType>($_op->getResult(0).getType());
    }
  }];
}

/// The kind of a collective op: its line of Collectives.def.
class Dist_CollectiveKind<string kind>
    : NativeOpTrait<"CollectiveKind", [], [{
        static constexpr ::fsdp::accounting::Collective kCollectiveKind =
            ::fsdp::accounting::Collective::}] # kind # [{;
      }]> {
  let cppNamespace = "::fsdp::dist";
}

#endif // FSDP_DIALECT_DIST_IR_DISTINTERFACES_TD

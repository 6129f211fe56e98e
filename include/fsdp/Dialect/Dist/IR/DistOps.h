//===- DistOps.h - dist dialect operations ----------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTOPS_H
#define FSDP_DIALECT_DIST_IR_DISTOPS_H

#include "fsdp/Dialect/Dist/IR/DistDialect.h"
#include "fsdp/Interfaces/RuntimeCallInterface.h"
#include "fsdp/Runtime/Accounting.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace fsdp::dist {
/// The tensor a collective yields: `type` itself, or a future's value type.
mlir::RankedTensorType getCollectiveResultTensorType(mlir::Type type);
/// The bytes of a tensor of `type`.
int64_t bytesOfTensor(mlir::RankedTensorType type);
/// The trait carrying a collective op's kind (Dist_CollectiveKind), which
/// CollectiveOpInterface::getCollectiveKind reads.
template <typename ConcreteType>
class CollectiveKind
    : public mlir::OpTrait::TraitBase<ConcreteType, CollectiveKind> {};
} // namespace fsdp::dist

#include "fsdp/Dialect/Dist/IR/DistInterfaces.h.inc"

namespace fsdp::dist {
/// Checks what a collective can check without its mesh: distinct axes, the
/// element type, a future waited on exactly once.
llvm::LogicalResult verifyCollective(CollectiveOpInterface op);
/// Checks a collective against its mesh: the axes exist, and the result
/// shape fits the group size.
llvm::LogicalResult
verifyCollectiveSymbolUses(CollectiveOpInterface op,
                           mlir::SymbolTableCollection &symbolTable);
} // namespace fsdp::dist

#define GET_OP_CLASSES
#include "fsdp/Dialect/Dist/IR/DistOps.h.inc"

namespace fsdp::dist {
/// The mesh the ops of `module` run on: its (last) dist.mesh, or null.
MeshOp findMesh(mlir::ModuleOp module);
} // namespace fsdp::dist

#endif // FSDP_DIALECT_DIST_IR_DISTOPS_H

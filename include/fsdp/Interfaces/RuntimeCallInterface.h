//===- RuntimeCallInterface.h - An op's runtime call ------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_INTERFACES_RUNTIMECALLINTERFACE_H
#define FSDP_INTERFACES_RUNTIMECALLINTERFACE_H

#include "mlir/IR/OpDefinition.h"

namespace fsdp {
/// Carries an op's runtime call (RuntimeCallInterface.td) as static members
/// that RuntimeCallOpInterface's methods read.
template <typename ConcreteType>
class RuntimeCallInfo
    : public mlir::OpTrait::TraitBase<ConcreteType, RuntimeCallInfo> {};
} // namespace fsdp

#include "fsdp/Interfaces/RuntimeCallInterface.h.inc"

#endif // FSDP_INTERFACES_RUNTIMECALLINTERFACE_H

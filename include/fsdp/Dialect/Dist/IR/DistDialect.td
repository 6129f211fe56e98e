//===- DistDialect.td - The dist dialect definition --------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTDIALECT_TD
#define FSDP_DIALECT_DIST_IR_DISTDIALECT_TD

include "mlir/IR/OpBase.td"

def Dist_Dialect : Dialect {
  let name = "dist";
  let cppNamespace = "::fsdp::dist";
  let summary = "Device meshes, shardings and collectives";
  let description = [{
    The `dist` dialect describes how a program is spread over ranks: a
    `dist.mesh` symbol names the axes of the device mesh (TP innermost), a
    `#dist.sharding` attribute says for each tensor dimension which mesh axes
    split it (and over which axes a value is still a partial sum), and the
    collectives move data along one or several mesh axes.

    Every collective has a synchronous form and an asynchronous one: when
    its result type is `!dist.future<T>` the op only starts the transfer,
    and `dist.wait` yields the `T`. Scheduling passes move the wait (and the
    start) to overlap communication with compute without changing the
    collective itself.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // `dist.tp` on an op must be a #dist.tp style; `dist.sharding` on a
  // function argument must fit the argument and the mesh.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The discardable attribute holding an op's tensor-parallel style.
    static constexpr llvm::StringLiteral kTPStyleAttrName = "dist.tp";
    /// The argument (and result) attribute holding a value's sharding.
    static constexpr llvm::StringLiteral kShardingAttrName = "dist.sharding";
  }];
}

#endif // FSDP_DIALECT_DIST_IR_DISTDIALECT_TD

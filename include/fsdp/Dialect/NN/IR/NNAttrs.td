//===- NNAttrs.td - nn dialect attributes ------------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNATTRS_TD
#define FSDP_DIALECT_NN_IR_NNATTRS_TD

include "fsdp/Dialect/NN/IR/NNDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def NN_InitKind : I32EnumAttr<"InitKind", "parameter initializer kind", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
    I32EnumAttrCase<"uniform", 3>
  ]> {
  let cppNamespace = "::fsdp::nn";
  let genSpecializedAttr = 0;
}

def NN_LrSchedule : I32EnumAttr<"LrSchedule", "learning-rate schedule", [
    I32EnumAttrCase<"constant", 0>,
    I32EnumAttrCase<"linear", 1>,
    I32EnumAttrCase<"cosine", 2>
  ]> {
  let cppNamespace = "::fsdp::nn";
}

def NN_InitAttr : AttrDef<NN_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "How a parameter is initialized";
  let description = [{
    `#nn.init<zeros>`, `#nn.init<ones>`, `#nn.init<normal, mean = 0.0,
    std = 0.02>` or `#nn.init<uniform, low = -0.1, high = 0.1>`. The runtime
    draws values from a counter-based generator keyed by the parameter name
    and element index, so any rank can produce exactly its own shard.
  }];
  let parameters = (ins
    EnumParameter<NN_InitKind>:$kind,
    // normal: mean and standard deviation; uniform: low and high bound.
    APFloatParameter<"mean (normal) or low bound (uniform)">:$a,
    APFloatParameter<"std (normal) or high bound (uniform)">:$b
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // FSDP_DIALECT_NN_IR_NNATTRS_TD

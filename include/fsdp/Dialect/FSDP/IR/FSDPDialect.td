//===- FSDPDialect.td - FSDP's annotations -----------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_FSDP_IR_FSDPDIALECT_TD
#define FSDP_DIALECT_FSDP_IR_FSDPDIALECT_TD

include "mlir/IR/OpBase.td"

def FSDP_Dialect : Dialect {
  let name = "fsdp";
  let cppNamespace = "::fsdp";
  let summary = "The annotations FSDP's passes write and read";
  let description = [{
    The `fsdp` dialect has no ops: it owns the discardable attributes that
    `fsdp-tp-plan`, `fsdp-shard` and `fsdp-build-train-step` pass to each
    other and to the lowering, and verifies each where it stands, so a
    misspelt or malformed one is an error where it is parsed.

    | attribute | on | value |
    |---|---|---|
    | `fsdp.unit` | a unit's `dist.all_gather` | the unit's name |
    | `fsdp.reshard`, `fsdp.regather` | a unit's `dist.all_gather` | unit |
    | `fsdp.recompute` | an op activation checkpointing cloned into the backward | unit |
    | `fsdp.activation_checkpointing` | the module | `full` or `selective` |
    | `fsdp.async_tp` | the module | unit: fsdp-async-tp decomposes the tp collectives |
    | `fsdp.offload` | the module | unit: CPU offload (`offload_policy`), which fsdp-offload applies |
    | `fsdp.offload_optimizer` | the module | `"cpu"` or `"gpu"`: where fsdp-offload's optimizer runs (the host's cores, or kernels reading pinned memory) |
    | `fsdp.host` | an op, or an argument of the step | unit: placed in host memory by fsdp-offload (the op runs on the host; its results are host buffers) |
    | `fsdp.activation_memory_budget` | the module | bytes per rank, or a fraction (<= 1) |
    | `fsdp.mp_policy` | the module | `#fsdp.mp_policy<param = bf16, reduce = f32, output = bf16, cast_forward_inputs = true>` |
    | `fsdp.precision` | the module | `{param, reduce, output, master}` dtypes |
    | `fsdp.data_parallel` | the module | the data-parallel mesh axes |
    | `fsdp.defer_grad_sync` | the module | bool |
    | `fsdp.reshard_after_forward` | the module | `none`, `true` or `false` |
    | `fsdp.inner_axes`, `fsdp.global_shape` | a parameter argument | one integer per dim |
  }];
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let useDefaultAttributePrinterParser = 1;
}

include "mlir/IR/AttrTypeBase.td"

def FSDP_MixedPrecisionPolicyAttr
    : AttrDef<FSDP_Dialect, "MixedPrecisionPolicy"> {
  let mnemonic = "mp_policy";
  let summary = "FSDP2's MixedPrecisionPolicy";
  let description = [{
    The dtypes parameters are cast to for forward and backward (`param`),
    gradients are reduced across ranks in (`reduce`) and outputs are cast
    to (`output`), each f32, bf16 or f16, and whether float data inputs are
    cast to the parameter dtype. `fsdp-tp-plan` records the parallel
    config's as the module attribute `fsdp.mp_policy`;
    `fsdp-build-train-step` applies it unless given its own dtype options.

    ```mlir
    module attributes {fsdp.mp_policy = #fsdp.mp_policy<param = bf16,
        reduce = f32, output = bf16, cast_forward_inputs = true>} { ... }
    ```
  }];
  let parameters = (ins "::mlir::Type":$param, "::mlir::Type":$reduce,
                        "::mlir::Type":$output,
                        "::mlir::BoolAttr":$castForwardInputs);
  let assemblyFormat = [{
    `<` `param` `=` $param `,` `reduce` `=` $reduce `,` `output` `=` $output
    `,` `cast_forward_inputs` `=` $castForwardInputs `>`
  }];
  let genVerifyDecl = 1;
}

#endif // FSDP_DIALECT_FSDP_IR_FSDPDIALECT_TD

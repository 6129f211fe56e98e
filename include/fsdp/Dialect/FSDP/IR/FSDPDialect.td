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
    the passes pass to each other and to the lowering, and verifies each
    where it stands, so a misspelt or malformed one is an error where it is
    parsed.

    | attribute | on | value |
    |---|---|---|
    | `fsdp.parallel` | the module | `#fsdp.parallel<...>`: the parallel config, typed, which `fsdp-parallel-config` writes and every pass reads its own fields of |
    | `fsdp.unit` | a unit's `dist.all_gather` | the unit's name |
    | `fsdp.reshard`, `fsdp.regather` | a unit's `dist.all_gather` | unit |
    | `fsdp.recompute` | an op activation checkpointing cloned into the backward | unit |
    | `fsdp.offload_optimizer` | the module | `"cpu"` or `"gpu"`: where fsdp-offload's optimizer runs (the host's cores, or kernels reading pinned memory) |
    | `fsdp.host` | an op, or an argument of the step | unit: placed in host memory by fsdp-offload (the op runs on the host; its results are host buffers) |
    | `fsdp.precision` | the module | `{param, reduce, output, master}` dtypes |
    | `fsdp.data_parallel` | the module | the mesh axes whose ranks hold other tokens (fsdp-shard's batch split, and cp's sequence split): the loss counts tokens over them |
    | `fsdp.context_parallel` | a `dist.all_gather` of keys or values over cp | unit: fsdp-context-parallel's, which the comm report counts as context parallelism's |
    | `fsdp.expert_parallel` | a `dist.all_to_all_v` of expert rows over ep | unit: fsdp-expert-parallel's dispatch or combine |
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
    cast to the parameter dtype: the `mp_policy` of `#fsdp.parallel`, which
    `fsdp-build-train-step` applies unless given its own dtype options.

    ```mlir
    #fsdp.mp_policy<param = bf16, reduce = f32, output = bf16,
                    cast_forward_inputs = true>
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

/// A parameter of one of the config's enums (ParallelConfig.h), spelt by
/// its EnumNames.
class FSDP_EnumParameter<string cppType, string desc>
    : AttrParameter<cppType, desc> {
  let parser = "::fsdp::parseEnumParameter<" # cppType # ">($_parser)";
  let printer = "$_printer << ::fsdp::enumName($_self)";
}

def FSDP_ParallelConfigAttr : AttrDef<FSDP_Dialect, "ParallelConfig"> {
  let mnemonic = "parallel";
  let summary = "The parallel configuration of the compile, typed";
  let description = [{
    `parallel.json` (docs/parallel-config.md: NeMo Automodel's
    ParallelismSizes and FSDP2Config), read once by `fsdp-parallel-config`
    and recorded on the module as `fsdp.parallel`; every pass reads the
    fields it acts on from here (and its own options, which override
    them), so no setting travels as a string and no pass writes another's.

    - the mesh sizes `dp_replicate`, `dp_shard`, `cp`, `tp`, `ep` (the mesh
      over the first four is `dist.mesh`), and `cp_comm_type`: `p2p` or
      `all_gather` (fsdp-context-parallel);
    - `sequence_parallel`, `async_tp` (fsdp-tp-plan, fsdp-async-tp);
    - `reshard_after_forward`: `all_but_last` (null), `always`, `never`,
      and `defer_grad_sync` (fsdp-shard, fsdp-build-train-step);
    - `activation_checkpointing`: `none`, `full`, `selective`, and
      `activation_memory_budget` (0: none) (fsdp-build-train-step);
    - `offload_policy`: `none` or `cpu` (fsdp-offload);
    - `forward_prefetch`, `backward_prefetch`: the depths fsdp-schedule
      starts all-gathers ahead;
    - `mp_policy` (fsdp-build-train-step);
    - `tp_plan`: the config's plan as `#dist.tp` styles whose `entry` is
      the module glob, absent for the model family's built-in plan;
      `source`: the config file, for messages.

    ```mlir
    module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1,
        dp_shard = 2, cp = 1, cp_comm_type = p2p, tp = 2, ep = 1,
        sequence_parallel = true, async_tp = false, reshard_after_forward = all_but_last,
        defer_grad_sync = true, activation_checkpointing = none,
        activation_memory_budget = 0.000000e+00 : f64,
        offload_policy = none, forward_prefetch = 1, backward_prefetch = 1,
        mp_policy = #fsdp.mp_policy<param = bf16, reduce = f32,
                                    output = bf16, cast_forward_inputs = true>>}
    ```
  }];
  let parameters = (ins
    "int64_t":$dp_replicate, "int64_t":$dp_shard, "int64_t":$cp,
    FSDP_EnumParameter<"::fsdp::CpCommType",
                       "context parallelism's K/V exchange">:$cp_comm_type,
    "int64_t":$tp, "int64_t":$ep,
    "::mlir::BoolAttr":$sequence_parallel, "::mlir::BoolAttr":$async_tp,
    FSDP_EnumParameter<"::fsdp::ReshardPolicy",
                       "FSDP2's reshard_after_forward">:$reshard_after_forward,
    "::mlir::BoolAttr":$defer_grad_sync,
    FSDP_EnumParameter<"::fsdp::CheckpointMode",
                       "activation checkpointing">:$activation_checkpointing,
    "::mlir::FloatAttr":$activation_memory_budget,
    FSDP_EnumParameter<"::fsdp::OffloadPolicy",
                       "FSDP2's offload_policy">:$offload_policy,
    "int64_t":$forward_prefetch, "int64_t":$backward_prefetch,
    "MixedPrecisionPolicyAttr":$mp_policy,
    OptionalParameter<"::mlir::ArrayAttr">:$tp_plan,
    OptionalParameter<"::mlir::StringAttr">:$source);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The module's `fsdp.parallel`, or null when it has none (a program
    /// compiled with no parallel option).
    static ParallelConfigAttr of(::mlir::Operation *module);
    /// The number of ranks of the mesh.
    int64_t getWorld() const {
      return getDpReplicate() * getDpShard() * getCp() * getTp();
    }
  }];
}

#endif // FSDP_DIALECT_FSDP_IR_FSDPDIALECT_TD

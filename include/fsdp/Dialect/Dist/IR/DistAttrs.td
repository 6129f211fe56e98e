//===- DistAttrs.td - dist dialect attributes and types ----*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTATTRS_TD
#define FSDP_DIALECT_DIST_IR_DISTATTRS_TD

include "fsdp/Dialect/Dist/IR/DistDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"

def Dist_ReductionKind : I32EnumAttr<"ReductionKind",
    "how a collective combines values", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"avg", 1>,
    I32EnumAttrCase<"max", 2>
  ]> {
  let cppNamespace = "::fsdp::dist";
}

/// Printed as a bare keyword (`sum`) inside collectives.
defvar Dist_ReductionKindAttr = Dist_ReductionKind;

def Dist_ShardingAttr : AttrDef<Dist_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over a mesh";
  let description = [{
    For each tensor dimension, the ordered list of mesh axes that split it
    (major to minor: `[dp_shard, tp]` means the dim is cut into
    `|dp_shard| · |tp|` blocks, block `i_dp · |tp| + i_tp` on rank
    `(i_dp, i_tp)`); an empty list means the dim is whole on every rank.
    `partial` lists the axes over which the value is an unreduced sum: the
    true value is the sum of the ranks' values along those axes. An axis is
    used at most once. Axes not mentioned replicate the value.

    `groups` (one count per dim, omitted when all are 1) describes a
    strided split, torch's `_StridedShard`: dim `d` is cut into `groups[d]`
    equal groups, each split over the dim's axes, and a rank holds its block
    of every group, in group order. A fused `[Q | K | V]` projection split
    over tp this way gives each rank its own heads of Q, K and V. The count
    `-2` (`kLoadBalanced`) is context parallelism's load-balanced split of a
    sequence: the dim is cut into `2·n` chunks for the `n` blocks of its
    axes, and block `i` holds chunks `i` and `2·n−1−i`, so that under a
    causal mask every rank attends as many pairs. `-2·k` repeats that over
    `k` rounds (packed rows): `2·n·k` chunks, block `i` holding chunks
    `2·n·m + i` and `2·n·m + 2·n−1−i` of each round `m`, in order.

    ```mlir
    // A [V, H] embedding table: rows split over dp_shard, columns over tp.
    #dist.sharding<@mesh, [[dp_shard], [tp]]>
    // Token ids [B, S], context-parallel: chunks i and 2·cp−1−i on cp rank i.
    #dist.sharding<@mesh, [[], [cp]], groups = [1, -2]>
    // A row-parallel output before its reduction.
    #dist.sharding<@mesh, [[], [], []], partial = [tp]>
    // GPT-2's fused c_attn weight [H, 3H]: each third split over tp.
    #dist.sharding<@mesh, [[], [tp]], groups = [1, 3]>
    ```
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    // One ArrayAttr of StringAttr axis names per tensor dimension.
    "::mlir::ArrayAttr":$dims,
    // StringAttr axis names.
    "::mlir::ArrayAttr":$partial,
    // One group count per dim, or empty when every dim has one group.
    "::mlir::DenseI64ArrayAttr":$groups
  );
  let builders = [
    AttrBuilder<(ins "::mlir::FlatSymbolRefAttr":$mesh,
                     "::mlir::ArrayAttr":$dims, "::mlir::ArrayAttr":$partial), [{
      return $_get($_ctxt, mesh, dims, partial,
                   ::mlir::DenseI64ArrayAttr::get($_ctxt, {}));
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The axes that split dimension `dim`.
    llvm::SmallVector<llvm::StringRef> getDimAxes(unsigned dim) const;
    /// The axes over which the value is a partial sum.
    llvm::SmallVector<llvm::StringRef> getPartialAxes() const;
    /// The number of groups dimension `dim` is split in (1: plain), or
    /// kLoadBalanced.
    int64_t getDimGroups(unsigned dim) const;
    /// The group count of a load-balanced sequence split (of one round).
    static constexpr int64_t kLoadBalanced = -2;
    /// Whether group count `groups` is a load-balanced split, of
    /// `-groups / 2` rounds.
    static bool isLoadBalanced(int64_t groups) {
      return groups <= kLoadBalanced && groups % 2 == 0;
    }
    /// Checks the sharding against `mesh` for a tensor of `type`: the rank,
    /// and that every axis exists in the mesh.
    llvm::LogicalResult verifyFor(::mlir::Operation *mesh,
                                  ::mlir::RankedTensorType type,
                                  llvm::function_ref<::mlir::InFlightDiagnostic()>
                                      emitError) const;
  }];
}

def Dist_TPStyleKind : I32EnumAttr<"TPStyleKind",
    "a tensor-parallel style", [
    I32EnumAttrCase<"colwise", 0>,
    I32EnumAttrCase<"rowwise", 1>,
    I32EnumAttrCase<"sequence_parallel", 2>
  ]> {
  let cppNamespace = "::fsdp::dist";
  let genSpecializedAttr = 0;
}

def Dist_TPLayoutAttr : AttrDef<Dist_Dialect, "TPLayout"> {
  let mnemonic = "layout";
  let summary = "A tensor's layout over the tp axis: replicated or sharded";
  let description = [{
    Torch's placements `Replicate()` and `Shard(dim)`: `#dist.layout<replicate>`
    or `#dist.layout<shard(-1)>` (a negative dim counts from the end). Inside
    `#dist.tp` the layout is written without the `#dist.layout<...>` around
    it.
  }];
  let parameters = (ins "bool":$sharded, "int64_t":$dim);
  let assemblyFormat = "`<` custom<TPLayoutBody>($sharded, $dim) `>`";
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins), [{ return $_get($_ctxt, false, 0); }]>,
    AttrBuilder<(ins "int64_t":$dim), [{ return $_get($_ctxt, true, dim); }]>
  ];
}

def Dist_TPStyleAttr : AttrDef<Dist_Dialect, "TPStyle"> {
  let mnemonic = "tp";
  let summary = "The tensor-parallel style an op of the global program runs under";
  let description = [{
    What `fsdp-tp-plan` writes on each op a plan entry matches, as the
    discardable attribute `dist.tp`, and `fsdp-partition` reads: the style
    (torch's ColwiseParallel, RowwiseParallel, SequenceParallel), the
    layouts the module's input and output have over tp (`replicate` or
    `shard(d)`, torch's `input_layouts`/`output_layouts`, as
    `#dist.layout`s), whether the
    output stays local (`use_local_output`), and the plan key it came from.
    The dist dialect verifies every `dist.tp` on an op, so a malformed one
    is an error where it is parsed.

    ```mlir
    %q = nn.linear %h, %wq {dist.tp = #dist.tp<colwise, input = replicate,
        output = shard(-1), use_local_output = true,
        entry = "model.layers.*.self_attn.q_proj">} : ...
    ```
  }];
  let parameters = (ins
    "::fsdp::dist::TPStyleKind":$kind,
    "::fsdp::dist::TPLayoutAttr":$input,
    "::fsdp::dist::TPLayoutAttr":$output,
    "::mlir::BoolAttr":$useLocalOutput,
    "::mlir::StringAttr":$entry
  );
  let assemblyFormat = [{
    `<` $kind `,` `input` `=` custom<TPLayout>($input) `,`
    `output` `=` custom<TPLayout>($output) `,`
    `use_local_output` `=` $useLocalOutput `,` `entry` `=` $entry `>`
  }];
  let genVerifyDecl = 1;
}

def Dist_FutureType : TypeDef<Dist_Dialect, "Future"> {
  let mnemonic = "future";
  let summary = "The pending result of an asynchronous collective";
  let description = [{
    `!dist.future<tensor<...>>` is returned by a collective started
    asynchronously; `dist.wait` turns it into the tensor. Each future is
    waited on exactly once.
  }];
  let parameters = (ins "::mlir::RankedTensorType":$valueType);
  let assemblyFormat = "`<` $valueType `>`";
}

#endif // FSDP_DIALECT_DIST_IR_DISTATTRS_TD

//===- DistOps.td - dist dialect operations ----------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_DIST_IR_DISTOPS_TD
#define FSDP_DIALECT_DIST_IR_DISTOPS_TD

include "fsdp/Dialect/Dist/IR/DistDialect.td"
include "fsdp/Dialect/Dist/IR/DistAttrs.td"
include "fsdp/Dialect/Dist/IR/DistInterfaces.td"
include "fsdp/Interfaces/RuntimeCallInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Dist_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dist_Dialect, mnemonic, traits>;

def Dist_TensorOrFuture : AnyTypeOf<[AnyRankedTensor, Dist_FutureType]>;

//===----------------------------------------------------------------------===//
// Mesh and sharding
//===----------------------------------------------------------------------===//

def Dist_MeshOp : Dist_Op<"mesh", [Symbol]> {
  let summary = "A device mesh with named axes";
  let description = [{
    Declares the logical arrangement of ranks: named axes with sizes, the
    last axis varying fastest (rank = row-major index of the coordinates).
    TP is conventionally innermost so that its collectives stay within a
    node.

    ```mlir
    dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 2)
    ```

    `views` names flattened groups of axes, e.g. FSDP2's `dp = [dp_replicate,
    dp_shard]`, `dp_shard_cp = [dp_shard, cp]` and `dp_cp`; a collective or
    sharding may name a view wherever it names an axis, and means the view's
    axes in order.

    ```mlir
    dist.mesh @mesh(dp_replicate = 2, dp_shard = 2, cp = 1, tp = 2)
        {views = {dp = ["dp_replicate", "dp_shard"]}}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$shape,
                       OptionalAttr<DictionaryAttr>:$views);
  let assemblyFormat = "$sym_name `(` custom<MeshShape>($axes, $shape) `)` attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The size of axis or view `name`, if the mesh has it.
    std::optional<int64_t> getAxisSize(llvm::StringRef name);
    /// The axes `name` stands for: itself for an axis, its axes for a view,
    /// none if the mesh has neither.
    llvm::SmallVector<llvm::StringRef> expandAxis(llvm::StringRef name);
    /// The number of ranks: the product of all axis sizes.
    int64_t getNumRanks();
  }];
}

def Dist_CopyOp : Dist_Op<"copy", [
    Pure, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Identity whose gradient is an all_reduce (Megatron's f)";
  let description = [{
    Marks a value replicated over `mesh_axes` entering computation that each
    rank does on its own part (a column-parallel projection): the forward is
    the identity, and because every rank's gradient is a partial sum, the
    gradient is an `all_reduce` (sum) over the same axes. It moves no data
    forward.

    ```mlir
    %x1 = dist.copy %x on @mesh[tp] : tensor<2x16x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$mesh_axes);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` custom<MeshAxes>($mesh, $mesh_axes) attr-dict `:` type($input)
  }];
}

def Dist_AllSliceOp : Dist_Op<"all_slice", [
    RuntimeCall<"fsdp_op_all_slice", "mesh_axes:group slice_dim:int">,
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Each rank keeps its block of a replicated value";
  let description = [{
    The inverse of `all_gather` without communication: `input` is whole on
    every rank of the group spanned by `mesh_axes`; each rank keeps block
    `i` (its index in the group) of `slice_dim`. The gradient is an
    `all_gather` along the same dim.

    ```mlir
    %s = dist.all_slice %x on @mesh[tp] slice_dim = 1
        : tensor<2x16x64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$mesh_axes, I64Attr:$slice_dim);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` custom<MeshAxes>($mesh, $mesh_axes) `slice_dim` `=` $slice_dim attr-dict `:` type($input) `->` type($result)
  }];
}

def Dist_AxisIndexOp : Dist_Op<"axis_index", [
    RuntimeCall<"fsdp_op_axis_index", "mesh_axes:group">,
    Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "This rank's index in the group spanned by mesh axes";
  let description = [{
    A scalar i64: the rank's block number along `mesh_axes` (row-major in
    the listed order), the `k` of a vocabulary-parallel block.

    ```mlir
    %k = dist.axis_index @mesh[tp] : tensor<i64>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$mesh_axes);
  let results = (outs 0DTensorOf<[I64]>:$result);
  let assemblyFormat = [{
    custom<MeshAxes>($mesh, $mesh_axes) attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// A collective on `input` over the group spanned by `mesh_axes` of `mesh`:
/// the op of `kind`'s line in Collectives.def, whose runtime call is
/// fsdp_op_<mnemonic> (or fsdp_op_<mnemonic>_start). Its result is the
/// tensor, or a `!dist.future` of it when started asynchronously. An op
/// that allocates staging lists "getStaging" in `methods`.
class Dist_CollectiveOp<string mnemonic, string kind, dag extraArgs,
                        string extraFormat, string runtimeLiterals,
                        list<Trait> traits = [], list<string> methods = []>
    : Dist_Op<mnemonic, !listconcat(traits, [
          RuntimeCall<"fsdp_op_" # mnemonic,
                      "mesh_axes:group " # runtimeLiterals>,
          Dist_CollectiveKind<kind>,
          DeclareOpInterfaceMethods<SymbolUserOpInterface>,
          DeclareOpInterfaceMethods<Dist_CollectiveOpInterface, methods>])> {
  let arguments = !con((ins AnyRankedTensor:$input, FlatSymbolRefAttr:$mesh,
                            StrArrayAttr:$mesh_axes), extraArgs);
  let results = (outs Dist_TensorOrFuture:$result);
  let assemblyFormat = "$input `on` custom<MeshAxes>($mesh, $mesh_axes) "
      # extraFormat # " attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyCollective(*this);
    }
    ::llvm::LogicalResult
    $cppClass::verifySymbolUses(::mlir::SymbolTableCollection &symbolTable) {
      return verifyCollectiveSymbolUses(*this, symbolTable);
    }
  }];
}

def Dist_AllGatherOp : Dist_CollectiveOp<"all_gather", "AllGather",
    (ins I64Attr:$gather_dim, UnitAttr:$replicated_grad),
    "`dim` $gather_dim (`replicated_grad` $replicated_grad^)?",
    "gather_dim:int", [], ["getStaging"]> {
  let summary = "Concatenate the group's tensors along `gather_dim`";
  let description = [{
    Each rank contributes its tensor; the result, identical on every rank of
    the group, is their concatenation in group order along `gather_dim`.

    The gradient is a `reduce_scatter`: right when the result feeds
    computation each rank does on its own part (a column-parallel
    projection), whose gradients are partial sums. With `replicated_grad`
    the result feeds computation every rank repeats, whose gradient is the
    same on every rank, and the gradient keeps this rank's block
    (`all_slice`, no communication): Megatron's gather whose backward is a
    split.

    ```mlir
    %full = dist.all_gather %shard on @mesh[dp_shard] dim 0
        : tensor<16x64xf32> -> tensor<32x64xf32>
    ```
  }];
}

def Dist_ReduceScatterOp : Dist_CollectiveOp<"reduce_scatter", "ReduceScatter",
    (ins Dist_ReductionKindAttr:$reduction, I64Attr:$scatter_dim),
    "$reduction `dim` $scatter_dim",
    "reduction:reduce scatter_dim:int", [], ["getStaging"]> {
  let summary = "Reduce across the group, each rank keeping one slice";
  let description = [{
    The group's tensors are combined elementwise with `reduction`; rank `i`
    of the group keeps block `i` of the result along `scatter_dim`, whose
    size must divide by the group size. The transpose of `all_gather`.

    ```mlir
    %g = dist.reduce_scatter %grad on @mesh[dp_shard] sum dim 0
        : tensor<32x64xf32> -> tensor<16x64xf32>
    ```
  }];
}

def Dist_AllReduceOp : Dist_CollectiveOp<"all_reduce", "AllReduce",
    (ins Dist_ReductionKindAttr:$reduction), "$reduction",
    "reduction:reduce", [], ["getStaging"]> {
  let summary = "Combine the group's tensors elementwise on every rank";
  let description = [{
    ```mlir
    %s = dist.all_reduce %partial on @mesh[tp] sum
        : tensor<2x16x64xf32> -> tensor<2x16x64xf32>
    ```
  }];
}

def Dist_AllToAllOp : Dist_CollectiveOp<"all_to_all", "AllToAll",
    (ins I64Attr:$split_dim, I64Attr:$concat_dim),
    "`split` $split_dim `concat` $concat_dim",
    "split_dim:int concat_dim:int", [], ["getStaging"]> {
  let summary = "Exchange blocks: split one dim across the group, join another";
  let description = [{
    Each rank cuts its tensor into group-size blocks along `split_dim` and
    sends block `j` to group member `j`; the received blocks are joined in
    group order along `concat_dim`. Its inverse swaps the two dims.

    ```mlir
    %y = dist.all_to_all %x on @mesh[cp] split 2 concat 1
        : tensor<2x8x4x16xf32> -> tensor<2x16x2x16xf32>
    ```
  }];
}

def Dist_PermuteOp : Dist_CollectiveOp<"permute", "Permute",
    (ins I64Attr:$offset), "`offset` $offset",
    "offset:int"> {
  let summary = "Ring shift: send to the group member `offset` places on";
  let description = [{
    Group member `i` sends its tensor to member `(i + offset) mod n` and
    receives from `(i - offset) mod n`. The building block of ring
    attention and of decomposed (async) tensor parallelism.

    ```mlir
    %next = dist.permute %kv on @mesh[cp] offset 1
        : tensor<2x8x2x16xf32> -> tensor<2x8x2x16xf32>
    ```
  }];
}

def Dist_BroadcastOp : Dist_CollectiveOp<"broadcast", "Broadcast",
    (ins I64Attr:$root), "`root` $root",
    "root:int"> {
  let summary = "Copy the tensor of group member `root` to the whole group";
  let description = [{
    ```mlir
    %w = dist.broadcast %w0 on @mesh[dp_replicate] root 0
        : tensor<64x64xf32> -> tensor<64x64xf32>
    ```
  }];
}

def Dist_AllToAllVOp : Dist_CollectiveOp<"all_to_all_v", "AllToAllV",
    (ins 1DTensorOf<[I64]>:$send_counts, 1DTensorOf<[I64]>:$recv_counts),
    "`counts` `(` $send_counts `,` $recv_counts `:` type($send_counts) `)`",
    "", [AllTypesMatch<["send_counts", "recv_counts"]>]> {
  let summary = "Exchange rows in counts known only on the device";
  let description = [{
    The variable-split all-to-all of expert parallelism (token dispatch and
    combine). The rows of `input` (its dim 0) go out in group order: the
    first `send_counts[0]` to member 0, the next `send_counts[1]` to member
    1, and so on; rows past their sum are not sent. The result holds the
    `recv_counts[i]` rows member `i` sent this rank, in group order, then
    zero rows up to its static size, which bounds what may arrive (dropless
    routing: the group size times the input's rows). `recv_counts` must be
    what the members' `send_counts` say (the `dist.all_to_all` of
    `send_counts`); the counts are i64 tensors of the group size, computed
    on the device, so nothing waits for the host.

    The gradient is the same exchange backwards: `all_to_all_v` of the
    result's gradient with the counts swapped.

    ```mlir
    %recv = dist.all_to_all %send on @mesh[ep] split 0 concat 0
        : tensor<4xi64> -> tensor<4xi64>
    %y = dist.all_to_all_v %x on @mesh[ep] counts(%send, %recv : tensor<4xi64>)
        : tensor<8x16xf32> -> tensor<32x16xf32>
    ```
  }];
}

def Dist_WaitOp : Dist_Op<"wait", [
    TypesMatchWith<"result is the future's value type", "future", "result",
                   "::llvm::cast<::fsdp::dist::FutureType>($_self).getValueType()">]> {
  let summary = "Complete an asynchronous collective";
  let description = [{
    Blocks (on the device stream, not the host) until the collective that
    produced `future` has finished, and yields its tensor.

    ```mlir
    %f = dist.all_gather %w on @mesh[dp_shard] dim 0
        : tensor<16x64xf32> -> !dist.future<tensor<32x64xf32>>
    %full = dist.wait %f : !dist.future<tensor<32x64xf32>>
    ```
  }];
  let arguments = (ins Dist_FutureType:$future);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$future attr-dict `:` qualified(type($future))";
}

#endif // FSDP_DIALECT_DIST_IR_DISTOPS_TD

//===- NNOps.td - nn dialect operations --------------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNOPS_TD
#define FSDP_DIALECT_NN_IR_NNOPS_TD

include "fsdp/Dialect/NN/IR/NNDialect.td"
include "fsdp/Dialect/NN/IR/NNAttrs.td"
include "fsdp/Dialect/NN/IR/NNInterfaces.td"
include "fsdp/Interfaces/RuntimeCallInterface.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def NN_FloatTensor : RankedTensorOf<[F32, BF16, F16]>;
def NN_IndexTensor : RankedTensorOf<[I32, I64]>;
def NN_AnyTensor : RankedTensorOf<[F32, BF16, F16, I32, I64]>;

/// An op with a gradient rule (GradientOpInterface, NNGradientRules.cpp).
defvar NN_Differentiable = DeclareOpInterfaceMethods<NN_GradientOpInterface>;

/// An op with a cost rule other than streaming its operands (CostOpInterface,
/// NNCostRules.cpp).
defvar NN_Costed = DeclareOpInterfaceMethods<NN_CostOpInterface>;

/// The module path an op came from; tensor-parallel plans match on it.
defvar NN_Path = (ins OptionalAttr<StrAttr>:$path);

//===----------------------------------------------------------------------===//
// Base classes
//===----------------------------------------------------------------------===//

/// InferTypeOpInterface through the shape rule, silently: ShapeRuleOpInterface
/// (verified first) reports a broken rule once. It gives every op generated
/// builders without result types (`MatmulOp::create(b, loc, lhs, rhs, ...)`).
defvar NN_InferReturnTypes = [{
  ::llvm::LogicalResult $cppClass::inferReturnTypes(
      ::mlir::MLIRContext *context, std::optional<::mlir::Location>,
      Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &results) {
    return inferTypes(context, std::nullopt, adaptor, results);
  }
}];

/// Every nn op is pure and infers its result types with its shape rule,
/// written in C++ as `inferTypes`; the verifier checks the written result
/// types against it. The shape rule comes first among the traits, so that
/// its error is the only one a broken op gets.
/// Every nn op's declaration of its shape rule.
defvar NN_ShapeRuleDeclaration = [{
    /// The op's shape and dtype rule.
    static ::llvm::LogicalResult
    inferTypes(::mlir::MLIRContext *context,
               std::optional<::mlir::Location> location, Adaptor adaptor,
               ::llvm::SmallVectorImpl<::mlir::Type> &results);
}];

class NN_OpBase<string mnemonic, list<Trait> traits>
    : Op<NN_Dialect, mnemonic,
         !listconcat([NN_ShapeRuleOpInterface, Pure], traits)> {
  /// Arguments passes set and graph.json may not (NN_Imported).
  list<string> internalArgs = [];
  /// Variadic operands graph.json may leave empty (else it gives one at
  /// least).
  list<string> optionalArgs = [];
  let extraClassDeclaration = NN_ShapeRuleDeclaration;
}

class NN_Op<string mnemonic, list<Trait> traits = []>
    : NN_OpBase<mnemonic, !listconcat(traits, [InferTypeOpAdaptor])> {
  let extraClassDefinition = NN_InferReturnTypes;
}

/// The shape rule of an op whose result has its operand's type.
defvar NN_SameTypeRule = [{
  ::llvm::LogicalResult
  $cppClass::inferTypes(::mlir::MLIRContext *, std::optional<::mlir::Location>,
                        Adaptor adaptor,
                        ::llvm::SmallVectorImpl<::mlir::Type> &results) {
    results.push_back(adaptor.getInput().getType());
    return ::mlir::success();
  }
}];

/// The shape rule of a backward op whose `grad` is the gradient of op
/// `forward`'s first result on the operands `operands` (their getters): its
/// results have the types of the operands `gradients` (getters), by
/// ShapeRules.h's gradientRule.
class NN_GradientRule<string forward, list<string> operands,
                      list<string> gradients> {
  code body = NN_InferReturnTypes # [{
  ::llvm::LogicalResult
  $cppClass::inferTypes(::mlir::MLIRContext *context,
                        std::optional<::mlir::Location> loc, Adaptor adaptor,
                        ::llvm::SmallVectorImpl<::mlir::Type> &results) {
    return ::fsdp::nn::detail::gradientRule<::fsdp::nn::}] # forward #
      [{, $cppClass>(context, loc, {}] #
      !interleave(!foreach(o, operands, "adaptor." # o # "()"), ", ") #
      [{}, adaptor, {}] #
      !interleave(!foreach(g, gradients, "adaptor." # g # "().getType()"),
                  ", ") # [{}, results);
  }
}];
}

/// The shape rule of an op whose result is an f32 scalar, whatever its
/// operands.
defvar NN_F32ScalarRule = NN_InferReturnTypes # [{
  ::llvm::LogicalResult
  $cppClass::inferTypes(::mlir::MLIRContext *context,
                        std::optional<::mlir::Location>, Adaptor,
                        ::llvm::SmallVectorImpl<::mlir::Type> &results) {
    results.push_back(::mlir::RankedTensorType::get(
        {}, ::mlir::Float32Type::get(context)));
    return ::mlir::success();
  }
}];

/// An op whose result has its operand's type (ODS writes its
/// InferTypeOpInterface from AllTypesMatch).
class NN_SameTypeOp<string mnemonic, list<Trait> traits = []>
    : NN_OpBase<mnemonic, !listconcat(traits, [
        AllTypesMatch<["input", "result"]>,
        DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>,
        DeclareOpInterfaceMethods<InferTypeOpInterface>])> {
  let extraClassDefinition = NN_SameTypeRule;
}

class NN_UnaryOp<string mnemonic, list<Trait> traits = []>
    : NN_SameTypeOp<mnemonic, traits> {
  let arguments = !con((ins NN_FloatTensor:$input), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}


/// Selective activation checkpointing (fsdp-build-train-step): a matrix
/// product, every other one of which a layer saves for its backward...
def NN_RematProduct : NativeOpTrait<"RematProduct"> {
  let cppNamespace = "::fsdp::nn";
}
/// ...and an op whose result a layer always saves (attention: recomputing
/// it costs the most per byte saved). The collectives are always saved
/// too: recomputing one would communicate again.
def NN_RematSaved : NativeOpTrait<"RematSaved"> {
  let cppNamespace = "::fsdp::nn";
}
/// A norm of each token on its own: a SequenceParallel plan entry runs it on
/// the rank's block of the sequence, its weights replicated.
def NN_TokenwiseNorm : NativeOpTrait<"TokenwiseNorm"> {
  let cppNamespace = "::fsdp::nn";
}
/// An op a graph.json node may name: the importer's table of its operands
/// and attributes is generated from its ODS (lib/Import/gen_import_table.py),
/// leaving out the arguments it lists in `internalArgs`.
def NN_Imported : NativeOpTrait<"Imported"> {
  let cppNamespace = "::fsdp::nn";
}

/// A pointwise activation `y = f(x)` whose gradient is its op
/// `gradClass` (NN_ActivationGradOp): `dx = dy · f'(x)`. The class gives it
/// all an op needs but `f`: its shape, shard and gradient rules and its
/// runtime call. The runtime computes `f` and `dy · f'(x)` from one line
/// of include/fsdp/Runtime/Activations.def.
class NN_ActivationOp<string mnemonic, string gradClass>
    : NN_UnaryOp<mnemonic, [RuntimeCall<"fsdp_op_" # mnemonic>,
                            NN_Differentiable, NN_Imported]> {
  let extraClassDefinition = NN_SameTypeRule # [{
    ::llvm::FailureOr<::fsdp::nn::ShardRule>
    $cppClass::getShardRule(::llvm::ArrayRef<::fsdp::nn::OperandShard> operands,
                            int64_t) {
      return ::fsdp::nn::detail::elementwiseShardRule(*this, operands,
                                                      /*broadcast=*/false);
    }
    ::llvm::LogicalResult
    $cppClass::buildGradient(::fsdp::nn::GradientBuilder &grads) {
      return ::fsdp::nn::buildActivationGradient<}] # gradClass # [{>(*this,
                                                                     grads);
    }
  }];
}

/// The gradient of activation `mnemonic`: `dx = dy · f'(x)` from the
/// forward's input and the result's gradient.
class NN_ActivationGradOp<string mnemonic>
    : NN_Op<mnemonic # "_grad",
            [RuntimeOutCall<"fsdp_op_" # mnemonic # "_grad">]> {
  let summary =
      "Gradient of " # mnemonic # ": `dy · d " # mnemonic # "(x)/dx`";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$grad),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = NN_InferReturnTypes # [{
    ::llvm::LogicalResult
    $cppClass::inferTypes(::mlir::MLIRContext *,
                          std::optional<::mlir::Location> loc, Adaptor adaptor,
                          ::llvm::SmallVectorImpl<::mlir::Type> &results) {
      if (::mlir::failed(::fsdp::nn::detail::checkGrad<$cppClass>(
              loc, adaptor.getGrad(), adaptor.getInput().getType())))
        return ::mlir::failure();
      results.push_back(adaptor.getInput().getType());
      return ::mlir::success();
    }
  }];
}

/// One activation: `defm NN_Relu : NN_Activation<"relu", "...">` defines
/// `nn.relu` (ReluOp) and its gradient `nn.relu_grad` (ReluGradOp). Its
/// runtime computation is its line in include/fsdp/Runtime/Activations.def.
multiclass NN_Activation<string mnemonic, string brief> {
  def Op : NN_ActivationOp<mnemonic, !subst("NN_", "", NAME) # "GradOp"> {
    let summary = brief;
  }
  def GradOp : NN_ActivationGradOp<mnemonic>;
}

class NN_BinaryOp<string mnemonic, list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>])> {
  let arguments = !con((ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  // Trailing-dimension broadcast, in shapes and in splits.
  let extraClassDefinition = NN_InferReturnTypes # [{
    ::llvm::LogicalResult
    $cppClass::inferTypes(::mlir::MLIRContext *,
                          std::optional<::mlir::Location> loc, Adaptor adaptor,
                          ::llvm::SmallVectorImpl<::mlir::Type> &results) {
      return ::fsdp::nn::detail::inferBroadcast<$cppClass>(
          loc, adaptor.getLhs(), adaptor.getRhs(), results);
    }
    ::llvm::FailureOr<::fsdp::nn::ShardRule>
    $cppClass::getShardRule(::llvm::ArrayRef<::fsdp::nn::OperandShard> operands,
                            int64_t) {
      return ::fsdp::nn::detail::elementwiseShardRule(*this, operands,
                                                      /*broadcast=*/true);
    }
  }];
}

//===----------------------------------------------------------------------===//
// Embedding and linear algebra
//===----------------------------------------------------------------------===//

def NN_EmbeddingOp : NN_Op<"embedding", [NN_Imported, 
    RuntimeCall<"fsdp_op_embedding", "", 3>, NN_Differentiable, NN_Costed,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>,
    DeclareOpInterfaceMethods<NN_TPStyleOpInterface,
                              ["getTPProjection", "mayPadVocabulary"]>]> {
  let summary = "Table lookup: rows of `table` selected by integer ids";
  let internalArgs = ["shard_index"];
  let description = [{
    `table` is `[V, H]`, `ids` any shape `[...]` of i32/i64; the result is
    `[..., H]`. Ids outside `[0, V)` are a runtime error.

    With `shard_index` (a scalar i64 `k`), `table` is block `k` of a
    vocabulary-parallel table: it holds rows `[k·V, (k+1)·V)` of the whole
    one. Ids in that range select their row, others give a zero row, so the
    sum over the blocks' results is the whole table's lookup (Megatron's
    vocabulary-parallel embedding).

    ```mlir
    %x = nn.embedding %table, %ids
        : (tensor<128x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$table, NN_IndexTensor:$ids,
                            Optional<RankedTensorOf<[I64]>>:$shard_index),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids (`,` $shard_index^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_LinearOp : NN_Op<"linear", [NN_Imported, 
    RuntimeCall<"fsdp_op_linear", "", 3>, NN_Differentiable, NN_Costed,
    NN_RematProduct,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>,
    DeclareOpInterfaceMethods<NN_TPStyleOpInterface, ["mayPadVocabulary"]>]> {
  let summary = "PyTorch `nn.Linear`: `input · weightᵀ + bias`";
  let description = [{
    `input` is `[..., K]`, `weight` `[N, K]` (PyTorch's out-by-in layout),
    the optional `bias` `[N]`; the result is `[..., N]`.

    ```mlir
    %y = nn.linear %x, %w, %b {path = "model.layers.0.self_attn.q_proj"}
        : (tensor<2x16x64xf32>, tensor<32x64xf32>, tensor<32xf32>)
        -> tensor<2x16x32xf32>
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                            Optional<NN_FloatTensor>:$bias), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_MatmulOp : NN_Op<"matmul", [NN_Imported, 
    RuntimeCall<"fsdp_op_matmul", "transpose_a:bool transpose_b:bool">,
    NN_Differentiable, NN_Costed, NN_RematProduct,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>,
    DeclareOpInterfaceMethods<NN_TPStyleOpInterface, ["checkTPStyle"]>]> {
  let summary = "Matrix product of a batch of rows with one matrix";
  let description = [{
    `lhs` is `[..., M, K]` (rank >= 2), `rhs` is `[K, N]`; the result is
    `[..., M, N]`. `transpose_a` / `transpose_b` swap the last two dims of
    the operand first, which is what backward passes need
    (`dA = dC · Bᵀ`). Hugging Face `Conv1D` (GPT-2) is this op.
  }];
  let arguments = !con((ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                            UnitAttr:$transpose_a, UnitAttr:$transpose_b),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def NN_BatchMatmulOp : NN_Op<"batch_matmul", [NN_Imported, 
    RuntimeCall<"fsdp_op_batch_matmul", "transpose_a:bool transpose_b:bool">,
    NN_Differentiable, NN_Costed, NN_RematProduct]> {
  let summary = "Batched matrix product with equal batch dimensions";
  let description = [{
    `lhs` is `[b..., M, K]`, `rhs` `[b..., K, N]` with the same rank (>= 3)
    and equal batch dims; the result is `[b..., M, N]`. `transpose_a` /
    `transpose_b` swap the last two dims of the operand first.
  }];
  let arguments = !con((ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                            UnitAttr:$transpose_a, UnitAttr:$transpose_b),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def NN_AddOp : NN_BinaryOp<"add", [NN_Imported, 
    RuntimeCall<"fsdp_op_add">, NN_Differentiable, Commutative,
    DeclareOpInterfaceMethods<NN_TPStyleOpInterface, ["getTPProjection"]>]> {
  let summary = "Elementwise sum with NumPy trailing-dimension broadcast";
}
def NN_SubOp : NN_BinaryOp<"sub", [NN_Imported, 
    RuntimeCall<"fsdp_op_sub">, NN_Differentiable]> {
  let summary = "Elementwise difference with NumPy trailing-dimension broadcast";
}
def NN_MulOp : NN_BinaryOp<"mul", [NN_Imported, 
    RuntimeCall<"fsdp_op_mul">, NN_Differentiable, Commutative]> {
  let summary = "Elementwise product with NumPy trailing-dimension broadcast";
}

def NN_NegOp : NN_UnaryOp<"neg", [NN_Imported, 
    RuntimeCall<"fsdp_op_neg">, NN_Differentiable]> {
  let summary = "Elementwise negation";
}

def NN_ScaleOp : NN_SameTypeOp<"scale", [NN_Imported, 
    RuntimeCall<"fsdp_op_scale", "factor:f64">, NN_Differentiable]> {
  let summary = "Multiplication by a constant: `input · factor`";
  let arguments = !con((ins NN_FloatTensor:$input, F64Attr:$factor), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `by` $factor attr-dict `:` type($input)";
}

defm NN_Silu : NN_Activation<"silu", "SiLU / swish: `x · sigmoid(x)`">;
defm NN_Relu : NN_Activation<"relu", "ReLU: `max(x, 0)`">;

def NN_GeluOp : NN_SameTypeOp<"gelu", [NN_Imported, 
    RuntimeCall<"fsdp_op_gelu", "approximate:tanh">, NN_Differentiable]> {
  let summary = "GELU, exact (`erf`) or with the `tanh` approximation";
  let arguments = !con((ins NN_FloatTensor:$input,
                            DefaultValuedStrAttr<StrAttr, "none">:$approximate),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalization, rotary embedding, attention, softmax
//===----------------------------------------------------------------------===//

def NN_RMSNormOp : NN_Op<"rms_norm", [NN_Imported, 
    RuntimeCall<"fsdp_op_rms_norm", "eps:f64">, NN_Differentiable,
    NN_TokenwiseNorm, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "RMS norm over the last dim: `x / sqrt(mean(x²) + eps) · weight`";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                            F64Attr:$eps), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $weight attr-dict `:` functional-type(operands, results)";
}

def NN_LayerNormOp : NN_Op<"layer_norm", [NN_Imported, 
    RuntimeCall<"fsdp_op_layer_norm", "eps:f64", 3>, NN_Differentiable,
    NN_TokenwiseNorm, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Layer norm over the last dim with weight and optional bias";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                            Optional<NN_FloatTensor>:$bias, F64Attr:$eps),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_RotaryOp : NN_Op<"rotary", [NN_Imported, 
    RuntimeCall<"fsdp_op_rotary", "theta:f64 inv_freq:table attention_scaling:f64 inverse:bool">,
    NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Rotary position embedding (rotate-half convention)";
  let internalArgs = ["inverse"];
  let description = [{
    `input` is `[B, S, N, D]` (D even), `positions` `[B, S]` integers. With
    `inv_freq[i] = theta^(-2i/D)` and `a = pos · inv_freq`, the result is
    `m · concat(x1·cos a − x2·sin a, x2·cos a + x1·sin a)` for the halves
    `x1, x2` of the last dim, as Hugging Face's `apply_rotary_pos_emb`, with
    `m = attention_scaling` (1 unless a scaled RoPE asks otherwise).
    A scaled RoPE (`rope_scaling` of type `linear`, `llama3` or `yarn`)
    states its `D/2` frequencies in `inv_freq`, which then replaces the
    ones derived from `theta`. With `inverse` the rotation is by `-a`: the
    transpose, which is the op's own gradient.
  }];
  let arguments = !con((ins NN_FloatTensor:$input, NN_IndexTensor:$positions,
                            F64Attr:$theta, UnitAttr:$inverse,
                            OptionalAttr<DenseF64ArrayAttr>:$inv_freq,
                            DefaultValuedAttr<F64Attr, "1.0">:$attention_scaling),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $positions attr-dict `:` functional-type(operands, results)";
}

def NN_AttentionOp : NN_Op<"attention", [NN_Imported, 
    RuntimeOutCall<"fsdp_op_attention", "causal:bool sliding_window:int scale:f64 packed:bool", 6>,
    NN_Differentiable, NN_Costed, NN_RematSaved,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>,
    DeclareOpInterfaceMethods<NN_MultiHeadOpInterface>]> {
  let summary = "Scaled dot-product attention, grouped-query capable";
  let optionalArgs = ["positions"];
  let description = [{
    `query` `[B, S, Nq, D]`, `key` `[B, Skv, Nkv, D]`, `value`
    `[B, Skv, Nkv, Dv]` with `Nq % Nkv == 0` (query head `h` reads KV head
    `h / (Nq / Nkv)`); the result is `[B, S, Nq, Dv]`. `scale` defaults to
    `1/sqrt(D)`. With `causal`, query `i` sees keys `j` with `k_j <= p_i`;
    a `sliding_window` `W` (which requires `causal`) further needs
    `p_i - k_j < W`. `positions` holds none, one or two i64 tensors: the
    queries' `[B, S]`, then the keys' `[B, Skv]` (ascending along each
    row), `p_i = positions[0][b, i]` and `k_j = positions[1][b, j]`; an
    absent one means `i` and `j`. Context parallelism gives
    them (`fsdp-context-parallel`): a rank's queries are two chunks of the
    sequence and the keys all of it (`all_gather`) or one rank's two chunks
    at a time (`p2p`). A query that sees no key gets a zero row and a
    `logsumexp` of `-inf`.

    `packed` (which requires `causal`): each row holds documents back to
    back, and the first of `positions` is each query's position in its
    document, `d_i` (the step's `position_ids`, restarting at 0 where a
    document starts, as transformers packs rows); the query's and the
    keys' positions follow it. Query `i` then further needs `k_j >= p_i -
    d_i`: it sees only its own document. The documents are found from the
    positions on the device: no host synchronization, static shapes.

    The second result, `logsumexp` `[B, Nq, S]` f32, is each query's softmax
    statistic `log Σ_j exp(score_ij)` over the keys it sees: the backward
    (`nn.attention_grad`) rebuilds the probabilities from it in one pass,
    flash-attention style, instead of finding each row's maximum and sum
    again.

    ```mlir
    %o, %lse = nn.attention %q, %k, %v {causal}
        : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>)
        -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                            NN_FloatTensor:$value,
                            Variadic<RankedTensorOf<[I64]>>:$positions,
                            UnitAttr:$causal,
                            OptionalAttr<I64Attr>:$sliding_window,
                            OptionalAttr<F64Attr>:$scale,
                            UnitAttr:$packed), NN_Path);
  let results = (outs NN_FloatTensor:$result, NN_FloatTensor:$logsumexp);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`positions` $positions^)? attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = !strconcat(NN_ShapeRuleDeclaration, [{
    /// The queries' positions in their documents (`packed`), or null.
    ::mlir::Value getDocumentPositions() {
      return getPacked() && !getPositions().empty() ? getPositions()[0]
                                                    : ::mlir::Value();
    }
    /// The queries' positions, or null.
    ::mlir::Value getQueryPositions() { return placed(0); }
    /// The keys' positions, or null.
    ::mlir::Value getKeyPositions() { return placed(1); }

  private:
    /// Of `positions` after the document positions: the queries' (0) or
    /// the keys' (1).
    ::mlir::Value placed(unsigned which) {
      unsigned at = which + (getPacked() ? 1 : 0);
      return at < getPositions().size() ? getPositions()[at] : ::mlir::Value();
    }

  public:
  }]);
}

def NN_AttentionCombineOp : NN_Op<"attention_combine", [
    RuntimeOutCall<"fsdp_op_attention_combine">, NN_Differentiable]> {
  let summary = "One attention from two over disjoint keys, by log-sum-exp";
  let description = [{
    The results (`[B, S, Nq, Dv]`) and statistics (`[B, Nq, S]`) of two
    attentions of the same queries over disjoint sets of keys give the
    attention over their union: `lse = log(exp(lse_a) + exp(lse_b))` and
    `result = exp(lse_a − lse) · result_a + exp(lse_b − lse) · result_b`.
    A query neither saw (both `-inf`) keeps `-inf` and a zero row. Ring
    attention (`cp_comm_type = "p2p"`) combines each block's partial
    attention into the running one this way.

    ```mlir
    %o, %lse = nn.attention_combine %o0, %lse0, %o1, %lse1
        : (tensor<2x8x4x16xf32>, tensor<2x4x8xf32>, tensor<2x8x4x16xf32>,
           tensor<2x4x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x4x8xf32>)
    ```
  }];
  let arguments = !con((ins NN_FloatTensor:$result_a,
                            NN_FloatTensor:$logsumexp_a,
                            NN_FloatTensor:$result_b,
                            NN_FloatTensor:$logsumexp_b), NN_Path);
  let results = (outs NN_FloatTensor:$result, NN_FloatTensor:$logsumexp);
  let assemblyFormat = [{
    $result_a `,` $logsumexp_a `,` $result_b `,` $logsumexp_b attr-dict `:` functional-type(operands, results)
  }];
}

def NN_SoftmaxOp : NN_SameTypeOp<"softmax", [NN_Imported, 
    RuntimeCall<"fsdp_op_softmax", "dim:dim">, NN_Differentiable]> {
  let summary = "Softmax along `dim` (negative counts from the end)";
  let arguments = !con((ins NN_FloatTensor:$input, I64Attr:$dim), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `dim` $dim attr-dict `:` type($input)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def NN_ReshapeOp : NN_Op<"reshape", [NN_Imported, 
    RuntimeCall<"fsdp_op_reshape">, NN_Differentiable, NN_Costed,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Reinterpret a tensor with another static shape";
  let arguments = !con((ins NN_AnyTensor:$input, DenseI64ArrayAttr:$shape),
                       NN_Path);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat =
      "$input `to` $shape attr-dict `:` type($input) `->` type($result)";
}

def NN_TransposeOp : NN_Op<"transpose", [NN_Imported, 
    RuntimeCall<"fsdp_op_transpose", "perm:ints">, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Permute dimensions: result dim `i` is input dim `perm[i]`";
  let arguments = !con((ins NN_AnyTensor:$input, DenseI64ArrayAttr:$perm),
                       NN_Path);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat =
      "$input `perm` $perm attr-dict `:` type($input) `->` type($result)";
}

def NN_SliceOp : NN_Op<"slice", [NN_Imported, 
    RuntimeCall<"fsdp_op_slice", "dim:dim start:int">, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "The range `[start, start + size)` of one dimension";
  let arguments = !con((ins NN_AnyTensor:$input, I64Attr:$dim, I64Attr:$start,
                            I64Attr:$size), NN_Path);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `start` $start `size` $size attr-dict `:` type($input) `->` type($result)
  }];
}

def NN_RollOp : NN_Op<"roll", []> {
  let summary = "Rotate blocks of one dim by a count known at run time";
  let description = [{
    The inputs, joined along `dim` (one input: itself), hold `N / block`
    blocks of `block` elements there. Result block `i` is joined block
    `(i - a) mod (N / block)`, where the rotation `a = scale · shift +
    offset` and `shift` is a scalar i64 (a rank's `dist.axis_index`). With
    `count`, the result holds only the first `count` blocks of the rotation
    (`count 1`: the one block `-a`). `fsdp-async-tp` joins a ring's partial
    products in rank order with it (one copy), and picks the rank-dependent
    block each ring step works on.

    ```mlir
    %r = dist.axis_index @mesh[tp] : tensor<i64>
    %y = nn.roll %p0, %p1 by %r dim 1 block 8 scale 1 offset 0
        : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<i64>) -> tensor<2x16x64xf32>
    %b = nn.roll %x by %r dim 1 block 8 scale -1 offset 1 count 1
        : (tensor<2x16x64xf32>, tensor<i64>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = !con((ins Variadic<NN_AnyTensor>:$inputs,
                            RankedTensorOf<[I64]>:$shift, I64Attr:$dim,
                            I64Attr:$block, I64Attr:$scale, I64Attr:$offset,
                            OptionalAttr<I64Attr>:$count), NN_Path);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $inputs `by` $shift `dim` $dim `block` $block `scale` $scale `offset` $offset (`count` $count^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_SplitOp : NN_Op<"split", [NN_Imported, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Cut one dimension into consecutive pieces of the given sizes";
  let arguments = !con((ins NN_AnyTensor:$input, I64Attr:$dim,
                            DenseI64ArrayAttr:$sizes), NN_Path);
  let results = (outs Variadic<NN_AnyTensor>:$results);
  let assemblyFormat = [{
    $input `dim` $dim `sizes` $sizes attr-dict `:` type($input) `->` type($results)
  }];
}

def NN_ConcatOp : NN_Op<"concat", [NN_Imported, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Join tensors along one dimension";
  let arguments = !con((ins Variadic<NN_AnyTensor>:$inputs, I64Attr:$dim),
                       NN_Path);
  let results = (outs NN_AnyTensor:$result);
  let assemblyFormat = [{
    $inputs `dim` $dim attr-dict `:` functional-type($inputs, results)
  }];
}

def NN_CastOp : NN_Op<"cast", [NN_Imported, RuntimeCall<"fsdp_op_cast">, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Convert a float tensor to another float element type";
  let arguments = !con((ins NN_FloatTensor:$input, TypeAttr:$dtype), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `to` $dtype attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

def NN_CrossEntropyOp : NN_Op<"cross_entropy", [NN_Imported, 
    RuntimeCall<"fsdp_op_cross_entropy", "ignore_index:int reduction:loss">,
    DeclareOpInterfaceMethods<NN_SplitExpansionOpInterface>]> {
  let summary = "Softmax cross-entropy against integer labels";
  let description = [{
    `logits` `[..., V]`, `labels` `[...]` (i32/i64). Each position
    contributes `-log softmax(logits)[label]`; positions whose label equals
    `ignore_index` contribute nothing and are not counted. `reduction` is
    `mean` (sum / counted positions), `sum` (a scalar, the form the training
    step divides by the global token count), or `none` (`[...]`, f32).
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            DefaultValuedStrAttr<StrAttr, "mean">:$reduction),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
}


def NN_ReduceMaxOp : NN_Op<"reduce_max", [RuntimeCall<"fsdp_op_reduce_max">]> {
  let summary = "The maximum over the last dimension";
  let description = [{
    `[..., N]` to `[...]`. Has no gradient: the vocabulary-parallel
    cross-entropy uses it only as a shift that cancels out of the loss.
  }];
  let arguments = !con((ins NN_FloatTensor:$input), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def NN_CrossEntropyPartialOp
    : NN_Op<"cross_entropy_partial", [
        RuntimeOutCall<"fsdp_op_cross_entropy_partial", "ignore_index:int num_classes:int">,
        NN_Differentiable]> {
  let summary = "One vocabulary block's part of a cross-entropy";
  let description = [{
    `logits` `[..., V]` is block `shard_index` of vocabulary-sharded logits
    (classes `[k·V, (k+1)·V)`), `labels` `[...]`, `shift` `[...]` the
    maximum logit over the whole vocabulary. Returns, per position, the
    block's `Σ exp(logit - shift)` and its `logit[label] - shift` (0 when
    the label is in another block or ignored), both f32. Summed over the
    blocks they give `nn.cross_entropy_combine` what it needs, and the
    whole logits are never gathered. With `num_classes`, classes from
    `num_classes` on are padding (a vocabulary that tp does not divide):
    they are left out of the sum.
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
                            NN_FloatTensor:$shift,
                            RankedTensorOf<[I64]>:$shard_index,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            OptionalAttr<I64Attr>:$num_classes),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$sum_exp,
                      RankedTensorOf<[F32]>:$target);
  let assemblyFormat = [{
    $logits `,` $labels `,` $shift `,` $shard_index attr-dict `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyCombineOp
    : NN_Op<"cross_entropy_combine", [
        RuntimeCall<"fsdp_op_cross_entropy_combine", "ignore_index:int reduction:loss">,
        NN_Differentiable]> {
  let summary = "Cross-entropy from summed vocabulary-block parts";
  let description = [{
    `sum_exp` and `target` `[...]` are the sums over the vocabulary blocks
    of `nn.cross_entropy_partial`'s results; each counted position's loss is
    `log(sum_exp) - target` (the shift cancels). `ignore_index` and
    `reduction` are as for `nn.cross_entropy`, whose value this equals.
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$sum_exp,
                            RankedTensorOf<[F32]>:$target,
                            NN_IndexTensor:$labels,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            DefaultValuedStrAttr<StrAttr, "mean">:$reduction),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $sum_exp `,` $target `,` $labels attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Backward ops: the gradients autodiff emits for ops whose transpose is not
// another forward op
//===----------------------------------------------------------------------===//

def NN_GeluGradOp : NN_Op<"gelu_grad", [
    RuntimeOutCall<"fsdp_op_gelu_grad", "approximate:tanh">]> {
  let summary = "Gradient of gelu (erf or tanh form)";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$grad,
                            DefaultValuedStrAttr<StrAttr, "none">:$approximate),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
}

def NN_RMSNormGradOp : NN_Op<"rms_norm_grad", [
    RuntimeOutCall<"fsdp_op_rms_norm_grad", "eps:f64">]> {
  let summary = "Gradients of rms_norm w.r.t. its input and weight";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                            NN_FloatTensor:$grad, F64Attr:$eps), NN_Path);
  let results = (outs NN_FloatTensor:$input_grad, NN_FloatTensor:$weight_grad);
  let assemblyFormat =
      "$input `,` $weight `,` $grad attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = NN_GradientRule<"RMSNormOp",
      ["getInput", "getWeight"],
      ["getInput", "getWeight"]>.body;
}

def NN_LayerNormGradOp : NN_Op<"layer_norm_grad", [
    RuntimeOutCall<"fsdp_op_layer_norm_grad", "eps:f64">]> {
  let summary = "Gradients of layer_norm w.r.t. input, weight and bias";
  let arguments = !con((ins NN_FloatTensor:$input, NN_FloatTensor:$weight,
                            NN_FloatTensor:$grad, F64Attr:$eps), NN_Path);
  let results = (outs NN_FloatTensor:$input_grad, NN_FloatTensor:$weight_grad,
                      NN_FloatTensor:$bias_grad);
  let assemblyFormat =
      "$input `,` $weight `,` $grad attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = NN_GradientRule<"LayerNormOp",
      ["getInput", "getWeight"],
      ["getInput", "getWeight", "getWeight"]>.body;
}

def NN_AttentionGradOp : NN_Op<"attention_grad", [
    RuntimeOutCall<"fsdp_op_attention_grad", "causal:bool sliding_window:int scale:f64">,
    AttrSizedOperandSegments, NN_Costed]> {
  let summary = "Gradients of attention w.r.t. query, key and value";
  let description = [{
    Rebuilds the attention probabilities from `query`, `key` and the
    forward's `logsumexp` (nothing of size `S²` is kept from the forward)
    and returns the gradients of the three inputs for the output gradient
    `grad`, with the forward's mask and scale. With grouped-query attention
    a KV head's gradient sums over the query heads that read it. `output`
    is the forward's result: the backward's row sums are
    `Σ_j P·dP = rowsum(grad ∘ output)`. A ring step's gradient passes the
    merged attention's `output` and `logsumexp` (and their gradients) in
    place of its own, and its keys get their share of the merged gradient.
    `positions` and `key_positions`
    are the forward's query and key positions, `document_positions` its
    queries' positions in their documents (a `packed` attention). `logsumexp_grad` (`[B, Nq, S]`, when something
    consumed the forward's statistics: `nn.attention_combine`) adds
    `dLSE_i · P_ij` to each score's gradient.
  }];
  let arguments = !con((ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                            NN_FloatTensor:$value, NN_FloatTensor:$output,
                            NN_FloatTensor:$logsumexp,
                            NN_FloatTensor:$grad,
                            Optional<NN_FloatTensor>:$logsumexp_grad,
                            Optional<RankedTensorOf<[I64]>>:$positions,
                            Optional<RankedTensorOf<[I64]>>:$key_positions,
                            Optional<RankedTensorOf<[I64]>>:$document_positions,
                            UnitAttr:$causal,
                            OptionalAttr<I64Attr>:$sliding_window,
                            OptionalAttr<F64Attr>:$scale), NN_Path);
  let results = (outs NN_FloatTensor:$query_grad, NN_FloatTensor:$key_grad,
                      NN_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $logsumexp `,` $grad (`logsumexp_grad` $logsumexp_grad^)? (`positions` $positions^)? (`key_positions` $key_positions^)? (`document_positions` $document_positions^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_AttentionCombineGradOp : NN_Op<"attention_combine_grad", [
    RuntimeOutCall<"fsdp_op_attention_combine_grad", "", 8>]> {
  let summary = "Gradients of attention_combine";
  let description = [{
    From the forward's operands, its `result` and `logsumexp`, and the
    gradients `grad` of its result and (optionally) `logsumexp_grad` of its
    statistics: with `w_x = exp(lse_x − lse)`, `result_x` gets `w_x · grad`
    and `lse_x` gets `w_x · (dLSE + Σ_d grad · (result_x − result))`.
  }];
  let arguments = !con((ins NN_FloatTensor:$result_a,
                            NN_FloatTensor:$logsumexp_a,
                            NN_FloatTensor:$result_b,
                            NN_FloatTensor:$logsumexp_b,
                            NN_FloatTensor:$result, NN_FloatTensor:$logsumexp,
                            NN_FloatTensor:$grad,
                            Optional<NN_FloatTensor>:$logsumexp_grad),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result_a_grad,
                      NN_FloatTensor:$logsumexp_a_grad,
                      NN_FloatTensor:$result_b_grad,
                      NN_FloatTensor:$logsumexp_b_grad);
  let assemblyFormat = [{
    $result_a `,` $logsumexp_a `,` $result_b `,` $logsumexp_b `,` $result `,` $logsumexp `,` $grad (`logsumexp_grad` $logsumexp_grad^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_SoftmaxGradOp : NN_Op<"softmax_grad", [
    RuntimeOutCall<"fsdp_op_softmax_grad", "dim:dim">]> {
  let summary = "Gradient of softmax from its output `y`: `y · (dy − Σ y·dy)`";
  let arguments = !con((ins NN_FloatTensor:$output, NN_FloatTensor:$grad,
                            I64Attr:$dim), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$output `,` $grad `dim` $dim attr-dict `:` functional-type(operands, results)";
}

def NN_EmbeddingGradOp : NN_Op<"embedding_grad", [
    RuntimeOutCall<"fsdp_op_embedding_grad", "", 3>]> {
  let summary = "Gradient of an embedding table: scatter-add of rows";
  let description = [{
    `ids` `[...]`, `grad` `[..., H]`; the result `[num_embeddings, H]` is
    zero except for the rows named by `ids`, which sum their gradients.
    With `shard_index` `k`, the result is block `k` of a vocabulary-parallel
    table's gradient: only ids in `[k·num_embeddings, (k+1)·num_embeddings)`
    contribute.
  }];
  let arguments = !con((ins NN_IndexTensor:$ids, NN_FloatTensor:$grad,
                            Optional<RankedTensorOf<[I64]>>:$shard_index,
                            I64Attr:$num_embeddings), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $grad (`,` $shard_index^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyGradOp : NN_Op<"cross_entropy_grad", [
    RuntimeOutCall<"fsdp_op_cross_entropy_grad", "ignore_index:int reduction:loss">]> {
  let summary = "Gradient of cross_entropy w.r.t. the logits";
  let description = [{
    `grad` is the loss gradient: a scalar for `mean`/`sum`, `[...]` for
    `none`. Ignored positions get a zero gradient; `mean` divides by the
    number of counted positions, as the forward does.
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
                            RankedTensorOf<[F32]>:$grad,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            DefaultValuedStrAttr<StrAttr, "mean">:$reduction),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDefinition = NN_GradientRule<"CrossEntropyOp",
      ["getLogits", "getLabels"],
      ["getLogits"]>.body;
}

def NN_CrossEntropyPartialGradOp : NN_Op<"cross_entropy_partial_grad", [
    RuntimeOutCall<"fsdp_op_cross_entropy_partial_grad", "ignore_index:int num_classes:int">]> {
  let summary = "Gradient of cross_entropy_partial w.r.t. the logits block";
  let description = [{
    `exp(logit - shift) · grad_sum_exp + onehot(label in block) ·
    grad_target`; `shift` gets no gradient (it cancels out of the loss).
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, NN_IndexTensor:$labels,
                            NN_FloatTensor:$shift,
                            RankedTensorOf<[I64]>:$shard_index,
                            RankedTensorOf<[F32]>:$grad_sum_exp,
                            RankedTensorOf<[F32]>:$grad_target,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            OptionalAttr<I64Attr>:$num_classes),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $shift `,` $shard_index `,` $grad_sum_exp `,` $grad_target attr-dict `:` functional-type(operands, results)
  }];
}

def NN_CrossEntropyCombineGradOp : NN_Op<"cross_entropy_combine_grad", [
    RuntimeOutCall<"fsdp_op_cross_entropy_combine_grad", "ignore_index:int reduction:loss">]> {
  let summary = "Gradient of cross_entropy_combine w.r.t. its two inputs";
  let description = [{
    For a counted position with loss gradient `g` (the scalar `grad`, over
    the count for `mean`): `g / sum_exp` and `-g`; ignored positions get 0.
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$sum_exp,
                            NN_IndexTensor:$labels,
                            RankedTensorOf<[F32]>:$grad,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index,
                            DefaultValuedStrAttr<StrAttr, "mean">:$reduction),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$grad_sum_exp,
                      RankedTensorOf<[F32]>:$grad_target);
  let assemblyFormat = [{
    $sum_exp `,` $labels `,` $grad attr-dict `:` functional-type(operands, results)
  }];
}

def NN_ReduceSumToOp : NN_Op<"reduce_sum_to", [
    RuntimeOutCall<"fsdp_op_reduce_sum_to">]> {
  let summary = "Sum a tensor down to a shape that broadcasts to it";
  let description = [{
    The transpose of trailing-dimension broadcast: `shape` must broadcast to
    the input's shape; dims the broadcast added or stretched are summed.
    Autodiff emits it for the operand of a broadcasting `add`, `sub` or
    `mul`, and for a bias.
  }];
  let arguments = !con((ins NN_FloatTensor:$input, DenseI64ArrayAttr:$shape),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$input `to` $shape attr-dict `:` type($input) `->` type($result)";
}

def NN_PadOp : NN_Op<"pad", [
    RuntimeOutCall<"fsdp_op_pad", "dim:dim before:int after:int">]> {
  let summary = "Zero padding along one dimension (the transpose of slice)";
  let arguments = !con((ins NN_FloatTensor:$input, I64Attr:$dim,
                            I64Attr:$before, I64Attr:$after), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `before` $before `after` $after attr-dict `:` type($input) `->` type($result)
  }];
}

def NN_SumSquaresOp : NN_Op<"sum_squares", [
    RuntimeOutCall<"fsdp_op_sum_squares">]> {
  let summary = "Σ x² as an f32 scalar, for the global gradient norm";
  let arguments = !con((ins NN_FloatTensor:$input), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDefinition = NN_F32ScalarRule;
}

//===----------------------------------------------------------------------===//
// Training step: loss normalization, clipping, optimizers
//===----------------------------------------------------------------------===//

def NN_DivOp : NN_BinaryOp<"div", [RuntimeOutCall<"fsdp_op_div">]> {
  let summary = "Elementwise quotient with NumPy trailing-dimension broadcast";
}

def NN_FillOp : NN_Op<"fill", [RuntimeOutCall<"fsdp_op_fill", "value:f64">]> {
  let summary = "A tensor of one value";
  let arguments = !con((ins F64Attr:$value, DenseI64ArrayAttr:$shape,
                            TypeAttr:$dtype), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let builders = [
    OpBuilder<(ins "double":$value, "::mlir::RankedTensorType":$type), [{
      build($_builder, $_state, type, $_builder.getF64FloatAttr(value),
            $_builder.getDenseI64ArrayAttr(type.getShape()),
            ::mlir::TypeAttr::get(type.getElementType()), nullptr);
    }]>
  ];
}

def NN_TokenCountOp : NN_Op<"token_count", [
    RuntimeOutCall<"fsdp_op_token_count", "ignore_index:int">]> {
  let summary = "The number of labels not equal to `ignore_index`, as f32";
  let description = [{
    The denominator of the training loss: the step divides the summed
    cross-entropy by this count (all-reduced over data-parallel ranks), so
    the loss does not depend on how tokens are split across ranks.
  }];
  let arguments = !con((ins NN_IndexTensor:$labels,
                            DefaultValuedAttr<I64Attr, "-100">:$ignore_index),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$labels attr-dict `:` type($labels) `->` type($result)";
  let extraClassDefinition = NN_F32ScalarRule;
}

def NN_ClipCoefficientOp : NN_Op<"clip_coefficient", [
    RuntimeOutCall<"fsdp_op_clip_coefficient", "max_norm:f64">]> {
  let summary = "`min(1, max_norm / (sqrt(sum_of_squares) + 1e-6))`";
  let description = [{
    The factor PyTorch's `clip_grad_norm_` scales every gradient by, from the
    global sum of squared gradient elements.
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$sum_of_squares,
                            F64Attr:$max_norm), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$sum_of_squares attr-dict `:` type($sum_of_squares) `->` type($result)";
}

def NN_LrScheduleOp : NN_Op<"lr_schedule", [
    RuntimeOutCall<"fsdp_op_lr_schedule", "schedule:int warmup_steps:int total_steps:int min_ratio:f64">]> {
  let summary = "The learning-rate schedule's factor at an optimizer step";
  let description = [{
    The factor transformers' `get_scheduler` multiplies the learning rate by
    at the 1-based optimizer step `step` (an f32 scalar): a linear warmup
    from 0 over `warmup_steps`, then `constant`, or a `linear` or half-
    `cosine` decay to `min_ratio` at `total_steps` (held after it). It is
    computed on the device from the step count, so the host never waits
    and a resumed run continues the schedule. The optimizer reads it as its
    `lr_scale`.

    ```mlir
    %f = nn.lr_schedule %step cosine {warmup_steps = 10 : i64, total_steps = 100 : i64, min_ratio = 1.000000e-01 : f64} : tensor<f32> -> tensor<f32>
    ```
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$step,
                            NN_LrSchedule:$schedule, I64Attr:$warmup_steps,
                            I64Attr:$total_steps, F64Attr:$min_ratio),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$step $schedule attr-dict `:` type($step) `->` type($result)";
}

def NN_AdamWOp : NN_Op<"adamw", [
    DeclareOpInterfaceMethods<NN_UpdateOpInterface>,
    RuntimeOutCall<"fsdp_op_adamw", "lr:f64 beta1:f64 beta2:f64 eps:f64 weight_decay:f64", 7>]> {
  let summary = "One AdamW update of an f32 master parameter";
  let description = [{
    PyTorch's `AdamW` on `param` with gradient `grad_scale · grad`: decoupled
    weight decay, moments `exp_avg` and `exp_avg_sq`, bias correction with
    the 1-based `step` (an f32 scalar), and the learning rate times
    `lr_scale` when given (the schedule's factor). Returns the new parameter and
    moments; the step function hands them back to the runtime, which keeps
    them in place of the old ones. Where nothing reads the old ones after
    the update, the new ones take their buffers (`fsdp::InPlaceUpdates`).
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$param,
                            NN_FloatTensor:$grad,
                            RankedTensorOf<[F32]>:$exp_avg,
                            RankedTensorOf<[F32]>:$exp_avg_sq,
                            RankedTensorOf<[F32]>:$step,
                            RankedTensorOf<[F32]>:$grad_scale,
                            Optional<RankedTensorOf<[F32]>>:$lr_scale,
                            F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2,
                            F64Attr:$eps, F64Attr:$weight_decay), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$new_param,
                      RankedTensorOf<[F32]>:$new_exp_avg,
                      RankedTensorOf<[F32]>:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $step `,` $grad_scale (`lr_scale` $lr_scale^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_SGDOp : NN_Op<"sgd", [
    DeclareOpInterfaceMethods<NN_UpdateOpInterface>,
    RuntimeOutCall<"fsdp_op_sgd", "lr:f64 momentum:f64 weight_decay:f64", 6>]> {
  let summary = "One SGD (momentum, weight decay) update of an f32 parameter";
  let description = [{
    PyTorch's `SGD` (dampening 0, no Nesterov) on `param` with gradient
    `grad_scale · grad`; `momentum_buffer` is the momentum state (its first
    step takes the gradient itself, as PyTorch does when `step` is 1); the
    learning rate is `lr` times `lr_scale` when given.
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$param,
                            NN_FloatTensor:$grad,
                            RankedTensorOf<[F32]>:$momentum_buffer,
                            RankedTensorOf<[F32]>:$step,
                            RankedTensorOf<[F32]>:$grad_scale,
                            Optional<RankedTensorOf<[F32]>>:$lr_scale,
                            F64Attr:$lr, F64Attr:$momentum,
                            F64Attr:$weight_decay), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$new_param,
                      RankedTensorOf<[F32]>:$new_momentum_buffer);
  let assemblyFormat = [{
    $param `,` $grad `,` $momentum_buffer `,` $step `,` $grad_scale (`lr_scale` $lr_scale^)? attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Memory placement (CPU offload)
//===----------------------------------------------------------------------===//

class NN_PlacementCopyOp<string mnemonic, string callee, string where>
    : NN_Op<mnemonic, [RuntimeCall<callee>]> {
  let summary = "Copy a tensor into " # where # " memory";
  let arguments = (ins AnyRankedTensor:$input);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def NN_ToDeviceOp : NN_PlacementCopyOp<"to_device", "fsdp_op_to_device",
                                       "device"> {
  let description = [{
    A device copy of a tensor in host memory (an argument or result
    `fsdp-offload` placed there): a parameter block on its way to its
    all-gather. The runtime allocates the result on the device.
  }];
}

def NN_ToHostOp : NN_PlacementCopyOp<"to_host", "fsdp_op_to_host", "host"> {
  let description = [{
    A host copy of a device tensor: a gradient block on its way to the
    optimizer step, which runs on the host under CPU offload. The runtime
    allocates the result in host memory.
  }];
}

include "fsdp/Dialect/NN/IR/NNMoEOps.td"

#endif // FSDP_DIALECT_NN_IR_NNOPS_TD

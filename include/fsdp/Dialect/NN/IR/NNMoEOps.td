//===- NNMoEOps.td - nn ops of mixture-of-experts layers ---*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A mixture-of-experts block as a few ops that keep every shape static:
//
//   w, idx      = nn.moe_router(logits)            top-k experts per token
//   rows, count = nn.moe_permute(x, idx)           token copies by expert
//   h           = nn.grouped_linear(rows, count, W) one product per expert
//   y           = nn.moe_unpermute(h', idx, w)     weighted sum per token
//
// `rows` has exactly tokens · top_k rows (dropless), so nothing waits on the
// host for a count. Expert parallelism (fsdp-expert-parallel) puts a
// variable-split all-to-all on each side of the grouped products; the
// load-balancing loss of Switch Transformer, as transformers adds it, is
// nn.moe_aux_stats per layer and one nn.moe_aux_combine.
//
// Under sequence parallelism (tokens split over tp) each rank routes its own
// tokens: the permuted rows and counts are the rank's (the global expert
// order is never built), the grouped products read the whole experts, and
// nn.moe_unpermute gives back the token split; the routing statistics are
// summed over tp.
//
// Included by NNOps.td.
//
//===----------------------------------------------------------------------===//

def NN_MoeRouterOp : NN_Op<"moe_router", [NN_Imported,
    RuntimeOutCall<"fsdp_op_moe_router", "top_k:int normalize:bool">,
    NN_Differentiable, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Softmax router: each token's top-k experts and their weights";
  let description = [{
    `logits` is `[..., E]`. The probabilities `p = softmax(logits)` are
    computed in f32; each token's `top_k` largest (ties to the lower expert
    index, in descending order) give `indices` `[..., k]` (i64) and
    `weights` `[..., k]` (the logits' type): `p` itself, or with `normalize`
    `p / Σ_topk p` (Qwen3-MoE's `norm_topk_prob`, Mixtral always).
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, I64Attr:$top_k,
                            UnitAttr:$normalize), NN_Path);
  let results = (outs NN_FloatTensor:$weights, RankedTensorOf<[I64]>:$indices);
  let assemblyFormat =
      "$logits attr-dict `:` functional-type(operands, results)";
}

def NN_MoePermuteOp : NN_Op<"moe_permute", [NN_Imported,
    RuntimeOutCall<"fsdp_op_moe_permute", "num_experts:int">,
    NN_Differentiable, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Copies of each token's row, grouped by expert";
  let description = [{
    `input` is `[..., H]`, `indices` `[..., k]` with the same leading dims
    (T tokens). The result `rows` `[T·k, H]` holds input row `t` once per
    slot `(t, j)`, ordered by expert `indices[t, j]`, then by `t`, then by
    `j`; `counts` `[num_experts]` (i64) says how many rows each expert has.
    Every slot has a row (dropless), so the shapes are static.
  }];
  let arguments = !con((ins NN_FloatTensor:$input,
                            RankedTensorOf<[I64]>:$indices,
                            I64Attr:$num_experts), NN_Path);
  let results = (outs NN_FloatTensor:$rows, RankedTensorOf<[I64]>:$counts);
  let assemblyFormat =
      "$input `,` $indices attr-dict `:` functional-type(operands, results)";
}

def NN_MoeUnpermuteOp : NN_Op<"moe_unpermute", [NN_Imported,
    RuntimeCall<"fsdp_op_moe_unpermute", "num_experts:int", 3>,
    NN_Differentiable, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "Each token's expert rows, summed with the router's weights";
  let description = [{
    The inverse of `moe_permute`'s order: `rows` `[T·k, H]` in expert order
    (`indices` `[..., k]`, T tokens) give `result[t] = Σ_j weights[t, j] ·
    rows[slot (t, j)]`, `[..., H]`; without `weights` the slots are summed
    (the gradient of `moe_permute`).
  }];
  let arguments = !con((ins NN_FloatTensor:$rows,
                            RankedTensorOf<[I64]>:$indices,
                            Optional<NN_FloatTensor>:$weights,
                            I64Attr:$num_experts), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $rows `,` $indices (`,` $weights^)? attr-dict `:` functional-type(operands, results)
  }];
}

def NN_GroupedLinearOp : NN_Op<"grouped_linear", [NN_Imported,
    RuntimeCall<"fsdp_op_grouped_linear">, NN_Differentiable,
    NN_Costed, NN_RematProduct, DeclareOpInterfaceMethods<NN_ShardRuleOpInterface>]> {
  let summary = "One linear per segment of rows: the experts' products";
  let description = [{
    `input` `[R, K]` is cut into consecutive segments of `counts[g]` rows
    (`counts` `[G]`, i64, known only on the device); segment `g` is
    multiplied by `weight[g mod E]ᵀ` (`weight` `[E, N, K]`, transformers'
    3-D expert layout). Rows past `Σ counts` (the unused end of a
    dispatch buffer) give zero rows. The result is `[R, N]`. `G` is `E`,
    or, after an expert-parallel dispatch, `ranks · E`: each source rank's
    rows for this rank's `E` experts. `active_share`, set by the
    expert-parallel dispatch, is the share of the `R` rows (a buffer sized
    for the worst routing) that balanced routing fills: what the cost model
    charges. A share, not a count, so that it holds when later passes split
    the tokens.
  }];
  let internalArgs = ["active_share"];
  let arguments = !con((ins NN_FloatTensor:$input,
                            RankedTensorOf<[I64]>:$counts,
                            NN_FloatTensor:$weight,
                            OptionalAttr<F64Attr>:$active_share), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $counts `,` $weight attr-dict `:` functional-type(operands, results)
  }];
}

def NN_MoeRankCountsOp : NN_Op<"moe_rank_counts", [
    RuntimeCall<"fsdp_op_moe_rank_counts", "ranks:int">]> {
  let summary = "Rows per rank from rows per expert (consecutive blocks)";
  let description = [{
    `counts` `[ranks · E]` (i64) summed in `ranks` consecutive blocks: the
    send and receive counts of an expert-parallel dispatch.
  }];
  let arguments = !con((ins RankedTensorOf<[I64]>:$counts, I64Attr:$ranks),
                       NN_Path);
  let results = (outs RankedTensorOf<[I64]>:$result);
  let assemblyFormat = "$counts attr-dict `:` functional-type(operands, results)";
}

def NN_MoeAuxStatsOp : NN_Op<"moe_aux_stats", [NN_Imported,
    RuntimeCall<"fsdp_op_moe_aux_stats", "top_k:int">, NN_Differentiable,
    DeclareOpInterfaceMethods<NN_SplitExpansionOpInterface>]> {
  let summary = "One layer's routing statistics for the load-balancing loss";
  let description = [{
    From router `logits` `[..., E]`: `[2E + 1]` f32 holding, per expert, the
    number of top-k selections, then the sum of the softmax probabilities
    over the tokens, then the token count. Statistics of several layers (and
    data-parallel ranks) add; `moe_aux_combine` turns them into the loss.
    Only the probability sums have a gradient.
  }];
  let arguments = !con((ins NN_FloatTensor:$logits, I64Attr:$top_k), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = "$logits attr-dict `:` functional-type(operands, results)";
}

def NN_MoeAuxCombineOp : NN_Op<"moe_aux_combine", [NN_Imported,
    RuntimeCall<"fsdp_op_moe_aux_combine">, NN_Differentiable]> {
  let summary = "The load-balancing loss from summed routing statistics";
  let description = [{
    `E · Σ_e (count_e / rows) · (probability_e / rows)` from `stats`
    `[2E + 1]` (`moe_aux_stats`, summed): transformers'
    `load_balancing_loss_func` over the concatenated layers. `coef` is
    `router_aux_loss_coef`: fsdp-build-train-step adds `coef` times this
    loss to the training loss, after summing the statistics over the
    data-parallel ranks, so the loss is the whole batch's.
  }];
  let arguments = !con((ins RankedTensorOf<[F32]>:$stats, F64Attr:$coef),
                       NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = "$stats attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

def NN_MoeRouterGradOp : NN_Op<"moe_router_grad", [
    RuntimeCall<"fsdp_op_moe_router_grad", "normalize:bool">]> {
  let summary = "Gradient of moe_router w.r.t. its logits";
  let arguments = !con((ins NN_FloatTensor:$logits,
                            RankedTensorOf<[I64]>:$indices,
                            NN_FloatTensor:$grad, UnitAttr:$normalize),
                       NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $indices `,` $grad attr-dict `:` functional-type(operands, results)
  }];
}

def NN_MoeUnpermuteGradOp : NN_Op<"moe_unpermute_grad", [
    RuntimeOutCall<"fsdp_op_moe_unpermute_grad", "num_experts:int">]> {
  let summary = "Gradients of a weighted moe_unpermute: rows and weights";
  let arguments = !con((ins NN_FloatTensor:$rows,
                            RankedTensorOf<[I64]>:$indices,
                            NN_FloatTensor:$weights, NN_FloatTensor:$grad,
                            I64Attr:$num_experts), NN_Path);
  let results = (outs NN_FloatTensor:$rows_grad, NN_FloatTensor:$weights_grad);
  let assemblyFormat = [{
    $rows `,` $indices `,` $weights `,` $grad attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDefinition = NN_GradientRule<"MoeUnpermuteOp",
      ["getRows", "getIndices", "getWeights"],
      ["getRows", "getWeights"]>.body;
}

def NN_GroupedLinearGradOp : NN_Op<"grouped_linear_grad", [
    RuntimeOutCall<"fsdp_op_grouped_linear_grad">, NN_Costed]> {
  let summary = "Gradients of grouped_linear w.r.t. input and weight";
  let arguments = !con((ins NN_FloatTensor:$input,
                            RankedTensorOf<[I64]>:$counts,
                            NN_FloatTensor:$weight, NN_FloatTensor:$grad,
                            OptionalAttr<F64Attr>:$active_share), NN_Path);
  let results = (outs NN_FloatTensor:$input_grad, NN_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $counts `,` $weight `,` $grad attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDefinition = NN_GradientRule<"GroupedLinearOp",
      ["getInput", "getCounts", "getWeight"],
      ["getInput", "getWeight"]>.body;
}

def NN_MoeAuxStatsGradOp : NN_Op<"moe_aux_stats_grad", [
    RuntimeCall<"fsdp_op_moe_aux_stats_grad">]> {
  let summary = "Gradient of moe_aux_stats w.r.t. its logits";
  let arguments = !con((ins NN_FloatTensor:$logits,
                            RankedTensorOf<[F32]>:$grad), NN_Path);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat =
      "$logits `,` $grad attr-dict `:` functional-type(operands, results)";
}

def NN_MoeAuxCombineGradOp : NN_Op<"moe_aux_combine_grad", [
    RuntimeCall<"fsdp_op_moe_aux_combine_grad">]> {
  let summary = "Gradient of moe_aux_combine w.r.t. the probability sums";
  let arguments = !con((ins RankedTensorOf<[F32]>:$stats,
                            RankedTensorOf<[F32]>:$grad), NN_Path);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat =
      "$stats `,` $grad attr-dict `:` functional-type(operands, results)";
}

//===- Passes.td - fsdp-mlir passes ------------------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_TRANSFORMS_PASSES_TD
#define FSDP_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def BuildTrainStepPass : Pass<"fsdp-build-train-step", "mlir::ModuleOp"> {
  let summary = "Turn a forward function into a training step";
  let description = [{
    Rewrites the entry function (a forward pass whose `loss` output is an
    `nn.cross_entropy`) into one training step:

    1. the loss becomes the summed cross-entropy divided by the number of
       non-ignored tokens (`nn.token_count`), so it does not depend on how
       tokens are split into microbatches or ranks;
    2. with `microbatches = M`, the data inputs grow by `M` along dim 0 and
       the forward and backward run once per slice, gradients accumulating;
    3. reverse-mode autodiff of every `nn` op and `dist` collective yields
       each parameter's gradient (`all_gather` ↔ `reduce_scatter`,
       `all_reduce` ↔ identity as Megatron's f/g, `all_to_all` with its
       dims swapped, `permute` by the negative offset) (the transposes are forward ops where one exists:
       `linear`'s are `matmul`s, `slice`'s is `pad`, `rotary`'s is the
       inverse rotation);
    4. with `param-dtype = bf16` (or f16), FSDP2's `MixedPrecisionPolicy`:
       the forward and backward compute in that dtype on cast copies of the
       f32 master parameters, whose gradients come back in f32;
    5. with `max-grad-norm > 0`, gradients are scaled by PyTorch's
       `clip_grad_norm_` coefficient of their global norm: each gradient
       block's sum of squares is all-reduced over the mesh axes that split
       it (a replicated copy counts once), so every rank scales by the
       whole model's norm;
    6. the optimizer (`adamw` or `sgd`) updates each f32 parameter and its
       state (`nn.state` arguments, zero at start); each new value is a
       result `updated.<name>` marked `nn.updates = <argument>`, which the
       runtime keeps in
       place of the old one. With `optimizer = none` the step returns the
       gradients instead (`grad.<name>`), for testing;
    7. with `activation-checkpointing = full` (or `selective`), each decoder
       layer's values that the backward reads are recomputed right before
       the layer's backward from what the layer keeps (its input; with
       `selective` also every other matmul's, attention's and the
       collectives' results): the clones carry `fsdp.recompute`, and under
       FSDP they read the backward's re-gathered parameters, so no gather is
       added. Same kernels, same order: the step's numbers do not change.
       With `activation-memory-budget`, the pass picks per layer: it walks
       from no checkpointing to selective on the first 1, 2, ... layers,
       then to full on the first 1, 2, ... (each step recomputes more and
       saves less), and takes the first plan whose saved activations fit,
       by binary search over trial builds; a budget that even full
       checkpointing of every layer misses is an error naming both.

    ```mlir
    // Before: %loss = nn.cross_entropy %logits, %labels : ... -> tensor<f32>
    // After (abridged):
    %sum = nn.cross_entropy %logits, %labels {reduction = "sum"} : ...
    %n = nn.token_count %labels : tensor<2x16xi64> -> tensor<f32>
    %loss = nn.div %sum, %n : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %seed = nn.div %one, %n : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %dlogits = nn.cross_entropy_grad %logits, %labels, %seed {reduction = "sum"} : ...
    ...
    %w1, %m1, %v1 = nn.adamw %w, %dw, %m, %v, %step, %coef {lr = ...} : ...
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function to rewrite">,
    Option<"optimizer", "optimizer", "fsdp::Optimizer",
           /*default=*/"fsdp::Optimizer::AdamW",
           "The optimizer: adamw, sgd, or none (return the gradients)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::Optimizer::AdamW, "adamw", "torch.optim.AdamW"),
          clEnumValN(fsdp::Optimizer::SGD, "sgd", "torch.optim.SGD"),
          clEnumValN(fsdp::Optimizer::None, "none",
                     "none: return the gradients"))
    }]>,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Weight decay (decoupled for AdamW, L2 for SGD); unset, torch's "
           "default: 0.01 for AdamW, 0 for SGD">,
    Option<"lrSchedule", "lr-schedule", "fsdp::LrSchedule",
           /*default=*/"fsdp::LrSchedule::Constant",
           "The learning-rate schedule (transformers' get_scheduler), "
           "computed on the device from the step count", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::LrSchedule::Constant, "constant",
                     "lr after the warmup"),
          clEnumValN(fsdp::LrSchedule::Linear, "linear",
                     "linear decay to min-lr-ratio at total-steps"),
          clEnumValN(fsdp::LrSchedule::Cosine, "cosine",
                     "half-cosine decay to min-lr-ratio at total-steps"))
    }]>,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Steps of linear warmup from 0 to lr">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "The step at which linear and cosine reach min-lr-ratio · lr "
           "(held after it)">,
    Option<"minLrRatio", "min-lr-ratio", "double", /*default=*/"0.0",
           "The decayed schedules' final learning rate, as a fraction of lr "
           "(transformers' min_lr_rate)">,
    Option<"evalStep", "eval", "bool", /*default=*/"false",
           "Also build `<entry>_eval`: the forward and the global mean loss "
           "only (no backward, no optimizer), with the step's arguments and "
           "sharding, which the program runs for --eval-data">,
    Option<"gradNorm", "grad-norm", "bool", /*default=*/"false",
           "Output the global gradient norm (`grad_norm`) even without "
           "clipping (with max-grad-norm it always is)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"maxGradNorm", "max-grad-norm", "double", /*default=*/"0.0",
           "Clip the global gradient norm to this (0 = no clipping)">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Microbatches accumulated per step">,
    Option<"paramDtype", "param-dtype", "fsdp::Dtype",
           /*default=*/"fsdp::Dtype::F32",
           "MixedPrecisionPolicy.param_dtype (f32, bf16, f16): parameters are "
           "cast to it for forward and backward; the optimizer keeps f32 "
           "masters", [{
      ::llvm::cl::values(clEnumValN(fsdp::Dtype::F32, "f32", "float32"),
                         clEnumValN(fsdp::Dtype::BF16, "bf16", "bfloat16"),
                         clEnumValN(fsdp::Dtype::F16, "f16", "float16"))
    }]>,
    Option<"outputDtype", "output-dtype", "fsdp::Dtype",
           /*default=*/"fsdp::Dtype::Same",
           "MixedPrecisionPolicy.output_dtype (f32, bf16, f16, or same: the "
           "compute dtype): the step's other outputs (logits) are cast to it", [{
      ::llvm::cl::values(clEnumValN(fsdp::Dtype::F32, "f32", "float32"),
                         clEnumValN(fsdp::Dtype::BF16, "bf16", "bfloat16"),
                         clEnumValN(fsdp::Dtype::F16, "f16", "float16"),
                         clEnumValN(fsdp::Dtype::Same, "same",
                                    "the compute dtype"))
    }]>,
    Option<"reduceDtype", "reduce-dtype", "fsdp::Dtype",
           /*default=*/"fsdp::Dtype::Same",
           "MixedPrecisionPolicy.reduce_dtype (f32, bf16, f16, or same: their "
           "own): gradients cross ranks (the backward of dist collectives) in "
           "this dtype", [{
      ::llvm::cl::values(clEnumValN(fsdp::Dtype::F32, "f32", "float32"),
                         clEnumValN(fsdp::Dtype::BF16, "bf16", "bfloat16"),
                         clEnumValN(fsdp::Dtype::F16, "f16", "float16"),
                         clEnumValN(fsdp::Dtype::Same, "same",
                                    "the gradient's own"))
    }]>,
    Option<"castForwardInputs", "cast-forward-inputs", "bool",
           /*default=*/"true",
           "MixedPrecisionPolicy.cast_forward_inputs: float data inputs are "
           "cast to param-dtype">,
    Option<"activationCheckpointing", "activation-checkpointing",
           "fsdp::Checkpointing", /*default=*/"fsdp::Checkpointing::Config",
           "Activation checkpointing of the decoder layers: none, full (each "
           "layer keeps its input and recomputes the rest before its "
           "backward), selective (also keeps every other matmul's, "
           "attention's and the collectives' results), or config (the "
           "parallel config's activation_checkpointing; none without one)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::Checkpointing::Config, "config",
                     "the parallel config's"),
          clEnumValN(fsdp::Checkpointing::None, "none", "keep everything"),
          clEnumValN(fsdp::Checkpointing::Full, "full", "recompute layers"),
          clEnumValN(fsdp::Checkpointing::Selective, "selective",
                     "the selective op policy"))
    }]>,
    Option<"activationMemoryBudget", "activation-memory-budget", "double",
           /*default=*/"0",
           "Choose the checkpointing per layer instead: the least recomputed "
           "FLOPs whose saved activations (bytes live when the backward "
           "starts) fit this many bytes per rank, or this fraction (<= 1) of "
           "what the forward saves without checkpointing; 0: off (the "
           "parallel config's activation_memory_budget, if any)">,
  ];
  let statistics = [
    Statistic<"numGradOps", "grad-ops", "Ops the backward pass emitted">,
  ];
}

def CommReportPass : Pass<"fsdp-comm-report", "mlir::ModuleOp"> {
  let summary = "Report the communication of one step, per collective and group";
  let description = [{
    Counts, for each `dist` collective kind and each group of mesh axes, the
    calls and the bytes one rank sends in one step of the entry function,
    with the runtime's convention (docs/runtime-abi.md): all_gather sends its
    input to n - 1 peers, reduce_scatter and all_to_all (n - 1)/n of it,
    all_reduce 2(n - 1)/n, permute and broadcast all of it. The runtime's
    counters after one step equal this report exactly. The IR is unchanged.

    ```
    collective       group             calls     bytes sent
    all_gather       {dp_shard}            4          32768
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step function to report on">,
    Option<"format", "format", "fsdp::ReportFormat",
           /*default=*/"fsdp::ReportFormat::Table", "The report's layout: table or json", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::ReportFormat::Table, "table", "the runtime's --report layout"),
          clEnumValN(fsdp::ReportFormat::Json, "json", "JSON"))
    }]>,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the report (- for stdout)">,
  ];
}

def ParallelConfigPass : Pass<"fsdp-parallel-config", "mlir::ModuleOp"> {
  let summary = "Read the parallel configuration and build the mesh";
  let description = [{
    Reads the parallel configuration (`config`, a parallel.json with
    Automodel's ParallelismSizes and FSDP2Config fields, see
    docs/parallel-config.md; `tp`, `sequence-parallel` override it) once,
    resolves the mesh sizes for `world-size` ranks as Automodel does, builds
    `dist.mesh @mesh(dp_replicate, dp_shard, cp, tp)` (TP innermost) with
    the flattened views `dp`, `dp_shard_cp` and `dp_cp` (or checks the
    module's own mesh against the config), and records the whole config,
    typed, as the module attribute `fsdp.parallel` (`#fsdp.parallel`),
    which every later pass reads its own settings from. Errors name the
    file, the field and its line.

    ```mlir
    // {"tp_size": 2, "sequence_parallel": true} on 4 ranks:
    dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 2) {views = {...}}
    module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1,
        dp_shard = 2, cp = 1, cp_comm_type = p2p, tp = 2, ...>}
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect", "fsdp::FSDPDialect"];
  let options = [
    Option<"config", "config", "std::string", /*default=*/"\"\"",
           "parallel.json (empty: defaults)">,
    Option<"worldSize", "world-size", "int64_t", /*default=*/"0",
           "Ranks the program runs on (0: the config's smallest world)">,
    Option<"tp", "tp", "int64_t", /*default=*/"0",
           "Tensor-parallel size (0: the config's tp_size)">,
    Option<"sequenceParallel", "sequence-parallel", "fsdp::FromConfig",
           /*default=*/"fsdp::FromConfig::Config",
           "Sequence parallelism: true, false, or config (the config's "
           "sequence_parallel)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::FromConfig::Config, "config",
                     "the config's sequence_parallel"),
          clEnumValN(fsdp::FromConfig::True, "true", "on"),
          clEnumValN(fsdp::FromConfig::False, "false", "off"))
    }]>,
  ];
}

def TPPlanPass : Pass<"fsdp-tp-plan", "mlir::ModuleOp"> {
  let summary = "Annotate the forward with a tensor-parallel plan";
  let description = [{
    Resolves the tensor-parallel plan of the module's `fsdp.parallel`
    (written by `fsdp-parallel-config`, which runs first): the config's
    `tp_plan` (Hugging Face style strings or ParallelStyle objects keyed by
    module-path globs) or the built-in plan of the model's family (Llama,
    Mistral, Qwen2, Qwen3, GPT-2), with its sequence-parallel overlay.

    Every op whose `path` a plan key matches gets `dist.tp`, the style it
    runs under, a `#dist.tp` attribute the dist dialect verifies:
    `#dist.tp<colwise, input = replicate, output = shard(-1),
    use_local_output = true, entry = "<key>">`. This is the
    global annotated program `fsdp-partition` turns into the per-rank one.
    A key that matches no module is a warning listing it (an error with
    `strict-plan`); attention whose query or key/value heads do not divide
    by tp is an error. With `report`, writes the plan: each entry's style
    and module count, and every parameter left replicated over tp (a table,
    or JSON with `format=json`; nothing when tp is 1).

    ```mlir
    %q = nn.linear %h, %wq {path = "model.layers.0.self_attn.q_proj"} : ...
    // becomes, with tp = 2 and the built-in plan:
    dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 1, tp = 2) {views = {...}}
    %q = nn.linear %h, %wq {dist.tp = #dist.tp<colwise, input = replicate,
        output = shard(-1), use_local_output = true,
        entry = "model.layers.*.self_attn.q_proj">,
        path = "model.layers.0.self_attn.q_proj"} : ...
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function to annotate">,
    Option<"strictPlan", "strict-plan", "bool", /*default=*/"false",
           "A plan key that matches no module is an error">,
    Option<"report", "report", "std::string", /*default=*/"\"\"",
           "Write the plan report here (- for stdout, empty: none)">,
    Option<"format", "format", "fsdp::ReportFormat",
           /*default=*/"fsdp::ReportFormat::Table", "The report's layout: table or json", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::ReportFormat::Table, "table", "a table"),
          clEnumValN(fsdp::ReportFormat::Json, "json", "JSON"))
    }]>,
  ];
  let statistics = [
    Statistic<"numAnnotated", "annotated-ops", "Ops given a dist.tp style">,
  ];
}

def PartitionPass : Pass<"fsdp-partition", "mlir::ModuleOp"> {
  let summary = "Partition the tensor-parallel annotated forward into the per-rank program";
  let description = [{
    Rewrites the forward annotated by `fsdp-tp-plan` into the program one
    rank runs, with local shapes and the fewest collectives the plan allows.
    Each value has a layout over tp: replicated, sharded on a dim (possibly
    in strided groups), or a pending partial sum. Styled ops set layouts
    (column-parallel: weight rows split, output sharded on the last dim;
    row-parallel: weight columns split, output partial; vocabulary-parallel
    embedding: rows split, ids outside the block give zeros, output partial;
    sequence parallel: the op runs on the rank's sequence block), partial
    sums are reduced at the module output into the style's output layout
    (`all_reduce` for Replicate, `reduce_scatter` for Shard(1)), inputs are
    converted into the style's input layout (`all_gather` of a sequence
    block before a column-parallel projection; `all_slice`, which moves no
    data, of a replicated value), and every other op follows its operands'
    layouts through its shape rule (reshapes move a sharded dim; attention
    runs on the rank's heads).

    A replicated float value entering per-rank computation passes through
    `dist.copy` (Megatron's f) so its gradient sums the ranks' parts. A
    cross-entropy of vocabulary-sharded logits becomes the
    vocabulary-parallel loss: `nn.reduce_max`, an `all_reduce max`,
    `nn.cross_entropy_partial`, two `all_reduce sum`s of per-position values
    and `nn.cross_entropy_combine`; the whole logits are never gathered. A
    column-parallel projection whose output is split into equal parts along
    its features (GPT-2's fused `c_attn`) is split per part (strided).
    Parameters become per-rank blocks marked `dist.sharding`. A resharding
    the pass does not support is an error naming the op.

    ```mlir
    // tp = 2, sequence parallel: the input of q_proj is a sequence block.
    %full = dist.all_gather %h on @mesh[tp] dim 1 : tensor<2x8x64xf32> -> tensor<2x16x64xf32>
    %q = nn.linear %full, %wq : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function to partition">,
  ];
  let statistics = [
    Statistic<"numSplitParams", "split-params",
              "Parameters split into per-rank blocks">,
  ];
}

def ExpertParallelPass : Pass<"fsdp-expert-parallel", "mlir::ModuleOp"> {
  let summary = "Expert parallelism: each rank holds its experts; tokens reach them by a variable-split all-to-all";
  let description = [{
    Runs on the per-rank forward (after `fsdp-context-parallel`, before
    `fsdp-shard`) when the mesh has an `ep` axis of more than one rank
    (`ep_size` in parallel.json: the data-parallel shard ranks are
    `(ep_shard, ep)`, ep innermost). Each expert weight of a sparse layer
    (an `nn.grouped_linear` weight `[E, N, K]`) keeps the `E / ep` experts
    of the rank's ep index (`#dist.sharding` on `ep`, dim 0), which
    `fsdp-shard` then shards over `ep_shard` (× `cp`). Around the experts'
    products, the rows `nn.moe_permute` put in expert order go to the ranks
    owning their experts and come back before `nn.moe_unpermute`:

    ```mlir
    %seg = dist.all_to_all %counts on @mesh[ep] split 0 concat 0   // per source, my experts
    %send = nn.moe_rank_counts %counts {ranks = 2}
    %recv = nn.moe_rank_counts %seg {ranks = 2}
    %in = dist.all_to_all_v %rows on @mesh[ep] counts(%send, %recv ...)
        : tensor<64x48xf32> -> tensor<128x48xf32>
    %h = nn.grouped_linear %in, %seg, %w_local ...     // ep · E/ep segments
    ...
    %back = dist.all_to_all_v %y on @mesh[ep] counts(%recv, %send ...)
    %out = nn.moe_unpermute %back, %indices, %weights ...
    ```

    Routing is dropless: the receive buffer holds the most rows that can
    arrive, `ep · T · min(k, E / ep)` for T tokens routed to k experts (a
    source sends each token to a rank at most once per expert it holds
    there), so every shape is static and the counts stay on the device.
    Autodiff sends the gradients back the same ways. The bound, the
    balanced rows and the dispatch bytes appear in the communication and
    memory reports.
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function whose experts to distribute">,
  ];
  let statistics = [
    Statistic<"numDispatches", "dispatches",
              "Sparse layers whose experts were distributed">,
  ];
}

def ContextParallelPass : Pass<"fsdp-context-parallel", "mlir::ModuleOp"> {
  let summary = "Context parallelism: the sequence split over cp in load-balanced chunks, attention over the gathered keys";
  let description = [{
    Runs on the per-rank forward (after `fsdp-partition`, before
    `fsdp-shard`) when the mesh's `cp` axis has more than one rank. The
    sequence is cut into `2·cp` chunks and cp rank `r` holds chunks `r` and
    `2·cp−1−r` (load-balanced: under a causal mask every rank attends as
    many pairs). The token inputs (`[B, S]`, `#dist.sharding` groups `-2` on
    dim 1) and every value along the sequence shrink to `S / cp`; a
    reshape's sequence dim follows, and so do tensor-parallel collectives
    (sequence parallelism splits the rank's chunks again over tp).

    The runtime fills `position_ids` with the global positions of the
    rank's tokens, which rotary embeddings and learned position tables read,
    and which place each attention's queries in the sequence. With
    `cp_comm_type = "p2p"` (the default, ring attention) each `nn.attention`
    becomes `cp` attentions: step `t` attends to the keys and values of cp
    rank `r − t`, which came round the ring of `dist.permute`s over `cp`
    with their positions (so the mask is exact, sliding windows included),
    and `nn.attention_combine` merges each step's result into the running
    one by log-sum-exp; each permute is issued before the previous block's
    attention, and `fsdp-schedule` makes it asynchronous so the transfer
    overlaps that attention. A layer keeps only its own block for the
    backward: the training step passes the blocks round the ring again
    before the layer's backward (fsdp-build-train-step's rematerialization,
    with or without activation checkpointing), and autodiff returns dK and
    dV to the ranks that own them. With `"all_gather"` (as Llama 3
    trained) each attention gathers its keys and values over `cp` once,
    puts the chunks back in sequence order and attends to all of them;
    autodiff turns the gather into the reduce-scatter of dK and dV.
    `fsdp-shard` then shards parameters over `dp_shard × cp` and the loss
    counts tokens over `dp_replicate × dp_shard × cp`.

    Packed rows (`packed` attentions: `position_ids` are positions in
    documents) add a `token_index` input, the tokens' indices in the row,
    which the masks read, and split the row over `k` rounds of `2·cp`
    chunks (groups `-2·k`): a long document's tail lands on every rank in
    turn rather than on one, which keeps the ranks' work even.

    ```mlir
    // p2p, cp = 2
    %k1 = dist.permute %k on @mesh[cp] offset 1 {fsdp.context_parallel} ...
    %p1 = dist.permute %position_ids on @mesh[cp] offset 1 ...
    %o0, %l0 = nn.attention %q, %k, %v positions %position_ids
        key_positions %position_ids {causal} ...
    %o1, %l1 = nn.attention %q, %k1, %v1 positions %position_ids
        key_positions %p1 {causal} ...
    %o, %lse = nn.attention_combine %o0, %l0, %o1, %l1 ...
    // all_gather
    %k_all = dist.all_gather %k on @mesh[cp] dim 1 {fsdp.context_parallel}
        : tensor<2x8x2x16xf32> -> tensor<2x16x2x16xf32>
    %c:4 = nn.split %k_all dim 1 sizes [4, 4, 4, 4] ...
    %k_seq = nn.concat %c#0, %c#2, %c#3, %c#1 dim 1 ...
    %o, %lse = nn.attention %q, %k_seq, %v_seq positions %position_ids {causal} ...
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function to split">,
    Option<"commType", "comm-type", "std::string", /*default=*/"\"config\"",
           "How attention exchanges K/V: p2p (a ring of permutes), "
           "all_gather, or config (the parallel config's cp_comm_type, else "
           "p2p)">,
    Option<"rounds", "rounds", "int64_t", /*default=*/"0",
           "Load-balanced rounds: the 2·cp chunks repeat this many times "
           "(0: 1 for one document a row; for packed rows the most, a power "
           "of two, that keeps chunks of 64 tokens or more)">,
  ];
  let statistics = [
    Statistic<"numAttentions", "attentions",
              "Attentions over keys gathered over cp">,
  ];
}

def FSDPShardPass : Pass<"fsdp-shard", "mlir::ModuleOp"> {
  let summary = "FSDP2: data-parallel batch split and per-parameter dim-0 sharding with bucketed unit gathers";
  let description = [{
    Runs on the per-rank forward (after `fsdp-partition`) when the mesh has
    data-parallel ranks (`dp_shard`, `dp_replicate`). The data inputs' batch
    dim is split over `dp_replicate × dp_shard`; every parameter keeps its
    dim-0 block over `dp_shard` (inside its tensor-parallel block, if any,
    padded at that block's end when it does not divide; `fsdp.inner_axes`
    tells the runtime which axes of dim 0 are FSDP's).
    Parameters are grouped in units, one per decoder layer and a root unit
    for the rest, and each unit's blocks are gathered by one all_gather of
    their flattened concatenation right before the unit's first use. The
    training step's autodiff turns each gather into one reduce_scatter of the
    unit's gradients; with HSDP (`dp_replicate > 1`) a `dist.copy` over
    `dp_replicate` before the gather becomes the all-reduce across replicas.

    `reshard-after-forward` marks the gathers the training step gathers
    again for the backward (`fsdp.reshard`): `none` (FSDP2's default) every
    layer but the last, `true` every layer, `false` none; the root unit is
    never resharded; `config` follows the module's `fsdp.parallel`.
    FSDP2Config's `defer_fsdp_grad_sync` (default true) makes the training
    step sum each unit's whole gradients over the microbatches and
    reduce-scatter them once, in the last microbatch.

    ```mlir
    %flat = nn.reshape %wq to [1, 2048] ...
    %bucket = nn.concat %flat, ... dim 1 ...
    %all = dist.all_gather %bucket on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.0"} ...
    %parts = nn.split %all dim 1 sizes [...] ...
    %wq_full = nn.reshape %parts#0 to [64, 64] ...
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The forward function to shard">,
    Option<"vocabUnits", "vocab-units", "bool", /*default=*/"false",
           "Give trainable untied vocabulary tables (the embedding, the "
           "head) units of their own instead of the root's (never "
           "resharded)">,
    Option<"reshardAfterForward", "reshard-after-forward", "fsdp::Reshard",
           /*default=*/"fsdp::Reshard::Config",
           "FSDP2's reshard_after_forward: none (every layer but the last), "
           "true, false, or config (the parallel config's, else none)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::Reshard::Config, "config",
                     "the parallel config's, recorded by fsdp-tp-plan, else "
                     "none"),
          clEnumValN(fsdp::Reshard::None, "none",
                     "every layer but the last (FSDP2's default)"),
          clEnumValN(fsdp::Reshard::True, "true", "every layer"),
          clEnumValN(fsdp::Reshard::False, "false", "no layer"))
    }]>,
  ];
  let statistics = [
    Statistic<"numUnits", "units", "FSDP units, each gathered by one all_gather">,
  ];
}

def SchedulePass : Pass<"fsdp-schedule", "mlir::ModuleOp"> {
  let summary = "Overlap FSDP's collectives with compute: gathers start ahead, gradient syncs are waited later";
  let description = [{
    Runs on the per-rank step (after `fsdp-build-train-step`, or on a
    forward) and turns FSDP's collectives into their asynchronous form
    (`!dist.future` + `dist.wait`):

    - Each decoder-layer unit's forward all-gather (`fsdp.unit`, not the
      root's) starts `forward-depth` units ahead: at the start of unit
      `j - depth`'s compute, right after that unit's wait, as FSDP2's
      `set_modules_to_forward_prefetch` chains within the layer container
      issue it. The backward re-gathers (`fsdp.regather`) do the same in
      backward order with `backward-depth`. The ops that pack a unit's
      blocks (casts, reshapes, concat of its parameters) move with the
      start. Depth 0 leaves the gathers synchronous.
    - Reduce-scatters and all-reduces over data-parallel axes (gradient
      sync, HSDP) start where they stand; their wait, with the casts and
      slices that only rearrange the result, moves down to the first op
      that needs it, but not past the next gradient sync's start: one sync
      is in flight at a time, as in FSDP2, since its future holds the
      unit's whole gradient. Each overlaps the next unit's backward.

    Depths default to the module's `fsdp.parallel` (written by
    `fsdp-parallel-config` from FSDP2Config: `fsdp2_forward_prefetch_depth` and
    `fsdp2_backward_prefetch_depth` when `enable_fsdp2_prefetch` is on and
    `reshard_after_forward` is not false, else 1 and 1, FSDP2's implicit
    prefetch of one unit in each direction). Numerics are unchanged: only
    the order of independent ops changes.

    The pass checks its result: every future has exactly one wait, after
    its start and before every use of the value; and, as one SPMD program
    without rank-dependent branches, every rank issues each group's
    collectives in the same order. It says so in a remark.

    ```mlir
    %f1 = dist.all_gather %b1 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.1"}
        : tensor<1x9280xbf16> -> !dist.future<tensor<2x9280xbf16>>
    ... layer 0's compute ...
    %all1 = dist.wait %f1 : !dist.future<tensor<2x9280xbf16>>
    ```
  }];
  let dependentDialects = ["fsdp::dist::DistDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step to schedule">,
    Option<"forwardDepth", "forward-depth", "int64_t", /*default=*/"-1",
           "Units ahead a layer's forward all-gather starts (0: "
           "synchronous; -1: the module's fsdp.parallel, else 1)">,
    Option<"backwardDepth", "backward-depth", "int64_t", /*default=*/"-1",
           "Units ahead a layer's backward re-gather starts (0: "
           "synchronous; -1: the module's fsdp.parallel, else 1)">,
    Option<"overlapGradientSync", "overlap-gradient-sync", "bool",
           /*default=*/"true",
           "Start data-parallel reduce-scatters and all-reduces where they "
           "stand and wait where their result is first needed">,
    Option<"remark", "remark", "bool", /*default=*/"true",
           "Describe the schedule and its check in a remark">,
  ];
  let statistics = [
    Statistic<"numPrefetched", "prefetched-gathers",
              "All-gathers started ahead of their unit">,
    Statistic<"numOverlapped", "overlapped-syncs",
              "Gradient reduce-scatters and all-reduces waited later">,
    Statistic<"numRingSteps", "ring-steps",
              "Ring-attention permutes over cp overlapped with attention">,
  ];
}

def MemoryReportPass : Pass<"fsdp-memory-report", "mlir::ModuleOp"> {
  let summary = "Report the memory one rank holds in one step, without running";
  let description = [{
    Replays the entry function's allocations as the runtime makes them:
    arguments (parameter blocks, optimizer state, data) stay for the whole
    step, every op result is a new tensor freed after its last use (a
    `dist.copy` shares its input's), returned values stay to the end, and a
    collective adds the runtime's staging buffers while it runs. Reports the
    parameters, optimizer state, inputs, gradients at the update, the
    largest gathered FSDP unit, the peak of activations and temporaries, and
    the estimated peak, which the runtime's measured peak (`--report`)
    matches. The IR is unchanged.

    With `memory-plan` (the default, as `fsdp-lower-to-runtime`), the step's
    device buffers that die inside it live at the compiler's offsets in one
    arena (StepBuffers.h): the report gives the arena, the buffers in it and
    the most bytes they hold at once, and the estimate counts the arena for
    the whole step.

    ```
    memory per rank                               bytes
    parameters (this rank's blocks)              213632
    optimizer state                              427264
    ...
    estimated peak                              1331724
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step function to report on">,
    Option<"format", "format", "fsdp::ReportFormat",
           /*default=*/"fsdp::ReportFormat::Table", "The report's layout: table or json", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::ReportFormat::Table, "table", "a table"),
          clEnumValN(fsdp::ReportFormat::Json, "json", "JSON"))
    }]>,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the report (- for stdout)">,
    Option<"memoryPlan", "memory-plan", "bool", /*default=*/"true",
           "Report the step as lowered with the memory plan">,
  ];
}

def SimulatePass : Pass<"fsdp-simulate", "mlir::ModuleOp"> {
  let summary = "Predict one step's time on a hardware model, with a trace";
  let description = [{
    Replays the per-rank step function (after `fsdp-schedule`) on one compute
    stream and one stream per communicating mesh-axis group of a GPU
    described by `hardware` (a JSON file: peak FLOP/s per dtype, HBM
    bandwidth, kernel efficiencies, NVLink and network bandwidth and
    latency, GPUs per node; docs/simulator.md). Costs:

    - matmuls and attention by their FLOPs (CostOpInterface) at the stated
      efficiency, other ops by the bytes they move at the HBM bandwidth;
    - collectives by α-β models (ring; all-reduce the faster of ring and
      tree) on NVLink when the group's ranks share a node, else on the
      network at the bandwidth of the group's NICs per node (ranks are laid
      out row-major over the mesh, the last axis fastest);
    - an async collective starts on its group's stream when its input is
      ready and the stream is free; `dist.wait`, and every synchronous
      collective, holds the compute stream until the transfer is done: that
      time is the exposed communication.

    Prints the predicted step time, compute and exposed communication per
    group, MFU (model FLOPs over step time and the bf16 dense peak) and
    tokens/s per GPU, and writes a Chrome/Perfetto trace with one track per
    stream. The IR is unchanged.

    ```
    simulated step on NVIDIA H100 SXM5 80GB, one of 64 ranks
    step time                                  9871.4 ms
    ...
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step function to simulate">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"\"",
           "The hardware model (JSON)">,
    Option<"trace", "trace", "std::string", /*default=*/"\"\"",
           "Write a Chrome/Perfetto trace (JSON) here">,
    Option<"format", "format", "fsdp::ReportFormat",
           /*default=*/"fsdp::ReportFormat::Table", "The report's layout: table or json", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::ReportFormat::Table, "table", "a table"),
          clEnumValN(fsdp::ReportFormat::Json, "json", "JSON"))
    }]>,
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the report (- for stdout)">,
  ];
}

def AsyncTPPass : Pass<"fsdp-async-tp", "mlir::ModuleOp"> {
  let summary = "Decompose tp all-gather→matmul and matmul→reduce-scatter into overlapped ring steps";
  let description = [{
    On the training step (forward and backward alike), with
    `enable_async_tensor_parallel` (or `enable=true`):

    - a synchronous `dist.all_gather` over `tp` along a row dim, read by
      `nn.linear` / `nn.matmul` as their rows (q/k/v or gate/up share one):
      tp ring steps, each multiplying the block the rank holds while an
      async `dist.permute` brings the next one from the following rank; the
      partial products are joined and rotated (`nn.roll` by the rank) into
      rank order, and any other reader of the gathered value gets the
      blocks joined the same way;
    - a synchronous sum `dist.reduce_scatter` over `tp` of rows computed by
      matmuls (through adds, subs and casts used once): step k computes the
      rows of block (rank - 1 - k) mod tp and adds them to the running sum
      an async permute brings from the previous rank, so the rank's own
      block arrives summed.

    The permutes move exactly the bytes of the collectives they replace.
    The sums run in another order than MPI's reduce-scatter, so results
    agree to rounding, not bitwise.

    It runs after `fsdp-build-train-step`, not before autodiff: the
    backward of an all-gather is a reduce-scatter and the reverse, so the
    finished step holds the backward's collectives in the same two shapes
    and one rewrite serves both directions. Differentiating a decomposed
    forward instead would give the backward a permute ring per partial
    product, with the rotations' gradients in between, and leave the
    weight-gradient GEMMs split into tp pieces.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step function to rewrite">,
    Option<"enable", "enable", "fsdp::FromConfig",
           /*default=*/"fsdp::FromConfig::Config",
           "Decompose: the parallel config's enable_async_tensor_parallel "
           "(config), or always (true) or never (false)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::FromConfig::Config, "config", "the config's"),
          clEnumValN(fsdp::FromConfig::True, "true", "on"),
          clEnumValN(fsdp::FromConfig::False, "false", "off"))
    }]>,
    Option<"remark", "remark", "bool", /*default=*/"true",
           "Say what was decomposed">,
  ];
  let dependentDialects = ["fsdp::dist::DistDialect", "fsdp::nn::NNDialect"];
}

def OffloadPass : Pass<"fsdp-offload", "mlir::ModuleOp"> {
  let summary = "CPU offload: parameter blocks, gradients and optimizer state in host memory";
  let description = [{
    FSDP2's `CPUOffloadPolicy` (`offload_policy` in parallel.json, the
    `offload_policy` of the module's `fsdp.parallel`; or `enable=true`), on
    the finished
    training step:

    - the step's parameter blocks, optimizer state and optimizer step count
      are placed in host memory (`fsdp.host` on the argument);
    - each gradient an optimizer op updates with is copied to the host
      (`nn.to_host`) where it is produced, after its reduce-scatter;
    - the optimizer ops and everything only they need (clipping's squared
      norms, their sums, the clip coefficient) are placed on the host
      (`fsdp.host` on the op): their results are host buffers, and the
      updated parameters and state stay there. Collectives stay on the
      device (the norm's scalars are copied across);
    - every other op that reads a host value gets a device copy
      (`nn.to_device`) just before it: a parameter block is copied to the
      device before its cast and all-gather, once per use, as FSDP2 copies
      it before each all-gather.

    Where the optimizer runs is the `optimizer` option, recorded as the
    module attribute `fsdp.offload_optimizer`:

    - `cpu` (the default, as FSDP2): the optimizer ops and the squared
      norms run on the host's cores. On CUDA the runtime queues them on the
      compute stream as host functions (`fsdp_rt_host_call`), so they run
      once their gradients have arrived and the host still never waits for
      the device; only the placement copies cross the host link.
    - `gpu`: they run as the backend's kernels reading pinned host memory
      over the link (zero-copy): no host cores, but every byte of the
      state crosses the link at each step.

    The scalar ops between the norms and the update (their sums, the clip
    coefficient) run as kernels either way. On the CPU target everything
    runs on the CPU and the two are the same. The numbers do not change;
    the memory report splits device and host memory, and `fsdp-simulate`
    times the optimizer on the model's `host_cpu` or `host_link`. Runs
    after `fsdp-build-train-step` (and the schedule), before the reports
    and the lowering.
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The step function to rewrite">,
    Option<"enable", "enable", "fsdp::FromConfig",
           /*default=*/"fsdp::FromConfig::Config",
           "Offload: the module's fsdp.parallel (config), or always (true) or "
           "never (false)", [{
      ::llvm::cl::values(
          clEnumValN(fsdp::FromConfig::Config, "config", "the config's"),
          clEnumValN(fsdp::FromConfig::True, "true", "on"),
          clEnumValN(fsdp::FromConfig::False, "false", "off"))
    }]>,
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"cpu\"",
           "Where the offloaded optimizer runs: cpu (the host's cores, as "
           "FSDP2) or gpu (kernels reading pinned host memory)">,
  ];
  let dependentDialects = ["fsdp::nn::NNDialect"];
}

#endif // FSDP_TRANSFORMS_PASSES_TD

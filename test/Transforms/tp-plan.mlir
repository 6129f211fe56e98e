// RUN: fsdp-opt %s -split-input-file -fsdp-parallel-config="tp=2" -fsdp-tp-plan -verify-diagnostics | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-parallel-config="tp=2 sequence-parallel=true" -fsdp-tp-plan -verify-diagnostics | FileCheck %s --check-prefix=SP
// fsdp-parallel-config builds the mesh (dp_replicate, dp_shard, cp, tp) and
// records the config, typed, with FSDP2Config's defaults and its
// mixed-precision policy (fsdp.parallel); fsdp-tp-plan marks every op
// whose module path the plan matches with the style it runs under
// (dist.tp).

// Llama's built-in plan on a cut-down decoder: the projections into
// attention and the MLP are column-parallel, the ones out of them
// row-parallel, the embedding row-parallel over the vocabulary, the head
// column-parallel; norms are marked only with sequence parallelism. Plan
// entries this cut-down model lacks are a warning.
// expected-warning @+1 {{tensor-parallel plan entries match no module: 'model.layers.*.self_attn.k_proj', 'model.layers.*.self_attn.v_proj'}}
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"},
                   %table: tensor<32x8xf32> {nn.param = "model.embed_tokens.weight"},
                   %norm: tensor<8xf32> {nn.param = "model.layers.0.input_layernorm.weight"},
                   %wq: tensor<8x8xf32> {nn.param = "model.layers.0.self_attn.q_proj.weight"},
                   %wo: tensor<8x8xf32> {nn.param = "model.layers.0.self_attn.o_proj.weight"},
                   %head: tensor<32x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<2x4x32xf32> {nn.output = "logits"})
    attributes {nn.model = "LlamaForCausalLM"} {
  %x = nn.embedding %table, %ids {path = "model.embed_tokens"} : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %n = nn.rms_norm %x, %norm {eps = 1.0e-05 : f64, path = "model.layers.0.input_layernorm"} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %q = nn.linear %n, %wq {path = "model.layers.0.self_attn.q_proj"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %o = nn.linear %q, %wo {path = "model.layers.0.self_attn.o_proj"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %logits = nn.linear %o, %head {path = "lm_head"} : (tensor<2x4x8xf32>, tensor<32x8xf32>) -> tensor<2x4x32xf32>
  return %logits : tensor<2x4x32xf32>
}

// CHECK: module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1, dp_shard = 1, cp = 1, cp_comm_type = p2p, tp = 2, ep = 1, sequence_parallel = false, async_tp = false, reshard_after_forward = all_but_last, defer_grad_sync = true, activation_checkpointing = none, activation_memory_budget = 0.000000e+00 : f64, offload_policy = none, forward_prefetch = 1, backward_prefetch = 1, mp_policy = <param = bf16, reduce = f32, output = bf16, cast_forward_inputs = true>>}
// CHECK: dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 1, tp = 2)
// CHECK-LABEL: func.func @forward
// CHECK: nn.embedding {{.*}}dist.tp = #dist.tp<rowwise, input = replicate, output = replicate, use_local_output = true, entry = "model.embed_tokens">
// CHECK: nn.rms_norm
// CHECK-NOT: dist.tp
// CHECK-SAME: path = "model.layers.0.input_layernorm"
// CHECK: nn.linear {{.*}}dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "model.layers.*.self_attn.q_proj">
// CHECK: nn.linear {{.*}}dist.tp = #dist.tp<rowwise, input = shard(-1), output = replicate, use_local_output = true, entry = "model.layers.*.self_attn.o_proj">
// CHECK: nn.linear {{.*}}dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = false, entry = "lm_head">

// SP-LABEL: func.func @forward
// SP: nn.rms_norm {{.*}}dist.tp = #dist.tp<sequence_parallel, {{.*}}entry = "model.layers.*.input_layernorm">
// SP: nn.linear {{.*}}dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "model.layers.*.self_attn.q_proj">
// SP: nn.linear {{.*}}dist.tp = #dist.tp<rowwise, input = shard(-1), output = shard(1), use_local_output = false, entry = "model.layers.*.self_attn.o_proj">
// SP: nn.linear {{.*}}dist.tp = #dist.tp<colwise, input = shard(1), output = shard(-1), {{.*}}entry = "lm_head">

// -----

// Query heads that do not divide by tp are an error at the attention.
func.func @forward(%q: tensor<1x4x3x8xf32> {nn.input = "q"},
                   %w: tensor<8x8xf32> {nn.param = "model.layers.0.self_attn.q_proj.weight"})
    -> (tensor<1x4x3x8xf32> {nn.output = "y"})
    attributes {nn.model = "LlamaForCausalLM"} {
  // expected-error @+1 {{'nn.attention' op has 3 query heads and 3 key/value heads; the query heads must divide by tp = 2 and the key/value heads divide it or be divided by it}}
  %y, %y_lse = nn.attention %q, %q, %q {causal} : (tensor<1x4x3x8xf32>, tensor<1x4x3x8xf32>, tensor<1x4x3x8xf32>) -> (tensor<1x4x3x8xf32>, tensor<1x3x4xf32>)
  return %y : tensor<1x4x3x8xf32>
}

// -----

// A module's own mesh must agree with the configuration.
// expected-error @+1 {{'dist.mesh' op has tp = 4 but the parallel configuration asks for tp = 2}}
dist.mesh @mesh(tp = 4)
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}) -> (tensor<2x8xf32> {nn.output = "y"}) {
  return %x : tensor<2x8xf32>
}

// -----

// A family without a built-in plan gets the Llama-style one, with a
// warning; here no module matches it, which is an error.
// expected-warning @+3 {{no built-in tensor-parallel plan for 'MyModel'; using the Llama-style default plan}}
// expected-warning @+2 {{tensor-parallel plan entries match no module}}
// expected-error @+1 {{the tensor-parallel plan matches no module}}
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<8x8xf32> {nn.param = "w"})
    -> (tensor<2x8xf32> {nn.output = "y"}) attributes {nn.model = "MyModel"} {
  %y = nn.linear %x, %w {path = "encoder.proj"} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

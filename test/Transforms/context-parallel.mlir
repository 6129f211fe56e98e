// RUN: fsdp-opt %s -split-input-file -verify-diagnostics -fsdp-context-parallel=comm-type=all_gather | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -verify-diagnostics -fsdp-context-parallel | FileCheck %s --check-prefix=RING
// RUN: not fsdp-opt %s -split-input-file -fsdp-context-parallel=comm-type=ring 2>&1 | FileCheck %s --check-prefix=BAD
// fsdp-context-parallel on a one-attention program over cp = 2: the token
// inputs [2, 8] become the rank's two chunks of 2 positions ([2, 4],
// load-balanced: groups -2); every value along the sequence follows,
// reshapes too (a [B, S, V] → [B·S, V] flattening included).
//
// all_gather: the attention's keys and values (here the same value,
// gathered once) are gathered over cp and put back in sequence order: rank
// q's block holds chunks q and 3 − q, so the gathered blocks
// [c0 c3 | c1 c2] become c0 c1 c2 c3 = pieces 0, 2, 3, 1; the queries see
// them at their global positions (position_ids).
//
// p2p (the default without a config): step 0 attends to the rank's own
// block, step 1 to the block permuted once round the ring, with its
// positions (permuted once, at the start, for every layer); the two are
// combined by log-sum-exp; each block's permute comes before the previous
// block's attention.

dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
func.func @forward(%ids: tensor<2x8xi64> {nn.input = "input_ids"},
                   %pos: tensor<2x8xi64> {nn.input = "position_ids"},
                   %labels: tensor<2x8xi64> {nn.input = "labels"},
                   %table: tensor<16x8xf32> {nn.param = "model.embed_tokens.weight"},
                   %head: tensor<16x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x8xi64>) -> tensor<2x8x8xf32>
  %q = nn.reshape %h to [2, 8, 2, 4] : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
  %r = nn.rotary %q, %pos {theta = 10000.0 : f64} : (tensor<2x8x2x4xf32>, tensor<2x8xi64>) -> tensor<2x8x2x4xf32>
  %o, %lse = nn.attention %r, %q, %q {causal, sliding_window = 3, path = "model.layers.0.self_attn"} : (tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>) -> (tensor<2x8x2x4xf32>, tensor<2x2x8xf32>)
  %a = nn.reshape %o to [2, 8, 8] : tensor<2x8x2x4xf32> -> tensor<2x8x8xf32>
  %logits = nn.linear %a, %head {path = "lm_head"} : (tensor<2x8x8xf32>, tensor<16x8xf32>) -> tensor<2x8x16xf32>
  %flat = nn.reshape %logits to [16, 16] : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %l = nn.reshape %labels to [16] : tensor<2x8xi64> -> tensor<16xi64>
  %loss = nn.cross_entropy %flat, %l : (tensor<16x16xf32>, tensor<16xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[IDS:[^:]+]]: tensor<2x4xi64> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [cp]], groups = [1, -2]>, nn.input = "input_ids"}
// CHECK-SAME: %[[POS:[^:]+]]: tensor<2x4xi64> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [cp]], groups = [1, -2]>, nn.input = "position_ids"}
// CHECK-SAME: tensor<2x4xi64> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [cp]], groups = [1, -2]>, nn.input = "labels"}
// CHECK-SAME: tensor<16x8xf32> {nn.param = "model.embed_tokens.weight"}
// CHECK: %[[H:.+]] = nn.embedding %{{.+}}, %[[IDS]] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[Q:.+]] = nn.reshape %[[H]] to [2, 4, 2, 4]
// CHECK: %[[R:.+]] = nn.rotary %[[Q]], %[[POS]]
// CHECK: %[[ALL:.+]] = dist.all_gather %[[Q]] on @mesh[cp] dim 1 {fsdp.context_parallel} : tensor<2x4x2x4xf32> -> tensor<2x8x2x4xf32>
// CHECK: %[[C:.+]]:4 = nn.split %[[ALL]] dim 1 sizes [2, 2, 2, 2]
// CHECK: %[[KV:.+]] = nn.concat %[[C]]#0, %[[C]]#2, %[[C]]#3, %[[C]]#1 dim 1
// CHECK-NOT: dist.all_gather
// CHECK: nn.attention %[[R]], %[[KV]], %[[KV]] positions %[[POS]] {causal, path = "model.layers.0.self_attn", sliding_window = 3 : i64} : (tensor<2x4x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x4xi64>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
// CHECK: nn.reshape %{{.+}} to [8, 16] : tensor<2x4x16xf32> -> tensor<8x16xf32>
// CHECK: nn.reshape %{{.+}} to [8] : tensor<2x4xi64> -> tensor<8xi64>

// RING-LABEL: func.func @forward(
// RING-SAME: %[[IDS:[^:]+]]: tensor<2x4xi64> {{.*}}"input_ids"
// RING-SAME: %[[POS:[^:]+]]: tensor<2x4xi64> {{.*}}"position_ids"
// RING: %[[POS1:.+]] = dist.permute %[[POS]] on @mesh[cp] offset 1 {fsdp.context_parallel} : tensor<2x4xi64> -> tensor<2x4xi64>
// RING: %[[Q:.+]] = nn.reshape
// RING: %[[R:.+]] = nn.rotary %[[Q]], %[[POS]]
// RING: %[[K1:.+]] = dist.permute %[[Q]] on @mesh[cp] offset 1 {fsdp.context_parallel} : tensor<2x4x2x4xf32> -> tensor<2x4x2x4xf32>
// RING-NOT: dist.permute
// RING: %[[O0:[^,]+]], %[[L0:.+]] = nn.attention %[[R]], %[[Q]], %[[Q]] positions %[[POS]], %[[POS]] {causal, path = "model.layers.0.self_attn", sliding_window = 3 : i64}
// RING: %[[O1:[^,]+]], %[[L1:.+]] = nn.attention %[[R]], %[[K1]], %[[K1]] positions %[[POS]], %[[POS1]] {causal, path = "model.layers.0.self_attn", sliding_window = 3 : i64}
// RING: %[[O:[^,]+]], %{{.+}} = nn.attention_combine %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// RING: nn.reshape %[[O]] to [2, 4, 8]

// BAD: fsdp-context-parallel: comm-type must be p2p, all_gather or config, got 'ring'

// -----

// A sequence that 2·cp does not divide is an error naming the numbers.
dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
// expected-error @+1 {{the sequence length 6 is not divisible by 2 x cp_size = 4}}
func.func @forward(%ids: tensor<2x6xi64> {nn.input = "input_ids"}) -> tensor<2x6xi64> {
  return %ids : tensor<2x6xi64>
}

// -----

// A causal attention needs the global positions.
dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
func.func @forward(%ids: tensor<1x4xi64> {nn.input = "input_ids"},
                   %table: tensor<16x8xf32> {nn.param = "w"}) -> tensor<1x4x2x4xf32> {
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<1x4xi64>) -> tensor<1x4x8xf32>
  %q = nn.reshape %h to [1, 4, 2, 4] : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  // expected-error @+1 {{is causal, and context parallelism needs the position_ids input}}
  %o, %lse = nn.attention %q, %q, %q {causal} : (tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>) -> (tensor<1x4x2x4xf32>, tensor<1x2x4xf32>)
  return %o : tensor<1x4x2x4xf32>
}

// -----

// Only [B, S] token inputs split.
dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
// expected-error @+1 {{input 'pixels' 'tensor<1x4x3xf32>' is not a [B, S] token tensor}}
func.func @forward(%x: tensor<1x4x3xf32> {nn.input = "pixels"}) -> tensor<1x4x3xf32> {
  return %x : tensor<1x4x3xf32>
}

// -----

// A reshape mixing the sequence with the batch as its minor part cannot
// follow the split.
dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"}) -> tensor<4x2xi64> {
  %t = nn.transpose %ids perm [1, 0] : tensor<2x4xi64> -> tensor<4x2xi64>
  // expected-error @+1 {{reshapes the sequence dim in a way the context-parallel split cannot follow}}
  %r = nn.reshape %t to [2, 2, 2] : tensor<4x2xi64> -> tensor<2x2x2xi64>
  %f = nn.reshape %r to [4, 2] : tensor<2x2x2xi64> -> tensor<4x2xi64>
  return %f : tensor<4x2xi64>
}

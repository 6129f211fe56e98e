// RUN: fsdp-opt %s -split-input-file -fsdp-expert-parallel -verify-diagnostics | FileCheck %s
// A sparse layer at ep = 2 (of dp_shard = [ep_shard, ep] = 2 x 2): the
// expert weights keep the rank's 2 of 4 experts (sharded on ep, dim 0);
// the counts per expert go out by a dist.all_to_all, each side's rows per
// rank are their sums, and the expert-ordered rows travel to their experts'
// ranks and back by dist.all_to_all_v around the grouped products. The
// dispatch buffer holds the most rows that can arrive: 2 ranks x 8 tokens
// x min(top-k 3, 2 local experts) = 32 rows; the products state the share of
// them balanced routing fills, 24 / 32.

dist.mesh @mesh(dp_replicate = 1, ep_shard = 2, ep = 2, cp = 1, tp = 1) {views = {dp_shard = ["ep_shard", "ep"]}}

// CHECK-LABEL: func.func @forward
// CHECK-SAME: %[[W1:[a-z0-9]+]]: tensor<2x12x8xf32> {dist.sharding = #dist.sharding<@mesh, {{\[\[ep\], \[\], \[\]\]}}>, nn.param = "w1"}
// CHECK-SAME: %[[W2:[a-z0-9]+]]: tensor<2x8x6xf32> {dist.sharding = #dist.sharding<@mesh, {{\[\[ep\], \[\], \[\]\]}}>, nn.param = "w2"}
// CHECK: %[[ROWS:.*]], %[[COUNTS:.*]] = nn.moe_permute
// CHECK: %[[SEG:.*]] = dist.all_to_all %[[COUNTS]] on @mesh[ep] split 0 concat 0 : tensor<4xi64> -> tensor<4xi64>
// CHECK: %[[SEND:.*]] = nn.moe_rank_counts %[[COUNTS]] {ranks = 2 : i64}
// CHECK: %[[RECV:.*]] = nn.moe_rank_counts %[[SEG]] {ranks = 2 : i64}
// CHECK: %[[IN:.*]] = dist.all_to_all_v %[[ROWS]] on @mesh[ep] counts(%[[SEND]], %[[RECV]] : tensor<2xi64>) {fsdp.expert_parallel} : tensor<24x8xf32> -> tensor<32x8xf32>
// CHECK: nn.grouped_linear %[[IN]], %[[SEG]], %[[W1]] {active_share = 7.500000e-01 : f64} : (tensor<32x8xf32>, tensor<4xi64>, tensor<2x12x8xf32>) -> tensor<32x12xf32>
// CHECK: %[[Y:.*]] = nn.grouped_linear {{.*}}, %[[SEG]], %[[W2]] {active_share = 7.500000e-01 : f64} : (tensor<32x6xf32>, tensor<4xi64>, tensor<2x8x6xf32>) -> tensor<32x8xf32>
// CHECK: %[[BACK:.*]] = dist.all_to_all_v %[[Y]] on @mesh[ep] counts(%[[RECV]], %[[SEND]] : tensor<2xi64>) {fsdp.expert_parallel} : tensor<32x8xf32> -> tensor<24x8xf32>
// CHECK: nn.moe_unpermute %[[BACK]]
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %gate: tensor<4x8xf32> {nn.param = "gate"},
                   %w1: tensor<4x12x8xf32> {nn.param = "w1"},
                   %w2: tensor<4x8x6xf32> {nn.param = "w2"})
    -> (tensor<2x4x8xf32> {nn.output = "y"}) {
  %logits = nn.linear %x, %gate : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  %w, %idx = nn.moe_router %logits {top_k = 3 : i64} : (tensor<2x4x4xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x3xi64>)
  %rows, %counts = nn.moe_permute %x, %idx {num_experts = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x3xi64>) -> (tensor<24x8xf32>, tensor<4xi64>)
  %h = nn.grouped_linear %rows, %counts, %w1 : (tensor<24x8xf32>, tensor<4xi64>, tensor<4x12x8xf32>) -> tensor<24x12xf32>
  %s:2 = nn.split %h dim -1 sizes [6, 6] : tensor<24x12xf32> -> tensor<24x6xf32>, tensor<24x6xf32>
  %a = nn.silu %s#0 : tensor<24x6xf32>
  %m = nn.mul %a, %s#1 : (tensor<24x6xf32>, tensor<24x6xf32>) -> tensor<24x6xf32>
  %d = nn.grouped_linear %m, %counts, %w2 : (tensor<24x6xf32>, tensor<4xi64>, tensor<4x8x6xf32>) -> tensor<24x8xf32>
  %y = nn.moe_unpermute %d, %idx, %w {num_experts = 4 : i64} : (tensor<24x8xf32>, tensor<2x4x3xi64>, tensor<2x4x3xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

dist.mesh @mesh(dp_replicate = 1, ep_shard = 1, ep = 3, cp = 1, tp = 1) {views = {dp_shard = ["ep_shard", "ep"]}}

func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %w1: tensor<4x8x8xf32> {nn.param = "w1"},
                   %idx: tensor<2x4x1xi64> {nn.input = "idx"})
    -> (tensor<2x4x8xf32> {nn.output = "y"}) {
  %rows, %counts = nn.moe_permute %x, %idx {num_experts = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x1xi64>) -> (tensor<8x8xf32>, tensor<4xi64>)
  // expected-error @+1 {{expert parameter 'w1' has 4 experts, not divisible by ep_size 3}}
  %h = nn.grouped_linear %rows, %counts, %w1 : (tensor<8x8xf32>, tensor<4xi64>, tensor<4x8x8xf32>) -> tensor<8x8xf32>
  %y = nn.moe_unpermute %h, %idx {num_experts = 4 : i64} : (tensor<8x8xf32>, tensor<2x4x1xi64>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

dist.mesh @mesh(dp_replicate = 1, ep_shard = 1, ep = 2, cp = 1, tp = 1) {views = {dp_shard = ["ep_shard", "ep"]}}

func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %w1: tensor<4x8x8xf32> {nn.param = "w1"},
                   %idx: tensor<2x4x1xi64> {nn.input = "idx"})
    -> (tensor<8x8xf32> {nn.output = "rows"}) {
  %rows, %counts = nn.moe_permute %x, %idx {num_experts = 4 : i64} : (tensor<2x4x8xf32>, tensor<2x4x1xi64>) -> (tensor<8x8xf32>, tensor<4xi64>)
  // expected-error @+1 {{'func.return' op reads a sparse layer's expert-ordered rows, which expert parallelism cannot follow}}
  return %rows : tensor<8x8xf32>
}

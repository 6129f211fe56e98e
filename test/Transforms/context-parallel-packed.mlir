// RUN: fsdp-opt %s -fsdp-context-parallel | FileCheck %s --check-prefix=RING
// RUN: fsdp-opt %s -fsdp-context-parallel=comm-type=all_gather | FileCheck %s --check-prefix=GATHER
// RUN: fsdp-opt %s -fsdp-context-parallel="comm-type=all_gather rounds=2" | FileCheck %s --check-prefix=ROUNDS
// A packed attention (position_ids: positions in documents) over cp = 2:
// the program gains a `token_index` input (the tokens' indices in the row,
// load-balanced like the others), which the masks read; the document
// positions stay the rank's own, first among the attention's positions.
//
// Over 2 rounds (packed rows of 128 tokens or more per rank choose them
// themselves): 8 chunks, rank r holding chunks r, 3 − r, 4 + r and 7 − r
// (groups -4); the gathered blocks [c0 c3 c4 c7 | c1 c2 c5 c6] go back in
// order as pieces 0, 4, 5, 1, 2, 6, 7, 3.

dist.mesh @mesh(dp_replicate = 1, dp_shard = 1, cp = 2, tp = 1)
func.func @forward(%ids: tensor<2x8xi64> {nn.input = "input_ids"},
                   %pos: tensor<2x8xi64> {nn.input = "position_ids"},
                   %table: tensor<16x8xf32> {nn.param = "model.embed_tokens.weight"})
    -> (tensor<2x8x2x4xf32> {nn.output = "out"}) {
  %h = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x8xi64>) -> tensor<2x8x8xf32>
  %q = nn.reshape %h to [2, 8, 2, 4] : tensor<2x8x8xf32> -> tensor<2x8x2x4xf32>
  %o, %lse = nn.attention %q, %q, %q positions %pos {causal, packed} : (tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8x2x4xf32>, tensor<2x8xi64>) -> (tensor<2x8x2x4xf32>, tensor<2x2x8xf32>)
  return %o : tensor<2x8x2x4xf32>
}

// RING-LABEL: func.func @forward(
// RING-SAME: %{{[^:]+}}: tensor<2x4xi64> {{.*}}"input_ids"
// RING-SAME: %[[POS:[^:]+]]: tensor<2x4xi64> {{.*}}"position_ids"
// RING-SAME: %[[IDX:[^:]+]]: tensor<2x4xi64> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [cp]], groups = [1, -2]>, nn.input = "token_index"}
// RING: %[[IDX1:.+]] = dist.permute %[[IDX]] on @mesh[cp] offset 1
// RING: %[[O0:[^,]+]], %[[L0:.+]] = nn.attention %[[Q:[^,]+]], %[[Q]], %[[Q]] positions %[[POS]], %[[IDX]], %[[IDX]] {causal, packed}
// RING: %[[O1:[^,]+]], %[[L1:.+]] = nn.attention %[[Q]], %{{[^,]+}}, %{{[^,]+}} positions %[[POS]], %[[IDX]], %[[IDX1]] {causal, packed}
// RING: nn.attention_combine %[[O0]], %[[L0]], %[[O1]], %[[L1]]

// GATHER-LABEL: func.func @forward(
// GATHER-SAME: %{{[^:]+}}: tensor<2x4xi64> {{.*}}"input_ids"
// GATHER-SAME: %[[POS:[^:]+]]: tensor<2x4xi64> {{.*}}"position_ids"
// GATHER-SAME: %[[IDX:[^:]+]]: tensor<2x4xi64> {{.*}}"token_index"
// GATHER: nn.attention %{{[^,]+}}, %[[KV:[^,]+]], %[[KV]] positions %[[POS]], %[[IDX]] {causal, packed}

// ROUNDS-LABEL: func.func @forward(
// ROUNDS-SAME: groups = [1, -4]>, nn.input = "input_ids"
// ROUNDS: %[[P:.+]]:8 = nn.split %{{.+}} dim 1 sizes [1, 1, 1, 1, 1, 1, 1, 1]
// ROUNDS: nn.concat %[[P]]#0, %[[P]]#4, %[[P]]#5, %[[P]]#1, %[[P]]#2, %[[P]]#6, %[[P]]#7, %[[P]]#3 dim 1

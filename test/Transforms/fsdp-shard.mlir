// RUN: fsdp-opt %s -split-input-file -fsdp-shard | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-shard="reshard-after-forward=true" | FileCheck %s --check-prefix=TRUE
// RUN: fsdp-opt %s -split-input-file -fsdp-shard="reshard-after-forward=false" | FileCheck %s --check-prefix=FALSE
// RUN: not fsdp-opt %s -fsdp-shard="reshard-after-forward=maybe" 2>&1 | FileCheck %s --check-prefix=BAD
// fsdp-shard on a hand-written two-layer program over dp_shard = 2: the
// batch inputs become this rank's half; each parameter its dim-0 block,
// padded at the end when dim 0 does not divide (the bias of 3, the head of
// 5 rows, with fsdp.global_shape keeping the whole shape); each unit (a
// layer, the root) is gathered by one all_gather of its flattened blocks
// side by side before its first use, then split, reshaped and cut back to
// the parameters' shapes.

dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 1)
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"},
                   %labels: tensor<4xi64> {nn.input = "labels"},
                   %w0: tensor<8x8xf32> {nn.param = "model.layers.0.mlp.weight"},
                   %b0: tensor<3xf32> {nn.param = "model.layers.0.mlp.bias"},
                   %w1: tensor<8x8xf32> {nn.param = "model.layers.1.mlp.weight"},
                   %head: tensor<5x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h0 = nn.linear %x, %w0 {path = "model.layers.0.mlp"} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = nn.slice %h0 dim 1 start 0 size 3 : tensor<4x8xf32> -> tensor<4x3xf32>
  %a = nn.add %s, %b0 {path = "model.layers.0.mlp"} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %h1 = nn.linear %h0, %w1 {path = "model.layers.1.mlp"} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %logits = nn.linear %h1, %head {path = "lm_head"} : (tensor<4x8xf32>, tensor<5x8xf32>) -> tensor<4x5xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK: module attributes {fsdp.data_parallel = ["dp_replicate", "dp_shard"]}
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x8xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[dp_replicate, dp_shard], []]>, nn.input = "x"}
// CHECK-SAME: %[[W0:[^:]+]]: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[dp_shard], []]>, fsdp.inner_axes = array<i64: 1, 0>, nn.param = "model.layers.0.mlp.weight"}
// CHECK-SAME: %[[B0:[^:]+]]: tensor<2xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[dp_shard]]>, fsdp.global_shape = array<i64: 3>, fsdp.inner_axes = array<i64: 1>, nn.param = "model.layers.0.mlp.bias"}
// CHECK-SAME: %[[HEAD:[^:]+]]: tensor<3x8xf32> {{{.*}}fsdp.global_shape = array<i64: 5, 8>{{.*}}nn.param = "lm_head.weight"}
// CHECK: %[[FW0:.+]] = nn.reshape %[[W0]] to [1, 32]
// CHECK: %[[FB0:.+]] = nn.reshape %[[B0]] to [1, 2]
// CHECK: %[[BUCKET:.+]] = nn.concat %[[FW0]], %[[FB0]] dim 1
// CHECK: %[[ALL:.+]] = dist.all_gather %[[BUCKET]] on @mesh[dp_shard] dim 0 {fsdp.reshard, fsdp.unit = "model.layers.0"} : tensor<1x34xf32> -> tensor<2x34xf32>
// CHECK: %[[PARTS:.+]]:2 = nn.split %[[ALL]] dim 1 sizes [32, 2]
// CHECK: %[[WHOLE_W0:.+]] = nn.reshape %[[PARTS]]#0 to [8, 8]
// CHECK: %[[PADDED_B0:.+]] = nn.reshape %[[PARTS]]#1 to [4]
// CHECK: %[[WHOLE_B0:.+]] = nn.slice %[[PADDED_B0]] dim 0 start 0 size 3
// CHECK: nn.linear %[[X]], %[[WHOLE_W0]]
// CHECK: nn.add %{{.+}}, %[[WHOLE_B0]]
// CHECK: dist.all_gather %{{.+}} on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.1"}
// CHECK: dist.all_gather %{{.+}} on @mesh[dp_shard] dim 0 {fsdp.unit = "<root>"} : tensor<1x24xf32> -> tensor<2x24xf32>
// CHECK: nn.slice %{{.+}} dim 0 start 0 size 5 : tensor<6x8xf32> -> tensor<5x8xf32>

// FSDP2's reshard_after_forward: None reshards every layer but the last
// (above), true every layer, false none; the root never.
// TRUE: dist.all_gather {{.*}}{fsdp.reshard, fsdp.unit = "model.layers.0"}
// TRUE: dist.all_gather {{.*}}{fsdp.reshard, fsdp.unit = "model.layers.1"}
// TRUE: dist.all_gather {{.*}}{fsdp.unit = "<root>"}
// FALSE-NOT: fsdp.reshard

// An option value outside its set is an error naming the option.
// BAD: for the --reshard-after-forward option: Cannot find option named 'maybe'!

// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none" | FileCheck %s

// all_to_all_v's gradient: the rows' gradients go back to their senders
// (all_to_all_v with the counts swapped), into the input's shape; the
// counts, integers, get none.
dist.mesh @mesh(ep = 2)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"},
                   %labels: tensor<8xi64> {nn.input = "labels"},
                   %send: tensor<2xi64> {nn.input = "send_counts"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %e = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %rows = nn.reshape %e to [8, 8] : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %recv = dist.all_to_all %send on @mesh[ep] split 0 concat 0 : tensor<2xi64> -> tensor<2xi64>
  %y = dist.all_to_all_v %rows on @mesh[ep] counts(%send, %recv : tensor<2xi64>) : tensor<8x8xf32> -> tensor<16x8xf32>
  %back = dist.all_to_all_v %y on @mesh[ep] counts(%recv, %send : tensor<2xi64>) : tensor<16x8xf32> -> tensor<8x8xf32>
  %w = nn.slice %table dim 0 start 0 size 8 : tensor<16x8xf32> -> tensor<8x8xf32>
  %l = nn.linear %back, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %loss = nn.cross_entropy %l, %labels : (tensor<8x8xf32>, tensor<8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @forward
// CHECK: %[[RECV:.+]] = dist.all_to_all %[[SEND:.+]] on @mesh[ep] split 0 concat 0
// CHECK: %[[DBACK:.+]] = nn.matmul
// CHECK: %[[DY:.+]] = dist.all_to_all_v %[[DBACK]] on @mesh[ep] counts(%[[SEND]], %[[RECV]] : tensor<2xi64>) : tensor<8x8xf32> -> tensor<16x8xf32>
// CHECK: dist.all_to_all_v %[[DY]] on @mesh[ep] counts(%[[RECV]], %[[SEND]] : tensor<2xi64>) : tensor<16x8xf32> -> tensor<8x8xf32>
// CHECK-NOT: dist.all_to_all %

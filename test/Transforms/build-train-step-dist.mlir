// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none" | FileCheck %s
// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none reduce-dtype=bf16" | FileCheck %s --check-prefix=REDUCE
// Autodiff through dist collectives, so the same pass works on partitioned
// programs: all_gather's gradient is a reduce_scatter, all_reduce's (Megatron
// g) the identity, permute's the opposite shift; with reduce-dtype the
// gradient crosses ranks in that dtype; dist.copy's (Megatron f) is an
// all_reduce.

dist.mesh @mesh(tp = 2)
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"},
                   %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight"},
                   %w: tensor<8x8xf32> {nn.param = "head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %e = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %x = dist.copy %e on @mesh[tp] : tensor<2x4x8xf32>
  %wf = dist.all_gather %w on @mesh[tp] dim 0 : tensor<8x8xf32> -> tensor<16x8xf32>
  %l = nn.linear %x, %wf : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %p = dist.permute %l on @mesh[tp] offset 1 : tensor<2x4x16xf32> -> tensor<2x4x16xf32>
  %r = dist.all_reduce %p on @mesh[tp] sum : tensor<2x4x16xf32> -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %r, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @forward
// CHECK: %[[DR:.+]] = nn.cross_entropy_grad
// CHECK-NOT: dist.all_reduce %[[DR]]
// CHECK: %[[DL:.+]] = dist.permute %[[DR]] on @mesh[tp] offset -1 : tensor<2x4x16xf32> -> tensor<2x4x16xf32>
// CHECK: %[[DWF:.+]] = nn.matmul %{{.+}}, %{{.+}} {transpose_a} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// CHECK: dist.reduce_scatter %[[DWF]] on @mesh[tp] sum dim 0 : tensor<16x8xf32> -> tensor<8x8xf32>
// CHECK: %[[DE:.+]] = dist.all_reduce %{{.+}} on @mesh[tp] sum : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
// CHECK: nn.embedding_grad %{{.+}}, %[[DE]]

// REDUCE-LABEL: func.func @forward
// REDUCE: %[[DWF:.+]] = nn.matmul %{{.+}}, %{{.+}} {transpose_a} : (tensor<8x16xf32>, tensor<8x8xf32>) -> tensor<16x8xf32>
// REDUCE: %[[LOW:.+]] = nn.cast %[[DWF]] to bf16 : tensor<16x8xf32> -> tensor<16x8xbf16>
// REDUCE: %[[RS:.+]] = dist.reduce_scatter %[[LOW]] on @mesh[tp] sum dim 0 : tensor<16x8xbf16> -> tensor<8x8xbf16>
// REDUCE: nn.cast %[[RS]] to f32 : tensor<8x8xbf16> -> tensor<8x8xf32>

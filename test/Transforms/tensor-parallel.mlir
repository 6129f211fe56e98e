// RUN: fsdp-opt %s -split-input-file -fsdp-tensor-parallel=tp=2 -verify-diagnostics | FileCheck %s
// fsdp-tensor-parallel splits the plan's projections over a tp axis: column
// parallel weights keep their rank's rows, row-parallel ones their columns;
// replicated values entering per-rank computation pass through dist.copy and
// row-parallel outputs through one all_reduce; reshapes follow the heads.

func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %wq: tensor<8x8xf32> {nn.param = "layer.self_attn.q_proj.weight"},
                   %bq: tensor<8xf32> {nn.param = "layer.self_attn.q_proj.bias"},
                   %norm: tensor<4xf32> {nn.param = "layer.self_attn.q_norm.weight"},
                   %wo: tensor<8x8xf32> {nn.param = "layer.self_attn.o_proj.weight"})
    -> (tensor<2x4x8xf32> {nn.output = "y"}) {
  %q = nn.linear %x, %wq, %bq {path = "layer.self_attn.q_proj"} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %h = nn.reshape %q to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %n = nn.rms_norm %h, %norm {eps = 1.0e-6 : f64} : (tensor<2x4x2x4xf32>, tensor<4xf32>) -> tensor<2x4x2x4xf32>
  %m = nn.reshape %n to [2, 4, 8] : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %y = nn.linear %m, %wo {path = "layer.self_attn.o_proj"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
// CHECK: dist.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32> {nn.input = "x"}
// CHECK-SAME: %[[WQ:[^:]+]]: tensor<4x8xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[tp], []]>, nn.param = "layer.self_attn.q_proj.weight"}
// CHECK-SAME: %[[BQ:[^:]+]]: tensor<4xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[tp]]>
// CHECK-SAME: %[[NORM:[^:]+]]: tensor<4xf32> {nn.param = "layer.self_attn.q_norm.weight"}
// CHECK-SAME: %[[WO:[^:]+]]: tensor<8x4xf32> {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [tp]]>
// CHECK: %[[XC:.+]] = dist.copy %[[X]] on @mesh[tp] : tensor<2x4x8xf32>
// CHECK: %[[Q:.+]] = nn.linear %[[XC]], %[[WQ]], %[[BQ]] {{.*}} -> tensor<2x4x4xf32>
// CHECK: %[[H:.+]] = nn.reshape %[[Q]] to [2, 4, 1, 4] : tensor<2x4x4xf32> -> tensor<2x4x1x4xf32>
// CHECK: %[[NC:.+]] = dist.copy %[[NORM]] on @mesh[tp] : tensor<4xf32>
// CHECK: nn.rms_norm %[[H]], %[[NC]]
// CHECK: nn.reshape %{{.+}} to [2, 4, 4] : tensor<2x4x1x4xf32> -> tensor<2x4x4xf32>
// CHECK: %[[P:.+]] = nn.linear %{{.+}}, %[[WO]] {{.*}} -> tensor<2x4x8xf32>
// CHECK: %[[Y:.+]] = dist.all_reduce %[[P]] on @mesh[tp] sum : tensor<2x4x8xf32> -> tensor<2x4x8xf32>
// CHECK: return %[[Y]]

// -----

// expected-error @+1 {{'func.func' op has no linear layer the tensor-parallel plan splits (q/k/v/o, gate/up/down projections)}}
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<8x8xf32> {nn.param = "w"}) -> tensor<2x8xf32> {
  %y = nn.linear %x, %w {path = "head"} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<5x8xf32> {nn.param = "w"}) -> tensor<2x5xf32> {
  // expected-error @+1 {{'nn.linear' op weight 'tensor<5x8xf32>' dim 0 does not divide by tp = 2}}
  %y = nn.linear %x, %w {path = "mlp.up_proj"} : (tensor<2x8xf32>, tensor<5x8xf32>) -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}

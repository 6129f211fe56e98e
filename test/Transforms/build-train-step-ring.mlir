// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step="optimizer=none" | FileCheck %s
// Ring attention's backward reads the merged attention: each step's
// attention_grad gets the last combine's result, statistics and output
// gradient (exp(S - lse_step)·w = exp(S - lse), and the combine's
// statistics gradient cancels the step's own row sums), no
// attention_combine_grad is left, and the backward reads no step's partial
// result, so the forward keeps none of them.

func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %wq: tensor<8x8xf32> {nn.param = "wq"},
                   %wk: tensor<8x8xf32> {nn.param = "wk"},
                   %wv: tensor<8x8xf32> {nn.param = "wv"},
                   %head: tensor<16x8xf32> {nn.param = "head"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %ql = nn.linear %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %kl = nn.linear %x, %wk : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %vl = nn.linear %x, %wv : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %q = nn.reshape %ql to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = nn.reshape %kl to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = nn.reshape %vl to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %o0, %l0 = nn.attention %q, %q, %q : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %o1, %l1 = nn.attention %q, %k, %k : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %o2, %l2 = nn.attention %q, %v, %v : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %c1, %m1 = nn.attention_combine %o0, %l0, %o1, %l1 : (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %c2, %m2 = nn.attention_combine %c1, %m1, %o2, %l2 : (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %h = nn.reshape %c2 to [2, 4, 8] : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %logits = nn.linear %h, %head : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @forward
// CHECK: %[[O0:[^,]+]], %[[L0:.+]] = nn.attention %[[Q:[^,]+]], %[[Q]], %[[Q]] :
// CHECK: %[[O1:[^,]+]], %[[L1:.+]] = nn.attention %[[Q]], %[[K:[^,]+]], %[[K]] :
// CHECK: %[[O2:[^,]+]], %[[L2:.+]] = nn.attention %[[Q]], %[[V:[^,]+]], %[[V]] :
// CHECK: %[[C1:[^,]+]], %[[M1:.+]] = nn.attention_combine %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CHECK: %[[C2:[^,]+]], %[[M2:.+]] = nn.attention_combine %[[C1]], %[[M1]], %[[O2]], %[[L2]]
// CHECK: %[[DC:.+]] = nn.reshape %{{.+}} to [2, 4, 2, 4]
// CHECK-NOT: attention_combine_grad
// CHECK: nn.attention_grad %[[Q]], %[[V]], %[[V]], %[[C2]], %[[M2]], %[[DC]] :
// CHECK: nn.attention_grad %[[Q]], %[[K]], %[[K]], %[[C2]], %[[M2]], %[[DC]] :
// CHECK: nn.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[C2]], %[[M2]], %[[DC]] :
// CHECK-NOT: attention_combine_grad

// -----

// A step whose result something else reads too keeps its own gradient:
// its output gradient sums the combine's share and the other reader's.
func.func @forward(%x: tensor<2x4x8xf32> {nn.input = "x"},
                   %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %wq: tensor<8x8xf32> {nn.param = "wq"},
                   %wk: tensor<8x8xf32> {nn.param = "wk"},
                   %head: tensor<16x8xf32> {nn.param = "head"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %ql = nn.linear %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %kl = nn.linear %x, %wk : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  %q = nn.reshape %ql to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = nn.reshape %kl to [2, 4, 2, 4] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %o0, %l0 = nn.attention %q, %q, %q : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %o1, %l1 = nn.attention %q, %k, %k : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %c1, %m1 = nn.attention_combine %o0, %l0, %o1, %l1 : (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x2x4xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x2x4xf32>)
  %sum = nn.add %c1, %o1 : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %h = nn.reshape %sum to [2, 4, 8] : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  %logits = nn.linear %h, %head : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK-LABEL: func.func @forward
// CHECK: %[[O0:[^,]+]], %[[L0:.+]] = nn.attention %[[Q:[^,]+]], %[[Q]], %[[Q]] :
// CHECK: %[[O1:[^,]+]], %[[L1:.+]] = nn.attention %[[Q]], %[[K:[^,]+]], %[[K]] :
// CHECK: %[[C1:[^,]+]], %[[M1:.+]] = nn.attention_combine %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CHECK: %{{[^,]+}}, %{{[^,]+}}, %[[GB:[^,]+]], %[[GLB:[^ ]+]] = nn.attention_combine_grad
// CHECK: %[[D1:.+]] = nn.add %{{.+}}, %[[GB]]
// CHECK: nn.attention_grad %[[Q]], %[[K]], %[[K]], %[[O1]], %[[L1]], %[[D1]] logsumexp_grad %[[GLB]] :
// CHECK: nn.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[C1]], %[[M1]], %{{.+}} :

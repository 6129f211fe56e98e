// RUN: fsdp-opt %s -split-input-file | fsdp-opt -split-input-file | FileCheck %s
// Round trip of the backward ops: each takes its forward op's operands and
// the gradient of the forward result.

// Tests the elementwise and norm gradients.
// CHECK-LABEL: func.func @pointwise
func.func @pointwise(%x: tensor<2x16x64xf32>, %dy: tensor<2x16x64xf32>, %w: tensor<64xf32>)
    -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) {
  // CHECK: nn.silu_grad %{{.+}}, %{{.+}} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %0 = nn.silu_grad %x, %dy : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: nn.gelu_grad %{{.+}}, %{{.+}} {approximate = "tanh"}
  %1 = nn.gelu_grad %x, %dy {approximate = "tanh"} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: %{{.+}}, %{{.+}} = nn.rms_norm_grad %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  %dx, %dw = nn.rms_norm_grad %x, %w, %dy {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>)
  // CHECK: %{{.+}}, %{{.+}}, %{{.+}} = nn.layer_norm_grad
  %lx, %lw, %lb = nn.layer_norm_grad %x, %w, %dy {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<2x16x64xf32>) -> (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return %0, %1, %dw, %lb : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
}

// -----

// Tests attention, rotary (its gradient is the inverse rotation), softmax,
// embedding and loss gradients.
// CHECK-LABEL: func.func @structured
func.func @structured(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x16xf32>, %v: tensor<2x16x2x16xf32>,
                      %lse: tensor<2x4x16xf32>, %do: tensor<2x16x4x16xf32>, %pos: tensor<2x16xi64>, %ids: tensor<2x16xi64>,
                      %dx: tensor<2x16x64xf32>, %logits: tensor<2x16x128xf32>, %dloss: tensor<f32>)
    -> (tensor<2x16x2x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>, tensor<128x64xf32>, tensor<2x16x128xf32>) {
  // CHECK: %{{.+}}, %{{.+}}, %{{.+}} = nn.attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {causal, sliding_window = 8 : i64}
  %dq, %dk, %dv = nn.attention_grad %q, %k, %v, %do, %lse, %do {causal, sliding_window = 8 : i64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x4x16xf32>, tensor<2x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>)
  // CHECK: nn.rotary %{{.+}}, %{{.+}} {inverse, theta = 1.000000e+04 : f64}
  %r = nn.rotary %dq, %pos {theta = 10000.0 : f64, inverse} : (tensor<2x16x4x16xf32>, tensor<2x16xi64>) -> tensor<2x16x4x16xf32>
  // CHECK: nn.softmax_grad %{{.+}}, %{{.+}} dim -1
  %s = nn.softmax_grad %q, %do dim -1 : (tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) -> tensor<2x16x4x16xf32>
  // CHECK: nn.embedding_grad %{{.+}}, %{{.+}} {num_embeddings = 128 : i64} : (tensor<2x16xi64>, tensor<2x16x64xf32>) -> tensor<128x64xf32>
  %e = nn.embedding_grad %ids, %dx {num_embeddings = 128 : i64} : (tensor<2x16xi64>, tensor<2x16x64xf32>) -> tensor<128x64xf32>
  // CHECK: nn.cross_entropy_grad %{{.+}}, %{{.+}}, %{{.+}} {reduction = "sum"} : (tensor<2x16x128xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x128xf32>
  %c = nn.cross_entropy_grad %logits, %ids, %dloss {reduction = "sum"} : (tensor<2x16x128xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x128xf32>
  return %dk, %r, %s, %e, %c : tensor<2x16x2x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>, tensor<128x64xf32>, tensor<2x16x128xf32>
}

// -----

// Tests the transposes of broadcast and slice, and the squared norm.
// CHECK-LABEL: func.func @reductions
func.func @reductions(%g: tensor<2x16x64xf32>) -> (tensor<64xf32>, tensor<16x1xf32>, tensor<2x16x80xf32>, tensor<f32>) {
  // CHECK: nn.reduce_sum_to %{{.+}} to [64] : tensor<2x16x64xf32> -> tensor<64xf32>
  %0 = nn.reduce_sum_to %g to [64] : tensor<2x16x64xf32> -> tensor<64xf32>
  // CHECK: nn.reduce_sum_to %{{.+}} to [16, 1] : tensor<2x16x64xf32> -> tensor<16x1xf32>
  %1 = nn.reduce_sum_to %g to [16, 1] : tensor<2x16x64xf32> -> tensor<16x1xf32>
  // CHECK: nn.pad %{{.+}} dim 2 before 4 after 12 : tensor<2x16x64xf32> -> tensor<2x16x80xf32>
  %2 = nn.pad %g dim 2 before 4 after 12 : tensor<2x16x64xf32> -> tensor<2x16x80xf32>
  // CHECK: nn.sum_squares %{{.+}} : tensor<2x16x64xf32> -> tensor<f32>
  %3 = nn.sum_squares %g : tensor<2x16x64xf32> -> tensor<f32>
  return %0, %1, %2, %3 : tensor<64xf32>, tensor<16x1xf32>, tensor<2x16x80xf32>, tensor<f32>
}

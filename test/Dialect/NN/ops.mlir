// RUN: fsdp-opt %s -split-input-file | fsdp-opt -split-input-file | FileCheck %s
// Round trip of every nn op: the printed form parses back to the same IR.

// Tests embedding and linear with and without bias.
// CHECK-LABEL: func.func @embedding_linear
func.func @embedding_linear(%table: tensor<128x64xf32>, %ids: tensor<2x16xi64>,
                            %w: tensor<32x64xf32>, %b: tensor<32xf32>)
    -> (tensor<2x16x32xf32>, tensor<2x16x32xf32>) {
  // CHECK: %[[X:.+]] = nn.embedding %{{.+}}, %{{.+}} {path = "model.embed_tokens"} : (tensor<128x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  %x = nn.embedding %table, %ids {path = "model.embed_tokens"}
      : (tensor<128x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  // CHECK: nn.linear %[[X]], %{{.+}} : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  %y = nn.linear %x, %w : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  // CHECK: nn.linear %[[X]], %{{.+}}, %{{.+}} : (tensor<2x16x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<2x16x32xf32>
  %z = nn.linear %x, %w, %b : (tensor<2x16x64xf32>, tensor<32x64xf32>, tensor<32xf32>) -> tensor<2x16x32xf32>
  return %y, %z : tensor<2x16x32xf32>, tensor<2x16x32xf32>
}

// -----

// Tests matmul (with transposed operands, as backward passes need) and
// batch_matmul in bf16.
// CHECK-LABEL: func.func @matmuls
func.func @matmuls(%a: tensor<2x16x64xbf16>, %w: tensor<64x192xbf16>,
                   %g: tensor<2x16x192xbf16>, %q: tensor<8x16x32xbf16>,
                   %k: tensor<8x16x32xbf16>)
    -> (tensor<2x16x192xbf16>, tensor<2x64x192xbf16>, tensor<8x16x16xbf16>) {
  // CHECK: nn.matmul %{{.+}}, %{{.+}} : (tensor<2x16x64xbf16>, tensor<64x192xbf16>) -> tensor<2x16x192xbf16>
  %0 = nn.matmul %a, %w : (tensor<2x16x64xbf16>, tensor<64x192xbf16>) -> tensor<2x16x192xbf16>
  // CHECK: nn.batch_matmul %{{.+}}, %{{.+}} {transpose_a} : (tensor<2x16x64xbf16>, tensor<2x16x192xbf16>) -> tensor<2x64x192xbf16>
  %1 = nn.batch_matmul %a, %g {transpose_a} : (tensor<2x16x64xbf16>, tensor<2x16x192xbf16>) -> tensor<2x64x192xbf16>
  // CHECK: nn.batch_matmul %{{.+}}, %{{.+}} {transpose_b} : (tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<8x16x16xbf16>
  %2 = nn.batch_matmul %q, %k {transpose_b} : (tensor<8x16x32xbf16>, tensor<8x16x32xbf16>) -> tensor<8x16x16xbf16>
  return %0, %1, %2 : tensor<2x16x192xbf16>, tensor<2x64x192xbf16>, tensor<8x16x16xbf16>
}

// -----

// Tests the elementwise ops, including trailing-dimension broadcast.
// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<2x16x64xf32>, %pos: tensor<16x64xf32>,
                       %bias: tensor<64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: nn.add %{{.+}}, %{{.+}} : (tensor<2x16x64xf32>, tensor<16x64xf32>) -> tensor<2x16x64xf32>
  %0 = nn.add %x, %pos : (tensor<2x16x64xf32>, tensor<16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: nn.sub %{{.+}}, %{{.+}} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %1 = nn.sub %0, %bias : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: nn.mul %{{.+}}, %{{.+}} : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  %2 = nn.mul %1, %x : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x64xf32>
  // CHECK: nn.neg %{{.+}} : tensor<2x16x64xf32>
  %3 = nn.neg %2 : tensor<2x16x64xf32>
  // CHECK: nn.scale %{{.+}} by 1.250000e-01 : tensor<2x16x64xf32>
  %4 = nn.scale %3 by 0.125 : tensor<2x16x64xf32>
  // CHECK: nn.silu %{{.+}} : tensor<2x16x64xf32>
  %5 = nn.silu %4 : tensor<2x16x64xf32>
  // CHECK: nn.gelu %{{.+}} {approximate = "tanh"} : tensor<2x16x64xf32>
  %6 = nn.gelu %5 {approximate = "tanh"} : tensor<2x16x64xf32>
  // CHECK: nn.gelu %{{.+}} : tensor<2x16x64xf32>
  %7 = nn.gelu %6 : tensor<2x16x64xf32>
  // CHECK: nn.softmax %{{.+}} dim -1 : tensor<2x16x64xf32>
  %8 = nn.softmax %7 dim -1 : tensor<2x16x64xf32>
  return %8 : tensor<2x16x64xf32>
}

// -----

// Tests norms, rotary embedding and grouped-query attention with a sliding
// window (Mistral) and with an explicit scale.
// CHECK-LABEL: func.func @attention_block
func.func @attention_block(%x: tensor<2x16x64xf32>, %w: tensor<64xf32>,
                           %b: tensor<64xf32>, %q: tensor<2x16x4x16xf32>,
                           %k: tensor<2x16x2x16xf32>, %v: tensor<2x16x2x16xf32>,
                           %pos: tensor<2x16xi64>)
    -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) {
  // CHECK: nn.rms_norm %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %0 = nn.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: nn.layer_norm %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %1 = nn.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: %[[QR:.+]] = nn.rotary %{{.+}}, %{{.+}} {theta = 1.000000e+04 : f64} : (tensor<2x16x4x16xf32>, tensor<2x16xi64>) -> tensor<2x16x4x16xf32>
  %qr = nn.rotary %q, %pos {theta = 10000.0 : f64} : (tensor<2x16x4x16xf32>, tensor<2x16xi64>) -> tensor<2x16x4x16xf32>
  // CHECK: nn.attention %[[QR]], %{{.+}}, %{{.+}} {causal, sliding_window = 8 : i64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  %a, %a_lse = nn.attention %qr, %k, %v {causal, sliding_window = 8 : i64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  // CHECK: nn.attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 2.500000e-01 : f64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  %s, %s_lse = nn.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  return %0, %1, %a, %s : tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>
}

// -----

// Tests the data-movement ops: reshape, transpose, slice, split, concat, cast.
// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<2x16x192xf32>, %ids: tensor<2x16xi64>)
    -> (tensor<2x4x16x16xf32>, tensor<2x16x128xf32>, tensor<2x16x64xbf16>, tensor<32xi64>) {
  // CHECK: %[[P:.+]]:3 = nn.split %{{.+}} dim 2 sizes [64, 64, 64] : tensor<2x16x192xf32> -> tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
  %q, %k, %v = nn.split %x dim 2 sizes [64, 64, 64] : tensor<2x16x192xf32> -> tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>
  // CHECK: %[[R:.+]] = nn.reshape %[[P]]#0 to [2, 16, 4, 16] : tensor<2x16x64xf32> -> tensor<2x16x4x16xf32>
  %r = nn.reshape %q to [2, 16, 4, 16] : tensor<2x16x64xf32> -> tensor<2x16x4x16xf32>
  // CHECK: nn.transpose %[[R]] perm [0, 2, 1, 3] : tensor<2x16x4x16xf32> -> tensor<2x4x16x16xf32>
  %t = nn.transpose %r perm [0, 2, 1, 3] : tensor<2x16x4x16xf32> -> tensor<2x4x16x16xf32>
  // CHECK: nn.concat %[[P]]#1, %[[P]]#2 dim 2 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x128xf32>
  %c = nn.concat %k, %v dim 2 : (tensor<2x16x64xf32>, tensor<2x16x64xf32>) -> tensor<2x16x128xf32>
  // CHECK: %[[S:.+]] = nn.slice %{{.+}} dim 2 start 64 size 64 : tensor<2x16x192xf32> -> tensor<2x16x64xf32>
  %s = nn.slice %x dim 2 start 64 size 64 : tensor<2x16x192xf32> -> tensor<2x16x64xf32>
  // CHECK: nn.cast %[[S]] to bf16 : tensor<2x16x64xf32> -> tensor<2x16x64xbf16>
  %h = nn.cast %s to bf16 : tensor<2x16x64xf32> -> tensor<2x16x64xbf16>
  // CHECK: nn.reshape %{{.+}} to [32] : tensor<2x16xi64> -> tensor<32xi64>
  %flat = nn.reshape %ids to [32] : tensor<2x16xi64> -> tensor<32xi64>
  return %t, %c, %h, %flat : tensor<2x4x16x16xf32>, tensor<2x16x128xf32>, tensor<2x16x64xbf16>, tensor<32xi64>
}

// -----

// Tests cross-entropy with each reduction; labels may be i32 or i64.
// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<2x16x256xf32>, %labels: tensor<2x16xi64>,
                %labels32: tensor<2x16xi32>)
    -> (tensor<f32>, tensor<f32>, tensor<2x16xf32>) {
  // CHECK: nn.cross_entropy %{{.+}}, %{{.+}} : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<f32>
  %0 = nn.cross_entropy %logits, %labels : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<f32>
  // CHECK: nn.cross_entropy %{{.+}}, %{{.+}} {ignore_index = 0 : i64, reduction = "sum"} : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
  %1 = nn.cross_entropy %logits, %labels32 {ignore_index = 0 : i64, reduction = "sum"} : (tensor<2x16x256xf32>, tensor<2x16xi32>) -> tensor<f32>
  // CHECK: nn.cross_entropy %{{.+}}, %{{.+}} {reduction = "none"} : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<2x16xf32>
  %2 = nn.cross_entropy %logits, %labels {reduction = "none"} : (tensor<2x16x256xf32>, tensor<2x16xi64>) -> tensor<2x16xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<2x16xf32>
}

// -----

// Tests the parameter attributes on function arguments.
// CHECK-LABEL: func.func @params
// CHECK-SAME: nn.init = #nn.init<normal, mean = 0.000000e+00, std = 2.000000e-02>, nn.param = "w"
// CHECK-SAME: nn.init = #nn.init<uniform, low = -1.000000e-01, high = 1.000000e-01>
// CHECK-SAME: nn.init = #nn.init<ones>
// CHECK-SAME: nn.init = #nn.init<zeros>
func.func @params(%w: tensor<4x4xf32> {nn.param = "w", nn.init = #nn.init<normal, mean = 0.0, std = 0.02>},
                  %u: tensor<4xf32> {nn.init = #nn.init<uniform, low = -0.1, high = 0.1>},
                  %o: tensor<4xf32> {nn.init = #nn.init<ones>},
                  %z: tensor<4xf32> {nn.init = #nn.init<zeros>}) {
  return
}

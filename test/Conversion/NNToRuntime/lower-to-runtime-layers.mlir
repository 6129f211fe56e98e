// RUN: fsdp-opt %s -fsdp-lower-to-runtime | fsdp-translate --mlir-to-cpp | FileCheck %s
// RUN: fsdp-opt %s -fsdp-lower-to-runtime="outline-layers=false" | fsdp-translate --mlir-to-cpp | FileCheck %s --check-prefix=INLINE
// Layers 1 and 2 compute the same per-rank program on other parameters, so
// the lowering emits it once, as a static function taking a frame of
// handles, and calls it twice. Layer 0 differs (its output is also read at
// the end), so it stays inline. The function releases the input whose last
// use it holds (the previous layer's activation), as inline code would,
// so the caller never releases it, and hands its output back; the caller
// releases the last one.

func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"},
                   %w0: tensor<8x8xf32> {nn.param = "model.layers.0.mlp.weight"},
                   %w1: tensor<8x8xf32> {nn.param = "model.layers.1.mlp.weight"},
                   %w2: tensor<8x8xf32> {nn.param = "model.layers.2.mlp.weight"})
    -> (tensor<2x8xf32> {nn.output = "y"}) {
  %h0 = nn.linear %x, %w0 {path = "model.layers.0.mlp"} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %a0 = nn.silu %h0 {path = "model.layers.0.act"} : tensor<2x8xf32>
  %h1 = nn.linear %a0, %w1 {path = "model.layers.1.mlp"} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %a1 = nn.silu %h1 {path = "model.layers.1.act"} : tensor<2x8xf32>
  %h2 = nn.linear %a1, %w2 {path = "model.layers.2.mlp"} : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %a2 = nn.silu %h2 {path = "model.layers.2.act"} : tensor<2x8xf32>
  %y = nn.add %a2, %h0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// CHECK-LABEL: static void fsdp_layer_function_0(
// CHECK-SAME:    fsdp_program* [[P:v[0-9]+]], fsdp_frame* [[F:v[0-9]+]]) {
// CHECK-NEXT:    fsdp_tensor* [[X:v[0-9]+]] = fsdp_frame_get([[F]], 0);
// CHECK-NEXT:    fsdp_tensor* [[W:v[0-9]+]] = fsdp_frame_get([[F]], 1);
// CHECK-NEXT:    fsdp_tensor* [[H:v[0-9]+]] = fsdp_op_linear([[P]], {{.*}}, [[X]], [[W]], nullptr);
// CHECK-NEXT:    fsdp_release([[X]]);
// CHECK-NEXT:    fsdp_tensor* [[A:v[0-9]+]] = fsdp_op_silu([[P]], {{.*}}, [[H]]);
// CHECK-NEXT:    fsdp_release([[H]]);
// CHECK-NEXT:    fsdp_frame_set([[F]], 2, [[A]]);
// CHECK-NEXT:    return;
// The two calls are one loop: layer i reads its activation from slot i of
// a table (slot 0: layer 0's, put there first) and its weight from program
// argument 2 + i, and writes its output to slot i + 1.
// CHECK-LABEL: void fsdp_program_forward(
// CHECK:         fsdp_tensor* [[A0:v[0-9]+]] = fsdp_op_silu(
// CHECK-NEXT:    fsdp_frame* [[T:v[0-9]+]] = fsdp_frame_new({{v[0-9]+}}, 3);
// CHECK-NEXT:    fsdp_frame_set([[T]], 0, [[A0]]);
// CHECK-NEXT:    fsdp_frame* [[F:v[0-9]+]] = fsdp_frame_new({{v[0-9]+}}, 3);
// CHECK-NEXT:    for (int64_t [[I:i[0-9]+]] = 0; [[I]] < 2; [[I]] += 1) {
// CHECK-NEXT:      fsdp_tensor* [[X:v[0-9]+]] = fsdp_frame_get([[T]], [[I]]);
// CHECK-NEXT:      fsdp_frame_set([[F]], 0, [[X]]);
// CHECK-NEXT:      int64_t [[K:v[0-9]+]] = 2 + [[I]];
// CHECK-NEXT:      fsdp_tensor* [[W:v[0-9]+]] = fsdp_prog_arg({{v[0-9]+}}, [[K]]);
// CHECK-NEXT:      fsdp_frame_set([[F]], 1, [[W]]);
// CHECK-NEXT:      fsdp_layer_function_0({{v[0-9]+}}, [[F]]);
// CHECK-NEXT:      fsdp_tensor* [[Y:v[0-9]+]] = fsdp_frame_get([[F]], 2);
// CHECK-NEXT:      int64_t [[S:v[0-9]+]] = 1 + [[I]];
// CHECK-NEXT:      fsdp_frame_set([[T]], [[S]], [[Y]]);
// CHECK-NEXT:    }
// CHECK-NEXT:    fsdp_frame_free([[F]]);
// CHECK-NEXT:    fsdp_tensor* [[A2:v[0-9]+]] = fsdp_frame_get([[T]], 2);
// CHECK-NOT:     fsdp_release([[A0]]);
// CHECK:         fsdp_release([[A2]]);
// CHECK-NOT:     fsdp_release([[A0]]);
// CHECK:         fsdp_frame_free([[T]]);
// CHECK:         return;

// INLINE-NOT: fsdp_layer_function
// INLINE-COUNT-3: fsdp_op_linear

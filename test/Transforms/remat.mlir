// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none activation-checkpointing=full" 2>/dev/null | FileCheck %s --check-prefix=FULL
// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none activation-checkpointing=full" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none activation-checkpointing=selective" 2>&1 | FileCheck %s --check-prefix=SEL
// RUN: fsdp-opt %s -fsdp-build-train-step="optimizer=none" 2>&1 | FileCheck %s --check-prefix=NONE
// Activation checkpointing in fsdp-build-train-step: a decoder layer (ops
// whose path is in `model.layers.N`) keeps its input and its output; what
// its backward reads besides is recomputed right before the layer's
// backward, from the kept values, as clones marked fsdp.recompute. The
// selective policy also keeps the first, third, ... matmul's result,
// attention's and the collectives'.

// One MLP layer, then a head outside the layers. Its backward reads the
// up projection's result (silu's gradient) and silu's (the down
// projection's weight gradient).
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"},
                   %labels: tensor<4xi64> {nn.input = "labels"},
                   %up: tensor<16x8xf32> {nn.param = "model.layers.0.mlp.up.weight"},
                   %down: tensor<8x16xf32> {nn.param = "model.layers.0.mlp.down.weight"},
                   %head: tensor<10x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %h = nn.linear %x, %up {path = "model.layers.0.mlp.up"} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %a = nn.silu %h {path = "model.layers.0.mlp.act"} : tensor<4x16xf32>
  %d = nn.linear %a, %down {path = "model.layers.0.mlp.down"} : (tensor<4x16xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %y = nn.add %x, %d {path = "model.layers.0"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %logits = nn.linear %y, %head {path = "lm_head"} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// Full: the forward runs once; the layer's output %y is kept (the head
// reads it); the up projection and silu run again after the head's
// backward, and the layer's backward reads only the clones.
// REMARK: remark: activation checkpointing (full): 1 layers recompute 2 ops before their backward, re-issuing 0 collectives
// FULL-LABEL: func.func @forward(
// FULL-SAME: %[[X:[^:]+]]: tensor<4x8xf32> {nn.input = "x"}
// FULL-SAME: %[[UP:[^:]+]]: tensor<16x8xf32> {nn.param = "model.layers.0.mlp.up.weight"}
// FULL: %[[H:.+]] = nn.linear %[[X]], %[[UP]] {path = "model.layers.0.mlp.up"}
// FULL: %[[A:.+]] = nn.silu %[[H]] {path
// FULL: %[[Y:.+]] = nn.add %[[X]], {{.*}}path = "model.layers.0"
// FULL: nn.cross_entropy_grad
// FULL: %[[RH:.+]] = nn.linear %[[X]], %[[UP]] {fsdp.recompute, path = "model.layers.0.mlp.up"}
// FULL-NEXT: %[[RA:.+]] = nn.silu %[[RH]] {fsdp.recompute, path
// FULL-NOT: %[[H]]
// FULL-NOT: %[[A]]
// FULL: nn.silu_grad %[[RH]]
// FULL-NOT: %[[H]]
// FULL-NOT: %[[A]]
// FULL: return

// Selective: the up projection is the layer's first matmul, so its result
// is kept; only silu is recomputed.
// SEL: remark: activation checkpointing (selective): 1 layers recompute 1 ops before their backward, re-issuing 0 collectives
// SEL: %[[H:.+]] = nn.linear {{.*}}path = "model.layers.0.mlp.up"
// SEL: nn.cross_entropy_grad
// SEL-NOT: nn.linear {{.*}}fsdp.recompute
// SEL: nn.silu %[[H]] {fsdp.recompute
// SEL: nn.silu_grad %[[H]]

// Without checkpointing nothing is cloned.
// NONE-NOT: fsdp.recompute


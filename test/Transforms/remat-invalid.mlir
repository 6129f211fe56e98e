// RUN: fsdp-opt %s -fsdp-build-train-step="activation-checkpointing=full" -verify-diagnostics
// A model without decoder layers (ops whose path is in `...layers.N`) has
// nothing to checkpoint: asking for it is an error, not a silent no-op.

// expected-error @+1 {{activation checkpointing (full) found no decoder layer with values to recompute (ops whose path is in a module-list element such as `...layers.N`)}}
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"},
                   %labels: tensor<4xi64> {nn.input = "labels"},
                   %head: tensor<10x8xf32> {nn.param = "lm_head.weight"})
    -> (tensor<f32> {nn.output = "loss"}) {
  %a = nn.silu %x {path = "act"} : tensor<4x8xf32>
  %logits = nn.linear %a, %head {path = "lm_head"} : (tensor<4x8xf32>, tensor<10x8xf32>) -> tensor<4x10xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

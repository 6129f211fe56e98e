// RUN: fsdp-opt %s -split-input-file -fsdp-build-train-step -verify-diagnostics
// What fsdp-build-train-step cannot train is an error naming the function or
// op.

// expected-error @+1 {{'func.func' op needs an output named 'loss' computed by nn.cross_entropy (or nn.cross_entropy_combine) with a mean or sum reduction}}
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<4x8xf32> {nn.param = "w"}) -> (tensor<2x4xf32> {nn.output = "y"}) {
  %y = nn.linear %x, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// An output named 'loss' that is not a cross-entropy: the note points at it.
// expected-error @+1 {{'func.func' op needs an output named 'loss' computed by nn.cross_entropy}}
func.func @forward(%x: tensor<2x8xf32> {nn.input = "x"}, %w: tensor<4x8xf32> {nn.param = "w"}) -> (tensor<2x4xf32> {nn.output = "loss"}) {
  // expected-note @+1 {{the output named 'loss' is this}}
  %y = nn.linear %x, %w : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// expected-error @+1 {{'func.func' op parameter #2 is 'tensor<16x8xbf16>'; the optimizer keeps f32 master parameters}}
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"}, %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %table: tensor<16x8xbf16> {nn.param = "embed.weight"}) -> (tensor<f32> {nn.output = "loss"}) {
  %x = nn.embedding %table, %ids : (tensor<16x8xbf16>, tensor<2x4xi64>) -> tensor<2x4x8xbf16>
  %l = nn.linear %x, %table : (tensor<2x4x8xbf16>, tensor<16x8xbf16>) -> tensor<2x4x16xbf16>
  %loss = nn.cross_entropy %l, %labels : (tensor<2x4x16xbf16>, tensor<2x4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"}, %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight"}, %w: tensor<4x16xf32> {nn.param = "w"}) -> (tensor<f32> {nn.output = "loss"}) {
  %x = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // expected-error @+1 {{'nn.matmul' op with transpose_a has no gradient rule yet}}
  %l = nn.matmul %x, %w {transpose_a} : (tensor<2x4x8xf32>, tensor<4x16xf32>) -> tensor<2x8x16xf32>
  %r = nn.reshape %l to [2, 4, 32] : tensor<2x8x16xf32> -> tensor<2x4x32xf32>
  %loss = nn.cross_entropy %r, %labels : (tensor<2x4x32xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}


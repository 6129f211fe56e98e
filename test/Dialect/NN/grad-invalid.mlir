// RUN: fsdp-opt %s -split-input-file -verify-diagnostics
// Backward ops check their forward operands with the forward op's own rule
// and the gradient against the forward result type.

func.func @silu_grad_shape(%x: tensor<4x8xf32>, %dy: tensor<4x4xf32>) {
  // expected-error @+1 {{'nn.silu_grad' op gradient 'tensor<4x4xf32>' does not match the forward result 'tensor<4x8xf32>'}}
  %0 = nn.silu_grad %x, %dy : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @gelu_grad_approximate(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.gelu_grad' op approximate must be "none" or "tanh", got "fast"}}
  %0 = nn.gelu_grad %x, %x {approximate = "fast"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @rms_norm_grad_weight(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op weight must be [8] to match the input's last dim, got 'tensor<4xf32>'}}
  %0:2 = nn.rms_norm_grad %x, %w, %x {eps = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return
}

// -----

func.func @layer_norm_grad_grad(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %dy: tensor<4x8xbf16>) {
  // expected-error @+1 {{'nn.layer_norm_grad' op gradient 'tensor<4x8xbf16>' does not match the forward result 'tensor<4x8xf32>'}}
  %0:3 = nn.layer_norm_grad %x, %w, %dy {eps = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @attention_grad_heads(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x3x16xf32>, %lse: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'nn.attention' op query heads 4 are not a multiple of key/value heads 3}}
  %0:3 = nn.attention_grad %q, %k, %k, %q, %lse, %q {causal} : (tensor<2x16x4x16xf32>, tensor<2x16x3x16xf32>, tensor<2x16x3x16xf32>, tensor<2x16x4x16xf32>, tensor<2x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x16x3x16xf32>, tensor<2x16x3x16xf32>)
  return
}

// -----

func.func @softmax_grad_dim(%y: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.softmax_grad' op dim 2 is out of range for rank 2}}
  %0 = nn.softmax_grad %y, %y dim 2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @embedding_grad_shape(%ids: tensor<2x16xi64>, %dy: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'nn.embedding_grad' op gradient 'tensor<2x8x64xf32>' must be the ids' shape plus a hidden dim, ids are 'tensor<2x16xi64>'}}
  %0 = nn.embedding_grad %ids, %dy {num_embeddings = 128 : i64} : (tensor<2x16xi64>, tensor<2x8x64xf32>) -> tensor<128x64xf32>
  return
}

// -----

func.func @cross_entropy_grad_none(%logits: tensor<2x16x128xf32>, %labels: tensor<2x16xi64>, %g: tensor<f32>) {
  // expected-error @+1 {{'nn.cross_entropy_grad' op gradient 'tensor<f32>' does not match the forward result 'tensor<2x16xf32>'}}
  %0 = nn.cross_entropy_grad %logits, %labels, %g {reduction = "none"} : (tensor<2x16x128xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x128xf32>
  return
}

// -----

func.func @reduce_sum_to_shape(%g: tensor<2x16x64xf32>) {
  // expected-error @+1 {{'nn.reduce_sum_to' op shape [32] does not broadcast to the input 'tensor<2x16x64xf32>'}}
  %0 = nn.reduce_sum_to %g to [32] : tensor<2x16x64xf32> -> tensor<32xf32>
  return
}

// -----

func.func @pad_negative(%g: tensor<4x8xf32>) {
  // expected-error @+1 {{'nn.pad' op padding must be >= 0, got -1 and 2}}
  %0 = nn.pad %g dim 1 before -1 after 2 : tensor<4x8xf32> -> tensor<4x9xf32>
  return
}

// -----

func.func @sum_squares_int(%g: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = nn.sum_squares %g : tensor<4xi32> -> tensor<f32>
  return
}

// -----

func.func @attention_grad_lse(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x16xf32>, %lse: tensor<2x16x4xf32>) {
  // expected-error @+1 {{'nn.attention_grad' op logsumexp 'tensor<2x16x4xf32>' is not the forward's 'tensor<2x4x16xf32>'}}
  %0:3 = nn.attention_grad %q, %k, %k, %q, %lse, %q {causal} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>)
  return
}

// -----

func.func @attention_grad_output(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x16xf32>, %lse: tensor<2x4x16xf32>, %o: tensor<2x16x4x8xf32>) {
  // expected-error @+1 {{'nn.attention_grad' op output 'tensor<2x16x4x8xf32>' is not the forward's 'tensor<2x16x4x16xf32>'}}
  %0:3 = nn.attention_grad %q, %k, %k, %o, %lse, %q {causal} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x4x8xf32>, tensor<2x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>)
  return
}

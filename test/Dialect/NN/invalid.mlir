// RUN: fsdp-opt %s -split-input-file -verify-diagnostics
// Every nn shape and dtype rule rejects bad IR with a message that says
// what is wrong.

func.func @embedding_table_rank(%t: tensor<128xf32>, %ids: tensor<2x16xi64>) {
  // expected-error @+1 {{'nn.embedding' op table must be [V, H], got 'tensor<128xf32>'}}
  %0 = nn.embedding %t, %ids : (tensor<128xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<128x64xf32>, %ids: tensor<2x16xf32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = nn.embedding %t, %ids : (tensor<128x64xf32>, tensor<2x16xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @linear_k_mismatch(%x: tensor<2x16x64xf32>, %w: tensor<32x48xf32>) {
  // expected-error @+1 {{'nn.linear' op weight 'tensor<32x48xf32>' does not match the input's last dim 64 (weight is [out, in])}}
  %0 = nn.linear %x, %w : (tensor<2x16x64xf32>, tensor<32x48xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<2x64xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>) {
  // expected-error @+1 {{'nn.linear' op bias must be [32], got 'tensor<64xf32>'}}
  %0 = nn.linear %x, %w, %b : (tensor<2x64xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<2x32xf32>
  return
}

// -----

func.func @linear_dtype_mix(%x: tensor<2x64xf32>, %w: tensor<32x64xbf16>) {
  // expected-error @+1 {{'nn.linear' op weight element type 'bf16' differs from 'f32'}}
  %0 = nn.linear %x, %w : (tensor<2x64xf32>, tensor<32x64xbf16>) -> tensor<2x32xf32>
  return
}

// -----

func.func @linear_wrong_result(%x: tensor<2x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{'nn.linear' op result type 'tensor<2x64xf32>' differs from the inferred 'tensor<2x32xf32>'}}
  %0 = nn.linear %x, %w : (tensor<2x64xf32>, tensor<32x64xf32>) -> tensor<2x64xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<2x16x64xf32>, %b: tensor<32x8xf32>) {
  // expected-error @+1 {{'nn.matmul' op contraction dims differ: lhs has 64, rhs has 32}}
  %0 = nn.matmul %a, %b : (tensor<2x16x64xf32>, tensor<32x8xf32>) -> tensor<2x16x8xf32>
  return
}

// -----

func.func @matmul_batched_rhs(%a: tensor<2x16x64xf32>, %b: tensor<2x64x8xf32>) {
  // expected-error @+1 {{'nn.matmul' op rhs must have rank 2, got 'tensor<2x64x8xf32>' (use nn.batch_matmul for batched operands)}}
  %0 = nn.matmul %a, %b : (tensor<2x16x64xf32>, tensor<2x64x8xf32>) -> tensor<2x16x8xf32>
  return
}

// -----

func.func @batch_matmul_batch_dims(%a: tensor<2x16x64xf32>, %b: tensor<4x64x8xf32>) {
  // expected-error @+1 {{'nn.batch_matmul' op batch dims differ: 'tensor<2x16x64xf32>' vs 'tensor<4x64x8xf32>'}}
  %0 = nn.batch_matmul %a, %b : (tensor<2x16x64xf32>, tensor<4x64x8xf32>) -> tensor<2x16x8xf32>
  return
}

// -----

func.func @batch_matmul_rank(%a: tensor<16x64xf32>, %b: tensor<64x8xf32>) {
  // expected-error @+1 {{'nn.batch_matmul' op operands must have the same rank >= 3}}
  %0 = nn.batch_matmul %a, %b : (tensor<16x64xf32>, tensor<64x8xf32>) -> tensor<16x8xf32>
  return
}

// -----

func.func @add_not_broadcastable(%a: tensor<2x16x64xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{'nn.add' op operands 'tensor<2x16x64xf32>' and 'tensor<16x32xf32>' are not broadcast-compatible}}
  %0 = nn.add %a, %b : (tensor<2x16x64xf32>, tensor<16x32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @sub_dtype_mix(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{'nn.sub' op rhs element type 'f16' differs from 'f32'}}
  %0 = nn.sub %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @mul_int(%a: tensor<4xi64>, %b: tensor<4xi64>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = nn.mul %a, %b : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return
}

// -----

func.func @neg_int(%a: tensor<4xi32>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %0 = nn.neg %a : tensor<4xi32>
  return
}

// -----

func.func @scale_missing_factor(%a: tensor<4xf32>) {
  // expected-error @+1 {{'nn.scale' op requires attribute 'factor'}}
  %0 = "nn.scale"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @silu_result_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{'nn.silu' op failed to verify that all of {input, result} have same type}}
  %0 = "nn.silu"(%a) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @gelu_approximate(%a: tensor<4xf32>) {
  // expected-error @+1 {{'nn.gelu' op approximate must be "none" or "tanh", got "sigmoid"}}
  %0 = nn.gelu %a {approximate = "sigmoid"} : tensor<4xf32>
  return
}

// -----

func.func @rms_norm_weight(%x: tensor<2x16x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op weight must be [64] to match the input's last dim, got 'tensor<32xf32>'}}
  %0 = nn.rms_norm %x, %w {eps = 1.0e-5 : f64} : (tensor<2x16x64xf32>, tensor<32xf32>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<2x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'nn.rms_norm' op eps must be >= 0}}
  %0 = nn.rms_norm %x, %w {eps = -1.0 : f64} : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<2x64xf32>, %w: tensor<64xf32>, %b: tensor<2x64xf32>) {
  // expected-error @+1 {{'nn.layer_norm' op bias must be [64] to match the input's last dim, got 'tensor<2x64xf32>'}}
  %0 = nn.layer_norm %x, %w, %b {eps = 1.0e-5 : f64} : (tensor<2x64xf32>, tensor<64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  return
}

// -----

func.func @rotary_odd_head_dim(%x: tensor<2x16x4x15xf32>, %pos: tensor<2x16xi64>) {
  // expected-error @+1 {{'nn.rotary' op head dim 15 must be even}}
  %0 = nn.rotary %x, %pos {theta = 10000.0 : f64} : (tensor<2x16x4x15xf32>, tensor<2x16xi64>) -> tensor<2x16x4x15xf32>
  return
}

// -----

func.func @rotary_positions(%x: tensor<2x16x4x16xf32>, %pos: tensor<16xi64>) {
  // expected-error @+1 {{'nn.rotary' op positions must be [2, 16], got 'tensor<16xi64>'}}
  %0 = nn.rotary %x, %pos {theta = 10000.0 : f64} : (tensor<2x16x4x16xf32>, tensor<16xi64>) -> tensor<2x16x4x16xf32>
  return
}

// -----

func.func @rotary_rank(%x: tensor<2x16x64xf32>, %pos: tensor<2x16xi64>) {
  // expected-error @+1 {{'nn.rotary' op input must be [B, S, N, D], got 'tensor<2x16x64xf32>'}}
  %0 = nn.rotary %x, %pos {theta = 10000.0 : f64} : (tensor<2x16x64xf32>, tensor<2x16xi64>) -> tensor<2x16x64xf32>
  return
}

// -----

func.func @attention_gqa(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x3x16xf32>, %v: tensor<2x16x3x16xf32>) {
  // expected-error @+1 {{'nn.attention' op query heads 4 are not a multiple of key/value heads 3}}
  %0:2 = nn.attention %q, %k, %v {causal} : (tensor<2x16x4x16xf32>, tensor<2x16x3x16xf32>, tensor<2x16x3x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_head_dim(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x8xf32>, %v: tensor<2x16x2x8xf32>) {
  // expected-error @+1 {{'nn.attention' op query head dim 16 differs from key head dim 8}}
  %0:2 = nn.attention %q, %k, %v : (tensor<2x16x4x16xf32>, tensor<2x16x2x8xf32>, tensor<2x16x2x8xf32>) -> (tensor<2x16x4x8xf32>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_window_needs_causal(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x16xf32>, %v: tensor<2x16x2x16xf32>) {
  // expected-error @+1 {{'nn.attention' op sliding_window requires causal}}
  %0:2 = nn.attention %q, %k, %v {sliding_window = 4 : i64} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x16x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @attention_kv_mismatch(%q: tensor<2x16x4x16xf32>, %k: tensor<2x16x2x16xf32>, %v: tensor<2x8x2x16xf32>) {
  // expected-error @+1 {{'nn.attention' op key 'tensor<2x16x2x16xf32>' and value 'tensor<2x8x2x16xf32>' must agree on sequence and head count}}
  %0:2 = nn.attention %q, %k, %v {causal} : (tensor<2x16x4x16xf32>, tensor<2x16x2x16xf32>, tensor<2x8x2x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  return
}

// -----

func.func @softmax_dim(%x: tensor<2x16xf32>) {
  // expected-error @+1 {{'nn.softmax' op dim 2 is out of range for rank 2}}
  %0 = nn.softmax %x dim 2 : tensor<2x16xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<2x16x64xf32>) {
  // expected-error @+1 {{'nn.reshape' op shape has 1000 elements but 'tensor<2x16x64xf32>' has 2048}}
  %0 = nn.reshape %x to [10, 100] : tensor<2x16x64xf32> -> tensor<10x100xf32>
  return
}

// -----

func.func @transpose_perm(%x: tensor<2x16x64xf32>) {
  // expected-error @+1 {{'nn.transpose' op perm is not a permutation of [0, 3)}}
  %0 = nn.transpose %x perm [0, 0, 1] : tensor<2x16x64xf32> -> tensor<2x2x16xf32>
  return
}

// -----

func.func @slice_range(%x: tensor<2x16x64xf32>) {
  // expected-error @+1 {{'nn.slice' op range starting at 60 of size 10 is not inside dim 2 of size 64}}
  %0 = nn.slice %x dim 2 start 60 size 10 : tensor<2x16x64xf32> -> tensor<2x16x10xf32>
  return
}

// -----

func.func @split_sizes(%x: tensor<2x16x192xf32>) {
  // expected-error @+1 {{'nn.split' op sizes sum to 128 but dim 2 has size 192}}
  %0:2 = nn.split %x dim 2 sizes [64, 64] : tensor<2x16x192xf32> -> tensor<2x16x64xf32>, tensor<2x16x64xf32>
  return
}

// -----

func.func @concat_mismatch(%a: tensor<2x16x64xf32>, %b: tensor<2x8x64xf32>) {
  // expected-error @+1 {{'nn.concat' op input 'tensor<2x8x64xf32>' differs from 'tensor<2x16x64xf32>' outside dim 2}}
  %0 = nn.concat %a, %b dim 2 : (tensor<2x16x64xf32>, tensor<2x8x64xf32>) -> tensor<2x16x128xf32>
  return
}

// -----

func.func @cast_to_int(%x: tensor<4xf32>) {
  // expected-error @+1 {{'nn.cast' op dtype must be f32, bf16 or f16, got 'i32'}}
  %0 = "nn.cast"(%x) {dtype = i32} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @cross_entropy_labels(%logits: tensor<2x16x256xf32>, %labels: tensor<2x8xi64>) {
  // expected-error @+1 {{'nn.cross_entropy' op labels 'tensor<2x8xi64>' must have the logits' shape without the class dim, logits are 'tensor<2x16x256xf32>'}}
  %0 = nn.cross_entropy %logits, %labels : (tensor<2x16x256xf32>, tensor<2x8xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_reduction(%logits: tensor<2x256xf32>, %labels: tensor<2xi64>) {
  // expected-error @+1 {{'nn.cross_entropy' op reduction must be "mean", "sum" or "none", got "max"}}
  %0 = nn.cross_entropy %logits, %labels {reduction = "max"} : (tensor<2x256xf32>, tensor<2xi64>) -> tensor<f32>
  return
}

// -----

// expected-error @+1 {{normal initializer needs std > 0, got 0.000000e+00}}
func.func private @bad_init(tensor<4xf32> {nn.init = #nn.init<normal, mean = 0.0, std = 0.0>})

// -----

// expected-error @+1 {{uniform initializer needs low < high, got [1.000000e+00, 0.000000e+00]}}
func.func private @bad_uniform(tensor<4xf32> {nn.init = #nn.init<uniform, low = 1.0, high = 0.0>})

// -----

// expected-error @+1 {{unknown initializer 'gaussian', expected zeros, ones, normal or uniform}}
func.func private @unknown_init(tensor<4xf32> {nn.init = #nn.init<gaussian>})

// -----

// A vocabulary block's index is a scalar.
func.func @embedding_shard_index(%t: tensor<8x4xf32>, %ids: tensor<2xi64>, %k: tensor<1xi64>) {
  // expected-error @+1 {{'nn.embedding' op shard_index must be a scalar, got 'tensor<1xi64>'}}
  %0 = nn.embedding %t, %ids, %k : (tensor<8x4xf32>, tensor<2xi64>, tensor<1xi64>) -> tensor<2x4xf32>
  return
}

// -----

func.func @reduce_max_scalar(%x: tensor<f32>) {
  // expected-error @+1 {{'nn.reduce_max' op input must have rank >= 1}}
  %0 = nn.reduce_max %x : tensor<f32> -> tensor<f32>
  return
}

// -----

// The shift is one value per position, like the labels.
func.func @partial_shift(%l: tensor<2x8xf32>, %labels: tensor<2xi64>, %m: tensor<3xf32>, %k: tensor<i64>) {
  // expected-error @+1 {{'nn.cross_entropy_partial' op shift 'tensor<3xf32>' must have the labels' shape 'tensor<2xi64>'}}
  %0:2 = nn.cross_entropy_partial %l, %labels, %m, %k : (tensor<2x8xf32>, tensor<2xi64>, tensor<3xf32>, tensor<i64>) -> (tensor<2xf32>, tensor<2xf32>)
  return
}

// -----

func.func @partial_labels(%l: tensor<2x8xf32>, %labels: tensor<3xi64>, %m: tensor<2xf32>, %k: tensor<i64>) {
  // expected-error @+1 {{'nn.cross_entropy_partial' op labels 'tensor<3xi64>' must have the logits' shape without the class dim, logits are 'tensor<2x8xf32>'}}
  %0:2 = nn.cross_entropy_partial %l, %labels, %m, %k : (tensor<2x8xf32>, tensor<3xi64>, tensor<2xf32>, tensor<i64>) -> (tensor<3xf32>, tensor<3xf32>)
  return
}

// -----

func.func @combine_reduction(%e: tensor<2xf32>, %t: tensor<2xf32>, %labels: tensor<2xi64>) {
  // expected-error @+1 {{'nn.cross_entropy_combine' op reduction must be "mean", "sum" or "none", got "max"}}
  %0 = nn.cross_entropy_combine %e, %t, %labels {reduction = "max"} : (tensor<2xf32>, tensor<2xf32>, tensor<2xi64>) -> tensor<f32>
  return
}

// -----

// A misspelt attribute is an error, not an attribute kept and ignored;
// dialect attributes (with a dot) stay allowed.
func.func @misspelt_attribute(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+1 {{'nn.matmul' op has no attribute 'tranpose_a' (it has path, transpose_a, transpose_b)}}
  %0 = nn.matmul %a, %b {tranpose_a} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @rotary_inv_freq(%x: tensor<1x2x1x4xf32>, %p: tensor<1x2xi64>) {
  // expected-error @+1 {{'nn.rotary' op inv_freq has 3 entries, expected head dim / 2 = 2}}
  %0 = nn.rotary %x, %p {theta = 1.0e4, inv_freq = array<f64: 1.0, 0.5, 0.25>} : (tensor<1x2x1x4xf32>, tensor<1x2xi64>) -> tensor<1x2x1x4xf32>
  return
}

// -----

func.func @rotary_scaling(%x: tensor<1x2x1x4xf32>, %p: tensor<1x2xi64>) {
  // expected-error @+1 {{'nn.rotary' op attention_scaling must be finite and > 0}}
  %0 = nn.rotary %x, %p {theta = 1.0e4, attention_scaling = 0.0} : (tensor<1x2x1x4xf32>, tensor<1x2xi64>) -> tensor<1x2x1x4xf32>
  return
}

// RUN: fsdp-opt %s -split-input-file -verify-diagnostics
// The fsdp dialect owns the annotations FSDP's passes pass on (fsdp.unit,
// fsdp.mp_policy, ...) and verifies each where it is parsed: a misspelt or
// malformed one is an error naming it.

func.func @unit_not_a_name(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.neg' op has 'fsdp.unit' that is not a unit name: 3 : i64}}
  %y = nn.neg %x {fsdp.unit = 3} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @misspelt(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'nn.neg' op has 'fsdp.reshrad', which is not an fsdp attribute of an op}}
  %y = nn.neg %x {fsdp.reshrad} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{param must be f32, bf16 or f16, got 'i8'}}
module attributes {fsdp.mp_policy = #fsdp.mp_policy<param = i8, reduce = f32, output = bf16, cast_forward_inputs = true>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'builtin.module' op has 'fsdp.mp_policy' that is not a #fsdp.mp_policy: {param_dtype = "bf16"}}}
module attributes {fsdp.mp_policy = {param_dtype = "bf16"}} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'builtin.module' op has 'fsdp.reshard_after_forward' that is not "none", "true" or "false": "maybe"}}
module attributes {fsdp.reshard_after_forward = "maybe"} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'func.func' op argument #0 has 'fsdp.inner_axes' that is not one integer per dim of 'tensor<4x4xf32>': array<i64: 1>}}
func.func @inner_axes_rank(%w: tensor<4x4xf32> {fsdp.inner_axes = array<i64: 1>}) -> tensor<4x4xf32> {
  %y = nn.neg %w : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// expected-error @+1 {{'func.func' op has 'fsdp.globl_shape' on argument #0, which is not an fsdp attribute of an argument}}
func.func @misspelt_arg(%w: tensor<4x4xf32> {fsdp.globl_shape = array<i64: 5, 4>}) -> tensor<4x4xf32> {
  %y = nn.neg %w : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// expected-error @+1 {{'builtin.module' op has 'fsdp.precision' with an unknown field 'parameters'}}
module attributes {fsdp.precision = {parameters = "bf16"}} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

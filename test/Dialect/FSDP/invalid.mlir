// RUN: fsdp-opt %s -split-input-file -verify-diagnostics
// The fsdp dialect owns the annotations FSDP's passes pass on (fsdp.unit,
// fsdp.parallel, ...) and verifies each where it is parsed: a misspelt or
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

// expected-error @+2 {{param must be f32, bf16 or f16, got 'i8'}}
// expected-error @+1 {{failed to parse FSDP_ParallelConfigAttr parameter 'mp_policy'}}
module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1, dp_shard = 1, cp = 1, cp_comm_type = p2p, tp = 1, ep = 1, sequence_parallel = false, async_tp = false, reshard_after_forward = all_but_last, defer_grad_sync = true, activation_checkpointing = none, activation_memory_budget = 0.0 : f64, offload_policy = none, forward_prefetch = 1, backward_prefetch = 1, mp_policy = <param = i8, reduce = f32, output = bf16, cast_forward_inputs = true>>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{'builtin.module' op has 'fsdp.parallel' that is not a #fsdp.parallel: {tp_size = 2 : i64}}}
module attributes {fsdp.parallel = {tp_size = 2}} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+2 {{expected one of 'all_but_last' 'always' 'never', got 'maybe'}}
// expected-error @+1 {{failed to parse FSDP_ParallelConfigAttr parameter 'reshard_after_forward'}}
module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1, dp_shard = 1, cp = 1, cp_comm_type = p2p, tp = 1, ep = 1, sequence_parallel = false, async_tp = false, reshard_after_forward = maybe, defer_grad_sync = true, activation_checkpointing = none, activation_memory_budget = 0.0 : f64, offload_policy = none, forward_prefetch = 1, backward_prefetch = 1, mp_policy = <param = bf16, reduce = f32, output = bf16, cast_forward_inputs = true>>} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    %y = nn.neg %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// expected-error @+1 {{tp must be >= 1, got 0}}
module attributes {fsdp.parallel = #fsdp.parallel<dp_replicate = 1, dp_shard = 1, cp = 1, cp_comm_type = p2p, tp = 0, ep = 1, sequence_parallel = false, async_tp = false, reshard_after_forward = never, defer_grad_sync = true, activation_checkpointing = selective, activation_memory_budget = 0.0 : f64, offload_policy = cpu, forward_prefetch = 1, backward_prefetch = 2, mp_policy = <param = bf16, reduce = f32, output = bf16, cast_forward_inputs = true>>} {
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

// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime | fsdp-translate --mlir-to-cpp | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-memory-report="memory-plan=false" -o /dev/null | FileCheck %s --check-prefix=MEM
// An optimizer update whose result the step returns as the update of the
// argument it is the new value of takes that argument's buffer (the
// lowering hands out another handle, fsdp_retain), unless the step reads
// the argument after the update: a later use, a view of it used later, or
// an async collective on it still in flight. The memory report counts no
// bytes for an update in place. A step whose AdamW results only the return
// reads queues its AdamW calls until its end (fsdp_prog_defer_updates),
// holding their operands until then; SGD runs at once.

// All three in place: no buffer for the update, and the activations' peak
// is the 16-byte gradient alone. The update is deferred.
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<4xf32> {nn.updates = 4 : i64}) {
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np, %nm, %nv : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: void fsdp_program_forward(
// CHECK: fsdp_tensor* [[P:v[0-9]+]] = fsdp_prog_arg(v1, 2);
// CHECK: fsdp_tensor* [[M:v[0-9]+]] = fsdp_prog_arg(v1, 3);
// CHECK: fsdp_tensor* [[V:v[0-9]+]] = fsdp_prog_arg(v1, 4);
// CHECK: fsdp_tensor* [[NP:v[0-9]+]] = fsdp_retain([[P]]);
// CHECK: fsdp_tensor* [[NM:v[0-9]+]] = fsdp_retain([[M]]);
// CHECK: fsdp_tensor* [[NV:v[0-9]+]] = fsdp_retain([[V]]);
// CHECK: fsdp_op_adamw(v1, [[NP]], [[NM]], [[NV]], [[P]],
// CHECK-LABEL: void fsdp_program_describe(
// CHECK: fsdp_prog_defer_updates(v1);
// MEM: activations and temporaries, peak 16
// MEM: estimated peak 84
// MEM: optimizer: 3 of 3 results updated in place; AdamW deferred to the step's end, multi-tensor

// -----

// The parameter is read after the update: the new parameter gets a buffer
// (16 more bytes at the update), the moments still update in place. The
// deferred update holds the gradient until the end, past `y`: 48 bytes.
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<4xf32> {nn.updates = 4 : i64}, tensor<4xf32> {nn.output = "y"}) {
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y = nn.add %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %np, %nm, %nv, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: void fsdp_program_forward(
// CHECK: fsdp_tensor* [[M:v[0-9]+]] = fsdp_prog_arg(v1, 3);
// CHECK: fsdp_tensor* [[V:v[0-9]+]] = fsdp_prog_arg(v1, 4);
// CHECK: fsdp_tensor* [[NP:v[0-9]+]] = fsdp_tensor_new(v1, fsdp_type{FSDP_RT_F32, 1, {4}});
// CHECK: fsdp_tensor* [[NM:v[0-9]+]] = fsdp_retain([[M]]);
// CHECK: fsdp_tensor* [[NV:v[0-9]+]] = fsdp_retain([[V]]);
// CHECK: fsdp_op_adamw(v1, [[NP]], [[NM]], [[NV]],
// MEM: activations and temporaries, peak 48
// MEM: optimizer: 2 of 3 results updated in place; AdamW deferred

// -----

// A view of the parameter is read after the update, and the moments are
// returned as each other's updates: nothing updates in place. The gradient
// and three new buffers live until the end, with `y`: 80 bytes.
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 4 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<2x2xf32> {nn.output = "y"}) {
  %r = nn.reshape %p to [2, 2] : tensor<4xf32> -> tensor<2x2xf32>
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y = nn.neg %r : tensor<2x2xf32>
  return %np, %nm, %nv, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x2xf32>
}
// CHECK-LABEL: void fsdp_program_forward(
// CHECK-NOT: fsdp_retain
// CHECK: fsdp_op_adamw(
// MEM: activations and temporaries, peak 80
// MEM: optimizer: 0 of 3 results updated in place; AdamW deferred

// -----

// An async all-gather of the parameter is in flight past the update: the
// parameter gets a new buffer. The SGD momentum buffer updates in place.
// SGD is not deferred.
dist.mesh @mesh(dp = 2)
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %b: tensor<4xf32> {nn.state = "w.momentum_buffer"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<8xf32> {nn.output = "y"}) {
  %f = dist.all_gather %p on @mesh[dp] dim 0 : tensor<4xf32> -> !dist.future<tensor<8xf32>>
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nb = nn.sgd %p, %g, %b, %step, %step {lr = 1.0e-2 : f64, momentum = 0.9 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>)
  %y = dist.wait %f : !dist.future<tensor<8xf32>>
  return %np, %nb, %y : tensor<4xf32>, tensor<4xf32>, tensor<8xf32>
}
// CHECK-LABEL: void fsdp_program_forward(
// CHECK: fsdp_tensor* [[B:v[0-9]+]] = fsdp_prog_arg(v1, 3);
// CHECK: fsdp_tensor* [[NP:v[0-9]+]] = fsdp_tensor_new(v1, fsdp_type{FSDP_RT_F32, 1, {4}});
// CHECK: fsdp_tensor* [[NB:v[0-9]+]] = fsdp_retain([[B]]);
// CHECK: fsdp_op_sgd(v1, [[NP]], [[NB]],
// CHECK-LABEL: void fsdp_program_describe(
// CHECK-NOT: fsdp_prog_defer_updates
// MEM: activations and temporaries, peak 64
// MEM: optimizer: 1 of 2 results updated in place{{$}}

// -----

// An op reads an AdamW result (the new parameter) inside the step: the
// updates run where they are, not deferred, in place (the argument is not
// read after), and the gradient goes before `y` comes: 16 bytes.
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<4xf32> {nn.updates = 4 : i64}, tensor<4xf32> {nn.output = "y"}) {
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y = nn.add %x, %np : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %np, %nm, %nv, %y : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: void fsdp_program_forward(
// CHECK: fsdp_op_adamw(
// CHECK: fsdp_op_add(
// CHECK-LABEL: void fsdp_program_describe(
// CHECK-NOT: fsdp_prog_defer_updates
// MEM: activations and temporaries, peak 16
// MEM: optimizer: 3 of 3 results updated in place{{$}}

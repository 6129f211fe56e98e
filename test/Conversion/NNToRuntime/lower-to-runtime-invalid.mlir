// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime -verify-diagnostics
// What fsdp-lower-to-runtime cannot lower is an error naming the op or
// argument, never a crash or a silently wrong program.

// expected-error @+1 {{no single-block function @forward to lower}}
module {
  func.func @step() {
    return
  }
}

// -----

// expected-error @+1 {{'func.func' op argument #0 has neither nn.input, nn.param nor nn.state}}
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-note @+1 {{the mesh's order is here}}
dist.mesh @mesh(dp = 2, tp = 2)
func.func @forward(%x: tensor<4x4xf32> {nn.input = "x"}) -> tensor<4x4xf32> {
  // expected-error @+1 {{'dist.all_reduce' op lists its mesh axes out of the mesh's order}}
  %y = dist.all_reduce %x on @mesh[tp, dp] sum : tensor<4x4xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

dist.mesh @a(x = 2)
// expected-error @+1 {{'dist.mesh' op is a second mesh; the runtime lowering supports one mesh per program}}
dist.mesh @b(y = 2)
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}


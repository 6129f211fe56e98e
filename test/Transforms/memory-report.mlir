// RUN: fsdp-opt %s -split-input-file -fsdp-memory-report="memory-plan=false" -o /dev/null | FileCheck %s
// fsdp-memory-report replays the runtime's allocations: arguments stay for
// the step, every result is a new buffer freed after its last use, returned
// values stay, and a collective adds its staging buffers while it runs.

// Activations, traced by hand: g 256 (freed at the cast), c 512 (freed at
// the add), y0 512, r 512, s 128, a 512, p 512 (returned). The peak is 1024
// bytes (c and y0, then y0 and r, then a and p); with the 128-byte
// parameter block and the 512-byte input, 1664.
dist.mesh @mesh(dp_shard = 2, tp = 4)
func.func @forward(%x: tensor<8x16xf32> {nn.input = "x"}, %w: tensor<4x16xbf16> {nn.param = "w"}) -> (tensor<8x16xf32> {nn.output = "y"}) {
  %g = dist.all_gather %w on @mesh[dp_shard] dim 0 : tensor<4x16xbf16> -> tensor<8x16xbf16>
  %c = nn.cast %g to f32 : tensor<8x16xbf16> -> tensor<8x16xf32>
  %y0 = nn.add %x, %c : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %r = dist.all_reduce %y0 on @mesh[tp] sum : tensor<8x16xf32> -> tensor<8x16xf32>
  %s = dist.reduce_scatter %r on @mesh[tp] sum dim 0 : tensor<8x16xf32> -> tensor<2x16xf32>
  %a = dist.all_gather %s on @mesh[tp] dim 0 : tensor<2x16xf32> -> tensor<8x16xf32>
  %p = dist.permute %a on @mesh[dp_shard, tp] offset 1 : tensor<8x16xf32> -> tensor<8x16xf32>
  return %p : tensor<8x16xf32>
}

// CHECK:      memory per rank                               bytes
// CHECK-NEXT: parameters (this rank's blocks)                 128
// CHECK-NEXT: optimizer state                                   0
// CHECK-NEXT: inputs                                          512
// CHECK-NEXT: gradients (blocks, at the update)                 0
// CHECK-NEXT: largest gathered unit                             0
// CHECK-NEXT: activations and temporaries, peak              1024
// CHECK-NEXT: estimated peak                                 1664

// -----

// Staging: a reduce_scatter on dim 1 is rearranged through a copy of its
// input (512 bytes) while it runs: 128 + 512 = 640. A bf16 all_reduce sums
// in f32 (2 x 64 elements x 4 bytes = 512) beside its 128-byte result and
// the returned scatter: 768, the peak; with the 640 bytes of inputs, 1408.
dist.mesh @mesh(tp = 4)
func.func @forward(%x: tensor<8x16xf32> {nn.input = "x"}, %h: tensor<4x16xbf16> {nn.input = "h"}) -> (tensor<8x4xf32> {nn.output = "y"}, tensor<4x16xbf16> {nn.output = "z"}) {
  %s = dist.reduce_scatter %x on @mesh[tp] sum dim 1 : tensor<8x16xf32> -> tensor<8x4xf32>
  %r = dist.all_reduce %h on @mesh[tp] sum : tensor<4x16xbf16> -> tensor<4x16xbf16>
  return %s, %r : tensor<8x4xf32>, tensor<4x16xbf16>
}

// CHECK:      inputs                                          640
// CHECK:      activations and temporaries, peak               768
// CHECK-NEXT: estimated peak                                 1408

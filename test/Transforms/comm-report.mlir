// RUN: fsdp-opt %s -fsdp-comm-report -o /dev/null | FileCheck %s
// RUN: fsdp-opt %s -fsdp-comm-report="format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: not fsdp-opt %s -fsdp-comm-report="format=xml" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// fsdp-comm-report counts, per collective kind and mesh-axis group, the
// calls and the bytes one rank sends, with the runtime's convention: an
// all_gather sends its input to n - 1 peers, a reduce_scatter (n - 1)/n of
// it, an all_reduce 2(n - 1)/n, a permute all of it. Here dp_shard = 2 and
// tp = 4; the bf16 gather counts 2 bytes an element.

dist.mesh @mesh(dp_shard = 2, tp = 4)
func.func @forward(%x: tensor<8x16xf32> {nn.input = "x"}, %w: tensor<4x16xbf16> {nn.param = "w"}) -> (tensor<8x16xf32> {nn.output = "y"}) {
  // 4x16 bf16 = 128 bytes, to 1 peer: 128.
  %g = dist.all_gather %w on @mesh[dp_shard] dim 0 : tensor<4x16xbf16> -> tensor<8x16xbf16>
  %c = nn.cast %g to f32 : tensor<8x16xbf16> -> tensor<8x16xf32>
  %y0 = nn.add %x, %c : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  // 512 bytes: 2 * 3/4 of it = 768.
  %r = dist.all_reduce %y0 on @mesh[tp] sum : tensor<8x16xf32> -> tensor<8x16xf32>
  // 3/4 of 512 = 384.
  %s = dist.reduce_scatter %r on @mesh[tp] sum dim 0 : tensor<8x16xf32> -> tensor<2x16xf32>
  // 128 bytes to 3 peers = 384.
  %a = dist.all_gather %s on @mesh[tp] dim 0 : tensor<2x16xf32> -> tensor<8x16xf32>
  // All of 512.
  %p = dist.permute %a on @mesh[dp_shard, tp] offset 1 : tensor<8x16xf32> -> tensor<8x16xf32>
  return %p : tensor<8x16xf32>
}

// CHECK:      collective       group             calls     bytes sent
// CHECK-NEXT: all_gather       {dp_shard}            1            128
// CHECK-NEXT: all_gather       {tp}                  1            384
// CHECK-NEXT: reduce_scatter   {tp}                  1            384
// CHECK-NEXT: all_reduce       {tp}                  1            768
// CHECK-NEXT: permute          {dp_shard,tp}          1            512

// JSON: "bytes": 128,
// JSON-NEXT: "calls": 1,
// JSON-NEXT: "group": "{dp_shard}",
// JSON-NEXT: "kind": "all_gather"
// JSON: "total_bytes": 2176

// BAD: for the --format option: Cannot find option named 'xml'!

// RUN: fsdp-opt %s -split-input-file -fsdp-simulate="hardware=%S/Inputs/test-gpu.json" -o /dev/null | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-simulate="hardware=%S/Inputs/test-gpu.json format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// fsdp-simulate replays one rank's step on a compute stream and a stream per
// group. The test GPU (Inputs/test-gpu.json) has round numbers: f32 matmuls
// at 5e11 x 0.5 FLOP/s, bf16 attention at 1e12 x 0.5 forward, memory at
// 1e11 B/s, 4 GPUs per node; NVLink rings at 1e10 B/s (all-reduce 2e10)
// and 1e-5 s a step, the network at 1e9 B/s per NIC and 1e-4 s a step.

// An async all-gather over tp (4 ranks on one node) hides behind a matmul:
// the gather takes 3 x 1e-5 + 4 MiB x 3/4 / 1e10 = 0.345 ms, the matmul
// 2 x 256 x 1024 x 1024 / 2.5e11 = 2.147 ms, then the add streams 12 MiB
// in 0.126 ms. Nothing is exposed.
dist.mesh @mesh(dp = 2, tp = 4)
func.func @forward(%x: tensor<256x1024xf32>, %w: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %f = dist.all_gather %x on @mesh[tp] dim 0 : tensor<256x1024xf32> -> !dist.future<tensor<1024x1024xf32>>
  %y = nn.matmul %x, %w : (tensor<256x1024xf32>, tensor<1024x1024xf32>) -> tensor<256x1024xf32>
  %g = dist.wait %f : !dist.future<tensor<1024x1024xf32>>
  %z = nn.add %g, %g : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %z : tensor<1024x1024xf32>
}
// CHECK-LABEL: simulated step on test GPU, rank 0 of 8
// CHECK-NEXT:  step time                    2.273 ms
// CHECK-NEXT:  compute: matmul              2.147 ms
// CHECK-NEXT:  compute: attention           0.000 ms
// CHECK-NEXT:  compute: memory-bound ops    0.126 ms
// CHECK-NEXT:  exposed communication        0.000 ms
// CHECK-NEXT:  model FLOPs per rank         5.369e+08
// CHECK:       group     link      calls   busy ms   exposed ms
// CHECK-NEXT:  {tp}      NVLink    1       0.345     0.000
// JSON: "exposed_communication_s": 0,

// -----

// The same gather, synchronous: the compute stream waits 0.345 ms for it.
dist.mesh @mesh(dp = 2, tp = 4)
func.func @forward(%x: tensor<256x1024xf32>, %w: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %g = dist.all_gather %x on @mesh[tp] dim 0 : tensor<256x1024xf32> -> tensor<1024x1024xf32>
  %y = nn.matmul %x, %w : (tensor<256x1024xf32>, tensor<1024x1024xf32>) -> tensor<256x1024xf32>
  %z = nn.add %g, %g : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %z : tensor<1024x1024xf32>
}
// CHECK-LABEL: simulated step on test GPU, rank 0 of 8
// CHECK-NEXT:  step time                    2.618 ms
// CHECK:       exposed communication        0.345 ms
// CHECK:       {tp}      NVLink    1       0.345     0.345

// -----

// Placement and algorithms. dp's ranks {0, 4} sit on two nodes, one per
// node: its reduce-scatter of 4 MiB crosses the network at 1e9 B/s,
// 1e-4 + 2 MiB / 1e9 = 2.197 ms. Over tp, a 4 MiB all-reduce takes the
// ring (2 x 3 x 1e-5 + 2 x 3 MiB / 2e10 = 0.375 ms; the tree, 0.459 ms),
// a 16-byte one the tree (2 x 2 x 1e-5 = 0.040 ms; the ring, 0.060 ms).
dist.mesh @mesh(dp = 2, tp = 4)
func.func @forward(%x: tensor<1024x1024xf32>, %s: tensor<4xf32>) -> (tensor<512x1024xf32>, tensor<1024x1024xf32>, tensor<4xf32>) {
  %r = dist.reduce_scatter %x on @mesh[dp] sum dim 0 : tensor<1024x1024xf32> -> tensor<512x1024xf32>
  %a = dist.all_reduce %x on @mesh[tp] sum : tensor<1024x1024xf32> -> tensor<1024x1024xf32>
  %b = dist.all_reduce %s on @mesh[tp] sum : tensor<4xf32> -> tensor<4xf32>
  return %r, %a, %b : tensor<512x1024xf32>, tensor<1024x1024xf32>, tensor<4xf32>
}
// CHECK-LABEL: simulated step on test GPU, rank 0 of 8
// CHECK-NEXT:  step time                    2.612 ms
// CHECK:       {dp}      network, 1 per node     1       2.197     2.197
// CHECK-NEXT:  {tp}      NVLink                  2       0.415     0.415

// -----

// Causal bf16 attention on one rank (no mesh): 1024 x 1025 / 2 of the
// (query, key) pairs per head, 2 x 8 heads x 524800 x (64 + 64) = 1.075e9
// FLOPs in 2.150 ms. Model FLOPs credit no mask (2.147e9), so MFU is
// 2.147e9 / 2.150 ms / 1e12.
func.func @forward(%q: tensor<1x1024x8x64xbf16>, %k: tensor<1x1024x8x64xbf16>, %v: tensor<1x1024x8x64xbf16>) -> tensor<1x1024x8x64xbf16> {
  %o, %o_lse = nn.attention %q, %k, %v {causal} : (tensor<1x1024x8x64xbf16>, tensor<1x1024x8x64xbf16>, tensor<1x1024x8x64xbf16>) -> (tensor<1x1024x8x64xbf16>, tensor<1x8x1024xf32>)
  return %o : tensor<1x1024x8x64xbf16>
}
// CHECK-LABEL: simulated step on test GPU, rank 0 of 1
// CHECK-NEXT:  step time                    2.150 ms
// CHECK:       compute: attention           2.150 ms
// CHECK:       model FLOPs per rank         2.147e+09
// CHECK-NEXT:  MFU (vs bf16 dense peak)     99.9%

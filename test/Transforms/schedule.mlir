// RUN: fsdp-opt %s -fsdp-schedule="forward-depth=1 backward-depth=1" 2>/dev/null | FileCheck %s --check-prefix=D1
// RUN: fsdp-opt %s -fsdp-schedule="forward-depth=2 backward-depth=2" 2>/dev/null | FileCheck %s --check-prefix=D2
// RUN: fsdp-opt %s -fsdp-schedule="forward-depth=0 backward-depth=0 overlap-gradient-sync=false" 2>/dev/null | FileCheck %s --check-prefix=D0
// RUN: fsdp-opt %s -fsdp-schedule 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// Three layer units gathered in the forward, two re-gathered in the
// backward (in backward order), and a gradient reduce-scatter followed by
// a rearrangement (a scale) and an independent op.

dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 1)

func.func @forward(%x: tensor<2x8xf32>, %w0: tensor<1x8xf32>, %w1: tensor<1x8xf32>, %w2: tensor<1x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %g0 = dist.all_gather %w0 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.0", fsdp.reshard} : tensor<1x8xf32> -> tensor<2x8xf32>
  %h0 = nn.add %x, %g0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g1 = dist.all_gather %w1 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.1", fsdp.reshard} : tensor<1x8xf32> -> tensor<2x8xf32>
  %h1 = nn.add %h0, %g1 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g2 = dist.all_gather %w2 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.2"} : tensor<1x8xf32> -> tensor<2x8xf32>
  %h2 = nn.add %h1, %g2 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %b1 = dist.all_gather %w1 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.1", fsdp.regather} : tensor<1x8xf32> -> tensor<2x8xf32>
  %k1 = nn.mul %h2, %b1 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %b0 = dist.all_gather %w0 on @mesh[dp_shard] dim 0 {fsdp.unit = "model.layers.0", fsdp.regather} : tensor<1x8xf32> -> tensor<2x8xf32>
  %k0 = nn.mul %k1, %b0 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = dist.reduce_scatter %k0 on @mesh[dp_shard] sum dim 0 : tensor<2x8xf32> -> tensor<1x8xf32>
  %s = nn.scale %r by 2.0 : tensor<1x8xf32>
  %n = nn.neg %x : tensor<2x8xf32>
  %u = nn.add %w0, %s : (tensor<1x8xf32>, tensor<1x8xf32>) -> tensor<1x8xf32>
  %o = nn.add %n, %u : (tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  return %o, %k0 : tensor<2x8xf32>, tensor<2x8xf32>
}

// Depth 1: unit j's gather starts when unit j-1's compute starts (after
// its wait); unit 0's where it stood. The backward chain likewise; the
// reduce-scatter's wait and the scale move below the independent neg.
// D1:      %[[F0:.+]] = dist.all_gather %arg1 {{.*}}"model.layers.0"{{.*}} -> !dist.future
// D1-NEXT: %[[G0:.+]] = dist.wait %[[F0]]
// D1-NEXT: %[[F1:.+]] = dist.all_gather %arg2 {{.*}}"model.layers.1"{{.*}} -> !dist.future
// D1-NEXT: nn.add %arg0, %[[G0]]
// D1-NEXT: %[[G1:.+]] = dist.wait %[[F1]]
// D1-NEXT: %[[F2:.+]] = dist.all_gather %arg3 {{.*}}"model.layers.2"{{.*}} -> !dist.future
// D1-NEXT: nn.add
// D1-NEXT: dist.wait %[[F2]]
// D1-NEXT: nn.add
// D1-NEXT: %[[B1:.+]] = dist.all_gather %arg2 {{.*}}fsdp.regather{{.*}} -> !dist.future
// D1-NEXT: %[[W1:.+]] = dist.wait %[[B1]]
// D1-NEXT: %[[B0:.+]] = dist.all_gather %arg1 {{.*}}fsdp.regather{{.*}} -> !dist.future
// D1-NEXT: nn.mul {{.*}}, %[[W1]]
// D1-NEXT: dist.wait %[[B0]]
// D1-NEXT: nn.mul
// D1-NEXT: %[[R:.+]] = dist.reduce_scatter {{.*}} -> !dist.future
// D1-NEXT: nn.neg
// D1-NEXT: %[[RW:.+]] = dist.wait %[[R]]
// D1-NEXT: nn.scale %[[RW]]
// D1-NEXT: nn.add

// Depth 2: unit 0's compute starts with the gathers of units 1 and 2.
// D2:      dist.wait
// D2-NEXT: dist.all_gather %arg2 {{.*}}"model.layers.1"{{.*}} -> !dist.future
// D2-NEXT: dist.all_gather %arg3 {{.*}}"model.layers.2"{{.*}} -> !dist.future
// D2-NEXT: nn.add %arg0

// Depth 0 and no gradient overlap: nothing changes.
// D0-NOT: dist.wait
// D0-NOT: !dist.future

// REMARK: remark: fsdp-schedule: 3 all-gathers started ahead, 1 gradient syncs waited later, one in flight; 6 collectives over 1 groups

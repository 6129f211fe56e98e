// RUN: fsdp-opt %s -split-input-file | fsdp-opt -split-input-file | FileCheck %s
// Round trip of the mesh, the sharding attribute and every collective, sync
// and async, over one or several axes of a 2-D mesh.

// CHECK: dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 4)
dist.mesh @mesh(dp_replicate = 1, dp_shard = 2, cp = 1, tp = 4)

// Tests a sharding per tensor dim on an argument, a partial-sum sharding on
// a result, and a tensor-parallel style on an op.
// CHECK-LABEL: func.func @annotate
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, {{\[}}[dp_shard, tp], []]>}
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [], []], partial = [tp]>}
func.func @annotate(%w: tensor<64x32xf32> {dist.sharding = #dist.sharding<@mesh, [[dp_shard, tp], []]>}, %y: tensor<2x16x32xf32>)
    -> (tensor<64x32xf32>, tensor<2x16x32xf32> {dist.sharding = #dist.sharding<@mesh, [[], [], []], partial = [tp]>}) {
  // CHECK: nn.neg %{{.+}} {dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "model.*.proj">}
  %0 = nn.neg %w {dist.tp = #dist.tp<colwise, input = replicate, output = shard(-1), use_local_output = true, entry = "model.*.proj">} : tensor<64x32xf32>
  return %0, %y : tensor<64x32xf32>, tensor<2x16x32xf32>
}

// Tests the layout attribute on its own.
// CHECK-LABEL: func.func @layouts
// CHECK-SAME: layouts = [#dist.layout<replicate>, #dist.layout<shard(-1)>]
func.func @layouts() attributes {layouts = [#dist.layout<replicate>, #dist.layout<shard(-1)>]} {
  return
}

// Tests the synchronous collectives.
// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<8x32xf32>, %kv: tensor<2x8x4x16xbf16>) {
  // CHECK: dist.all_gather %{{.+}} on @mesh[dp_shard] dim 0 : tensor<8x32xf32> -> tensor<16x32xf32>
  %0 = dist.all_gather %x on @mesh[dp_shard] dim 0 : tensor<8x32xf32> -> tensor<16x32xf32>
  // CHECK: dist.all_gather %{{.+}} on @mesh[dp_shard, tp] dim 1 : tensor<8x32xf32> -> tensor<8x256xf32>
  %1 = dist.all_gather %x on @mesh[dp_shard, tp] dim 1 : tensor<8x32xf32> -> tensor<8x256xf32>
  // CHECK: dist.reduce_scatter %{{.+}} on @mesh[tp] sum dim 1 : tensor<8x32xf32> -> tensor<8x8xf32>
  %2 = dist.reduce_scatter %x on @mesh[tp] sum dim 1 : tensor<8x32xf32> -> tensor<8x8xf32>
  // CHECK: dist.reduce_scatter %{{.+}} on @mesh[dp_shard, tp] avg dim 0 : tensor<8x32xf32> -> tensor<1x32xf32>
  %3 = dist.reduce_scatter %x on @mesh[dp_shard, tp] avg dim 0 : tensor<8x32xf32> -> tensor<1x32xf32>
  // CHECK: dist.all_reduce %{{.+}} on @mesh[tp] sum : tensor<8x32xf32> -> tensor<8x32xf32>
  %4 = dist.all_reduce %x on @mesh[tp] sum : tensor<8x32xf32> -> tensor<8x32xf32>
  // CHECK: dist.all_reduce %{{.+}} on @mesh[dp_replicate, dp_shard] max : tensor<8x32xf32> -> tensor<8x32xf32>
  %5 = dist.all_reduce %x on @mesh[dp_replicate, dp_shard] max : tensor<8x32xf32> -> tensor<8x32xf32>
  // CHECK: dist.all_to_all %{{.+}} on @mesh[tp] split 2 concat 1 : tensor<2x8x4x16xbf16> -> tensor<2x32x1x16xbf16>
  %6 = dist.all_to_all %kv on @mesh[tp] split 2 concat 1 : tensor<2x8x4x16xbf16> -> tensor<2x32x1x16xbf16>
  // CHECK: dist.permute %{{.+}} on @mesh[tp] offset -1 : tensor<2x8x4x16xbf16> -> tensor<2x8x4x16xbf16>
  %7 = dist.permute %kv on @mesh[tp] offset -1 : tensor<2x8x4x16xbf16> -> tensor<2x8x4x16xbf16>
  // CHECK: dist.broadcast %{{.+}} on @mesh[dp_shard] root 1 : tensor<8x32xf32> -> tensor<8x32xf32>
  %8 = dist.broadcast %x on @mesh[dp_shard] root 1 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// Tests the variable-split all-to-all: the counts are exchanged on the
// device by an all_to_all, and the rows by all_to_all_v, into a result
// whose rows bound what may arrive; sync and async.
// CHECK-LABEL: func.func @all_to_all_v
func.func @all_to_all_v(%x: tensor<8x32xf32>, %send: tensor<4xi64>) -> (tensor<32x32xf32>, tensor<32x32xf32>) {
  // CHECK: %[[RECV:.+]] = dist.all_to_all %{{.+}} on @mesh[tp] split 0 concat 0 : tensor<4xi64> -> tensor<4xi64>
  %recv = dist.all_to_all %send on @mesh[tp] split 0 concat 0 : tensor<4xi64> -> tensor<4xi64>
  // CHECK: dist.all_to_all_v %{{.+}} on @mesh[tp] counts(%{{.+}}, %[[RECV]] : tensor<4xi64>) : tensor<8x32xf32> -> tensor<32x32xf32>
  %y = dist.all_to_all_v %x on @mesh[tp] counts(%send, %recv : tensor<4xi64>) : tensor<8x32xf32> -> tensor<32x32xf32>
  // CHECK: %[[F:.+]] = dist.all_to_all_v %{{.+}} on @mesh[tp] counts(%{{.+}}, %[[RECV]] : tensor<4xi64>) : tensor<8x32xf32> -> !dist.future<tensor<32x32xf32>>
  %f = dist.all_to_all_v %x on @mesh[tp] counts(%send, %recv : tensor<4xi64>) : tensor<8x32xf32> -> !dist.future<tensor<32x32xf32>>
  %z = dist.wait %f : !dist.future<tensor<32x32xf32>>
  return %y, %z : tensor<32x32xf32>, tensor<32x32xf32>
}

// Tests the asynchronous form: the collective returns a future, dist.wait
// yields the tensor.
// CHECK-LABEL: func.func @async
func.func @async(%x: tensor<8x32xf32>) -> (tensor<16x32xf32>, tensor<8x32xf32>) {
  // CHECK: %[[F:.+]] = dist.all_gather %{{.+}} on @mesh[dp_shard] dim 0 : tensor<8x32xf32> -> !dist.future<tensor<16x32xf32>>
  %f = dist.all_gather %x on @mesh[dp_shard] dim 0 : tensor<8x32xf32> -> !dist.future<tensor<16x32xf32>>
  // CHECK: %[[G:.+]] = dist.reduce_scatter %{{.+}} on @mesh[tp] sum dim 1 : tensor<8x32xf32> -> !dist.future<tensor<8x8xf32>>
  %g = dist.reduce_scatter %x on @mesh[tp] sum dim 1 : tensor<8x32xf32> -> !dist.future<tensor<8x8xf32>>
  // CHECK: %[[R:.+]] = dist.all_reduce %{{.+}} on @mesh[tp] avg : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  %r = dist.all_reduce %x on @mesh[tp] avg : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  // CHECK: %[[P:.+]] = dist.permute %{{.+}} on @mesh[tp] offset 1 : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  %p = dist.permute %x on @mesh[tp] offset 1 : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  // CHECK: dist.wait %[[F]] : !dist.future<tensor<16x32xf32>>
  %0 = dist.wait %f : !dist.future<tensor<16x32xf32>>
  // CHECK: dist.wait %[[G]] : !dist.future<tensor<8x8xf32>>
  %1 = dist.wait %g : !dist.future<tensor<8x8xf32>>
  // CHECK: dist.wait %[[R]] : !dist.future<tensor<8x32xf32>>
  %2 = dist.wait %r : !dist.future<tensor<8x32xf32>>
  // CHECK: dist.wait %[[P]] : !dist.future<tensor<8x32xf32>>
  %3 = dist.wait %p : !dist.future<tensor<8x32xf32>>
  return %0, %2 : tensor<16x32xf32>, tensor<8x32xf32>
}

// -----

// Tests that axis names may need quoting and a mesh may be 1-D.
// CHECK: dist.mesh @world(ranks = 4)
dist.mesh @world(ranks = 4)
// CHECK-LABEL: func.func @one_d
func.func @one_d(%x: tensor<4xf32>) -> tensor<16xf32> {
  // CHECK: dist.all_gather %{{.+}} on @world[ranks] dim 0 : tensor<4xf32> -> tensor<16xf32>
  %0 = dist.all_gather %x on @world[ranks] dim 0 : tensor<4xf32> -> tensor<16xf32>
  return %0 : tensor<16xf32>
}

// -----

// Tests FSDP2's flattened views: a collective over a view is a collective
// over its axes.
// CHECK: dist.mesh @hsdp(dp_replicate = 2, dp_shard = 2, cp = 1, tp = 2) {views = {dp = ["dp_replicate", "dp_shard"], dp_cp = ["dp_replicate", "dp_shard", "cp"], dp_shard_cp = ["dp_shard", "cp"]}}
dist.mesh @hsdp(dp_replicate = 2, dp_shard = 2, cp = 1, tp = 2) {views = {dp = ["dp_replicate", "dp_shard"], dp_shard_cp = ["dp_shard", "cp"], dp_cp = ["dp_replicate", "dp_shard", "cp"]}}
// CHECK-LABEL: func.func @views
func.func @views(%x: tensor<8x4xf32>) -> tensor<2x4xf32> {
  // CHECK: dist.reduce_scatter %{{.+}} on @hsdp[dp] sum dim 0 : tensor<8x4xf32> -> tensor<2x4xf32>
  %0 = dist.reduce_scatter %x on @hsdp[dp] sum dim 0 : tensor<8x4xf32> -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Tests Megatron's f: an identity on the way into per-rank computation.
dist.mesh @tpmesh(tp = 2)
// CHECK-LABEL: func.func @copy
func.func @copy(%x: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  // CHECK: dist.copy %{{.+}} on @tpmesh[tp] : tensor<2x16x64xf32>
  %0 = dist.copy %x on @tpmesh[tp] : tensor<2x16x64xf32>
  return %0 : tensor<2x16x64xf32>
}

// -----

// The rank's block of a replicated value, the rank's index in a group, and a
// strided sharding.
dist.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @local_ops(
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, {{\[}}[], [tp]], groups = [1, 3]>}
func.func @local_ops(%x: tensor<4x6xf32>, %w: tensor<8x12xf32> {dist.sharding = #dist.sharding<@mesh, [[], [tp]], groups = [1, 3]>}) {
  // CHECK: dist.all_slice %{{.+}} on @mesh[tp] slice_dim = 1 : tensor<4x6xf32> -> tensor<4x3xf32>
  %0 = dist.all_slice %x on @mesh[tp] slice_dim = 1 : tensor<4x6xf32> -> tensor<4x3xf32>
  // CHECK: dist.axis_index @mesh[tp] : tensor<i64>
  %1 = dist.axis_index @mesh[tp] : tensor<i64>
  // CHECK: dist.all_gather %{{.+}} on @mesh[tp] dim 1 replicated_grad : tensor<4x3xf32> -> tensor<4x6xf32>
  %2 = dist.all_gather %0 on @mesh[tp] dim 1 replicated_grad : tensor<4x3xf32> -> tensor<4x6xf32>
  return
}

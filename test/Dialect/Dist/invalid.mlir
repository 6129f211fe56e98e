// RUN: fsdp-opt %s -split-input-file -verify-diagnostics
// The mesh, the sharding attribute and every collective reject bad IR with a
// message naming the axis, dim or size at fault.

// expected-error @+1 {{'dist.mesh' op has axis 'tp' more than once}}
dist.mesh @mesh(tp = 2, tp = 2)

// -----

// expected-error @+1 {{'dist.mesh' op axis 'dp' has size 0, expected >= 1}}
dist.mesh @mesh(dp = 0)

// -----

// A function argument's dist.sharding must fit the argument and the mesh.
dist.mesh @mesh(dp = 2, tp = 2)
// expected-error @+1 {{'func.func' op argument #0: mesh 'mesh' has no axis 'cp'}}
func.func @sharding_unknown_axis(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [[cp], []]>}) {
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 2)
// expected-error @+1 {{'func.func' op argument #0: sharding has 1 dims but the tensor 'tensor<4x4xf32>' has rank 2}}
func.func @sharding_rank(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [[dp]]>}) {
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 2)
// expected-error @+1 {{mesh axis 'tp' is used more than once}}
func.func @sharding_axis_twice(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [[tp], []], partial = [tp]>}) {
  return
}

// -----

// expected-error @+1 {{'func.func' op result #0: 'nowhere' does not name a dist.mesh}}
func.func @sharding_no_mesh(%x: tensor<4x4xf32>) -> (tensor<4x4xf32> {dist.sharding = #dist.sharding<@nowhere, [[], []]>}) {
  return %x : tensor<4x4xf32>
}

// -----

// The dist dialect's attributes are verified where they stand.
// expected-error @+1 {{'func.func' op has 'dist.shard' on argument #0, which is not a dist attribute of a value}}
func.func @misspelt_arg_attr(%x: tensor<4x4xf32> {dist.shard = 1}) {
  return
}

// -----

func.func @tp_not_a_style(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'nn.linear' op has a 'dist.tp' that is not a #dist.tp style: {style = "colwise"}}}
  %y = nn.linear %x, %w {dist.tp = {style = "colwise"}} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

func.func @tp_bad_layout(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{expected a tp layout, 'replicate' or 'shard(d)', got 'sharded'}}
  %y = nn.linear %x, %w {dist.tp = #dist.tp<colwise, input = replicate, output = sharded(1), use_local_output = true, entry = "proj">} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

func.func @tp_layout_dim_not_integer(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{expected integer value}}
  %y = nn.linear %x, %w {dist.tp = #dist.tp<colwise, input = replicate, output = shard(last), use_local_output = true, entry = "proj">} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
  %y = nn.neg %x {dist.layout = #dist.layout<replicate>, other = #dist.layout<shard(0)>, bad = #dist.layout<replicate>} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @tp_unknown_style(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+2 {{expected one of [colwise, rowwise, sequence_parallel] for a tensor-parallel style, got: diagonal}}
  // expected-error @+1 {{failed to parse Dist_TPStyleAttr parameter 'kind'}}
  %y = nn.linear %x, %w {dist.tp = #dist.tp<diagonal, input = replicate, output = replicate, use_local_output = true, entry = "proj">} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

func.func @unknown_dist_attr(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'nn.neg' op has 'dist.tpp', which is not a dist attribute of an op}}
  %y = nn.neg %x {dist.tpp = 1} : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_shape(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op result shape 'tensor<8x64xf32>' does not match the expected 'tensor<8x128xf32>' for a group of the given mesh axes}}
  %0 = dist.all_gather %x on @mesh[tp] dim 1 : tensor<8x32xf32> -> tensor<8x64xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_dim(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op gather_dim 2 is out of range for rank 2}}
  %0 = dist.all_gather %x on @mesh[tp] dim 2 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_unknown_axis(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op mesh 'mesh' has no axis 'cp'}}
  %0 = dist.all_gather %x on @mesh[cp] dim 0 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// -----

func.func @all_gather_no_mesh(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op 'mesh' does not name a dist.mesh}}
  %0 = dist.all_gather %x on @mesh[tp] dim 0 : tensor<8x32xf32> -> tensor<16x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_axis_twice(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op mesh axis 'tp' is listed twice}}
  %0 = dist.all_gather %x on @mesh[tp, tp] dim 0 : tensor<8x32xf32> -> tensor<128x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_no_axes(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op needs at least one mesh axis}}
  %0 = dist.all_gather %x on @mesh[] dim 0 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_gather_dtype(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op result element type 'bf16' differs from the input's 'f32'}}
  %0 = dist.all_gather %x on @mesh[dp] dim 0 : tensor<8x32xf32> -> tensor<16x32xbf16>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @reduce_scatter_divide(%x: tensor<6x32xf32>) {
  // expected-error @+1 {{'dist.reduce_scatter' op dim 0 of size 6 does not divide by the group size 4}}
  %0 = dist.reduce_scatter %x on @mesh[tp] sum dim 0 : tensor<6x32xf32> -> tensor<1x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @reduce_scatter_shape(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.reduce_scatter' op result shape 'tensor<8x32xf32>' does not match the expected 'tensor<1x32xf32>' for a group of the given mesh axes}}
  %0 = dist.reduce_scatter %x on @mesh[dp, tp] sum dim 0 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @reduce_scatter_kind(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{custom op 'dist.reduce_scatter' expected string or keyword containing one of the following enum values for attribute 'reduction' [sum, avg, max]}}
  %0 = dist.reduce_scatter %x on @mesh[tp] min dim 0 : tensor<8x32xf32> -> tensor<2x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_reduce_shape(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_reduce' op result shape 'tensor<8x8xf32>' does not match the expected 'tensor<8x32xf32>'}}
  %0 = dist.all_reduce %x on @mesh[tp] sum : tensor<8x32xf32> -> tensor<8x8xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_divide(%x: tensor<2x8x6x16xf32>) {
  // expected-error @+1 {{'dist.all_to_all' op dim 2 of size 6 does not divide by the group size 4}}
  %0 = dist.all_to_all %x on @mesh[tp] split 2 concat 1 : tensor<2x8x6x16xf32> -> tensor<2x32x1x16xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_v_counts(%x: tensor<8x16xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{'dist.all_to_all_v' op has 2 counts for a group of 4}}
  %0 = dist.all_to_all_v %x on @mesh[tp] counts(%c, %c : tensor<2xi64>) : tensor<8x16xf32> -> tensor<32x16xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_v_rows(%x: tensor<8x16xf32>, %c: tensor<4xi64>) {
  // expected-error @+1 {{'dist.all_to_all_v' op result shape 'tensor<32x8xf32>' does not match the expected 'tensor<32x16xf32>'}}
  %0 = dist.all_to_all_v %x on @mesh[tp] counts(%c, %c : tensor<4xi64>) : tensor<8x16xf32> -> tensor<32x8xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_v_scalar(%x: tensor<f32>, %c: tensor<4xi64>) {
  // expected-error @+1 {{'dist.all_to_all_v' op needs rows: its input has rank 0}}
  %0 = dist.all_to_all_v %x on @mesh[tp] counts(%c, %c : tensor<4xi64>) : tensor<f32> -> tensor<f32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_v_count_type(%x: tensor<8x16xf32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'dist.all_to_all_v' op operand #1 must be 1D tensor of 64-bit signless integer values}}
  %0 = dist.all_to_all_v %x on @mesh[tp] counts(%c, %c : tensor<4xi32>) : tensor<8x16xf32> -> tensor<32x16xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @all_to_all_shape(%x: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{'dist.all_to_all' op result shape 'tensor<2x8x4x16xf32>' does not match the expected 'tensor<2x32x1x16xf32>'}}
  %0 = dist.all_to_all %x on @mesh[tp] split 2 concat 1 : tensor<2x8x4x16xf32> -> tensor<2x8x4x16xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @permute_shape(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.permute' op result shape 'tensor<32x8xf32>' does not match the expected 'tensor<8x32xf32>'}}
  %0 = dist.permute %x on @mesh[tp] offset 1 : tensor<8x32xf32> -> tensor<32x8xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @broadcast_root(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.broadcast' op root 2 is outside the group of 2}}
  %0 = dist.broadcast %x on @mesh[dp] root 2 : tensor<8x32xf32> -> tensor<8x32xf32>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @future_not_waited(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_reduce' op future must be consumed by exactly one dist.wait}}
  %f = dist.all_reduce %x on @mesh[tp] sum : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @future_waited_twice(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_reduce' op future must be consumed by exactly one dist.wait}}
  %f = dist.all_reduce %x on @mesh[tp] sum : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  %0 = dist.wait %f : !dist.future<tensor<8x32xf32>>
  %1 = dist.wait %f : !dist.future<tensor<8x32xf32>>
  return
}

// -----

dist.mesh @mesh(dp = 2, tp = 4)
func.func @async_shape(%x: tensor<8x32xf32>) {
  // expected-error @+1 {{'dist.all_gather' op result shape 'tensor<8x32xf32>' does not match the expected 'tensor<16x32xf32>'}}
  %f = dist.all_gather %x on @mesh[dp] dim 0 : tensor<8x32xf32> -> !dist.future<tensor<8x32xf32>>
  %0 = dist.wait %f : !dist.future<tensor<8x32xf32>>
  return
}

// -----

func.func @wait_type(%f: !dist.future<tensor<8x32xf32>>) {
  // expected-error @+1 {{'dist.wait' op failed to verify that result is the future's value type}}
  %0 = "dist.wait"(%f) : (!dist.future<tensor<8x32xf32>>) -> tensor<4x32xf32>
  return
}

// -----

// expected-error @+1 {{'dist.mesh' op view 'dp' names "tp2", which is not an axis}}
dist.mesh @mesh(dp_shard = 2, tp = 2) {views = {dp = ["dp_shard", "tp2"]}}

// -----

// expected-error @+1 {{'dist.mesh' op view 'tp' has an axis's name}}
dist.mesh @mesh(dp_shard = 2, tp = 2) {views = {tp = ["dp_shard"]}}

// -----

dist.mesh @mesh(dp_replicate = 2, dp_shard = 2) {views = {dp = ["dp_replicate", "dp_shard"]}}
func.func @view_overlap(%x: tensor<8x4xf32>) {
  // expected-error @+1 {{'dist.all_reduce' op mesh axis 'dp_shard' is in the group twice (through a view)}}
  %0 = dist.all_reduce %x on @mesh[dp, dp_shard] sum : tensor<8x4xf32> -> tensor<8x4xf32>
  return
}

// -----

dist.mesh @mesh(tp = 2)
func.func @copy_unknown_axis(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dist.copy' op mesh 'mesh' has no axis 'dp'}}
  %0 = dist.copy %x on @mesh[dp] : tensor<4xf32>
  return
}

// -----

// all_slice keeps the rank's block: the dim must divide by the group.
dist.mesh @mesh(tp = 2)
func.func @all_slice_indivisible(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'dist.all_slice' op dim 0 of size 3 does not divide by the group size 2}}
  %0 = dist.all_slice %x on @mesh[tp] slice_dim = 0 : tensor<3x4xf32> -> tensor<1x4xf32>
  return
}

// -----

dist.mesh @mesh(tp = 2)
func.func @all_slice_result(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{'dist.all_slice' op result 'tensor<4x2xf32>' does not match the expected 'tensor<2x4xf32>'}}
  %0 = dist.all_slice %x on @mesh[tp] slice_dim = 0 : tensor<4x4xf32> -> tensor<4x2xf32>
  return
}

// -----

dist.mesh @mesh(tp = 2)
func.func @all_slice_dim(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{'dist.all_slice' op slice_dim 2 is out of range for rank 2}}
  %0 = dist.all_slice %x on @mesh[tp] slice_dim = 2 : tensor<4x4xf32> -> tensor<4x4xf32>
  return
}

// -----

dist.mesh @mesh(tp = 2)
func.func @axis_index_unknown_axis() {
  // expected-error @+1 {{'dist.axis_index' op mesh 'mesh' has no axis 'cp'}}
  %0 = dist.axis_index @mesh[cp] : tensor<i64>
  return
}

// -----

// A sharding's group counts come one per dim.
// expected-error @+1 {{groups has 1 counts for 2 dims}}
func.func private @bad_groups(tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [[], [tp]], groups = [3]>})

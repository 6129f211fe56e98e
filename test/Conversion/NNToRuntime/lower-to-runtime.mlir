// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime | fsdp-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPP
// fsdp-lower-to-runtime turns a per-rank program into the two functions of
// include/fsdp/Runtime/Program.h; every handle an op returns is released
// right after its last use.

// Tests a linear layer with a loss: declarations, op calls with their static
// result types and literals, results, and releases.
func.func @forward(%ids: tensor<2x4xi64> {nn.input = "input_ids"},
                   %labels: tensor<2x4xi64> {nn.input = "labels"},
                   %table: tensor<16x8xf32> {nn.param = "embed.weight", nn.init = #nn.init<normal, mean = 0.0, std = 0.02>},
                   %w: tensor<16x8xf32> {nn.param = "head.weight", nn.init = #nn.init<uniform, low = -0.5, high = 0.5>},
                   %b: tensor<16xf32> {nn.param = "head.bias"})
    -> (tensor<f32> {nn.output = "loss"}, tensor<2x4x16xf32> {nn.output = "logits"}) {
  %x = nn.embedding %table, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %logits = nn.linear %x, %w, %b : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
  %loss = nn.cross_entropy %logits, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
  return %loss, %logits : tensor<f32>, tensor<2x4x16xf32>
}
// CHECK: emitc.include "fsdp/Runtime/Program.h"
// CHECK-NOT: func.func
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK-SAME: (%[[P:.+]]: !emitc.ptr<!emitc.opaque<"fsdp_program">>)
// CHECK: %[[IDS:.+]] = call_opaque "fsdp_prog_arg"(%[[P]]) {args = [0 : index, #emitc.opaque<"0">]}
// CHECK: %[[LABELS:.+]] = call_opaque "fsdp_prog_arg"(%[[P]]) {args = [0 : index, #emitc.opaque<"1">]}
// CHECK: %[[TABLE:.+]] = call_opaque "fsdp_prog_arg"(%[[P]]) {args = [0 : index, #emitc.opaque<"2">]}
// CHECK: %[[X:.+]] = call_opaque "fsdp_op_embedding"(%[[P]], %[[TABLE]], %[[IDS]]) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 3, {2, 4, 8}}">, 1 : index, 2 : index, #emitc.opaque<"nullptr">]}
// CHECK: %[[LOGITS:.+]] = call_opaque "fsdp_op_linear"(%[[P]], %[[X]], %{{.+}}, %{{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 3, {2, 4, 16}}">, 1 : index, 2 : index, 3 : index]}
// CHECK-NEXT: call_opaque "fsdp_release"(%[[X]])
// CHECK: %[[LOSS:.+]] = call_opaque "fsdp_op_cross_entropy"(%[[P]], %[[LOGITS]], %[[LABELS]]) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 0, {}}">, 1 : index, 2 : index, #emitc.opaque<"-100">, #emitc.opaque<"FSDP_LOSS_MEAN">]}
// CHECK: call_opaque "fsdp_prog_result"(%[[P]], %[[LOSS]]) {args = [0 : index, #emitc.opaque<"0">, 1 : index]}
// CHECK-NEXT: call_opaque "fsdp_release"(%[[LOSS]])
// CHECK-NEXT: call_opaque "fsdp_prog_result"(%[[P]], %[[LOGITS]]) {args = [0 : index, #emitc.opaque<"1">, 1 : index]}
// CHECK-NEXT: call_opaque "fsdp_release"(%[[LOGITS]])
// CHECK-NEXT: return
// CHECK-LABEL: emitc.func @fsdp_program_describe
// CHECK: call_opaque "fsdp_prog_input"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22input_ids\22">, #emitc.opaque<"fsdp_type{FSDP_RT_I64, 2, {2, 4}}">]}
// CHECK-NEXT: call_opaque "fsdp_prog_input_range"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22input_ids\22">, #emitc.opaque<"16">]}
// CHECK: call_opaque "fsdp_prog_input_range"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22labels\22">, #emitc.opaque<"16">]}
// CHECK: call_opaque "fsdp_prog_param"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22embed.weight\22">, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {16, 8}}">, #emitc.opaque<"FSDP_INIT_NORMAL">, #emitc.opaque<"0">, #emitc.opaque<"0.02">]}
// CHECK: #emitc.opaque<"FSDP_INIT_UNIFORM">, #emitc.opaque<"-0.5">, #emitc.opaque<"0.5">
// CHECK: #emitc.opaque<"\22head.bias\22">, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 1, {16}}">, #emitc.opaque<"FSDP_INIT_ZEROS">
// CHECK: call_opaque "fsdp_prog_output_name"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22loss\22">]}
// CHECK: call_opaque "fsdp_prog_output_name"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22logits\22">]}

// CPP: #include "fsdp/Runtime/Program.h"
// CPP-LABEL: void fsdp_program_forward(
// CPP-SAME: fsdp_program* [[P:v[0-9]+]]) {
// CPP: fsdp_tensor* [[X:v[0-9]+]] = fsdp_op_embedding([[P]], fsdp_type{FSDP_RT_F32, 3, {2, 4, 8}}, {{v[0-9]+}}, {{v[0-9]+}}, nullptr);
// CPP: fsdp_op_linear([[P]], fsdp_type{FSDP_RT_F32, 3, {2, 4, 16}}, [[X]], {{v[0-9]+}}, {{v[0-9]+}});
// CPP-NEXT: fsdp_release([[X]]);
// CPP-LABEL: void fsdp_program_describe(
// CPP: fsdp_prog_param({{v[0-9]+}}, "embed.weight", fsdp_type{FSDP_RT_F32, 2, {16, 8}}, FSDP_INIT_NORMAL, 0, 0.02

// -----

// Tests the mesh, sync and async collectives with their axis masks, and the
// groups the description declares.
dist.mesh @mesh(dp = 2, tp = 2)
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"}) -> (tensor<8x8xf32> {nn.output = "y"}, tensor<4x8xf32> {nn.output = "z"}) {
  %f = dist.all_gather %x on @mesh[dp] dim 0 : tensor<4x8xf32> -> !dist.future<tensor<8x8xf32>>
  %s = dist.all_reduce %x on @mesh[dp, tp] avg : tensor<4x8xf32> -> tensor<4x8xf32>
  %y = dist.wait %f : !dist.future<tensor<8x8xf32>>
  %z = dist.reduce_scatter %s on @mesh[tp] sum dim 1 : tensor<4x8xf32> -> tensor<4x4xf32>
  %w = dist.all_gather %z on @mesh[tp] dim 1 : tensor<4x4xf32> -> tensor<4x8xf32>
  return %y, %w : tensor<8x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK: %[[F:.+]] = call_opaque "fsdp_op_all_gather_start"(%{{.+}}, %{{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {8, 8}}">, 1 : index, #emitc.opaque<"1u">, #emitc.opaque<"0">]} : {{.*}} -> !emitc.ptr<!emitc.opaque<"fsdp_future">>
// CHECK: %[[S:.+]] = call_opaque "fsdp_op_all_reduce"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {4, 8}}">, 1 : index, #emitc.opaque<"3u">, #emitc.opaque<"FSDP_REDUCE_AVG">]}
// CHECK: call_opaque "fsdp_wait"(%{{.+}}, %[[F]])
// CHECK-NOT: fsdp_release"(%[[F]])
// CHECK: call_opaque "fsdp_op_reduce_scatter"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {4, 4}}">, 1 : index, #emitc.opaque<"2u">, #emitc.opaque<"FSDP_REDUCE_SUM">, #emitc.opaque<"1">]}
// CHECK-LABEL: emitc.func @fsdp_program_describe
// CHECK: call_opaque "fsdp_prog_mesh_axis"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22dp\22">, #emitc.opaque<"2">]}
// CHECK: call_opaque "fsdp_prog_mesh_axis"(%{{.+}}) {args = [0 : index, #emitc.opaque<"\22tp\22">, #emitc.opaque<"2">]}
// CHECK: call_opaque "fsdp_prog_group"(%{{.+}}) {args = [0 : index, #emitc.opaque<"1u">]}
// CHECK: call_opaque "fsdp_prog_group"(%{{.+}}) {args = [0 : index, #emitc.opaque<"3u">]}
// CHECK: call_opaque "fsdp_prog_group"(%{{.+}}) {args = [0 : index, #emitc.opaque<"2u">]}
// CHECK-NOT: dist.mesh

// -----

// Tests all_to_all_v: the counts are tensor operands after the rows, before
// the group, as Collectives.def declares the call.
dist.mesh @mesh(ep = 2)
func.func @forward(%x: tensor<4x8xf32> {nn.input = "x"}, %send: tensor<2xi64> {nn.input = "counts"}) -> (tensor<8x8xf32> {nn.output = "y"}) {
  %recv = dist.all_to_all %send on @mesh[ep] split 0 concat 0 : tensor<2xi64> -> tensor<2xi64>
  %f = dist.all_to_all_v %x on @mesh[ep] counts(%send, %recv : tensor<2xi64>) : tensor<4x8xf32> -> !dist.future<tensor<8x8xf32>>
  %y = dist.wait %f : !dist.future<tensor<8x8xf32>>
  return %y : tensor<8x8xf32>
}
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK: %[[X:.+]] = call_opaque "fsdp_prog_arg"(%{{.+}}) {args = [0 : index, #emitc.opaque<"0">]}
// CHECK: %[[SEND:.+]] = call_opaque "fsdp_prog_arg"(%{{.+}}) {args = [0 : index, #emitc.opaque<"1">]}
// CHECK: %[[RECV:.+]] = call_opaque "fsdp_op_all_to_all"(%{{.+}}, %[[SEND]]) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_I64, 1, {2}}">, 1 : index, #emitc.opaque<"1u">, #emitc.opaque<"0">, #emitc.opaque<"0">]}
// CHECK: call_opaque "fsdp_op_all_to_all_v_start"(%{{.+}}, %[[X]], %[[SEND]], %[[RECV]]) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {8, 8}}">, 1 : index, 2 : index, 3 : index, #emitc.opaque<"1u">]}
// CPP: fsdp_op_all_to_all_v_start({{.+}}, fsdp_type{FSDP_RT_F32, 2, {8, 8}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, 1u)

// -----

// Tests the data-movement lowerings: split becomes slices, a 3-way concat one
// variadic call (no partial results), negative dims count from the end.
func.func @forward(%x: tensor<2x12xf32> {nn.input = "x"}) -> (tensor<2x12xf32> {nn.output = "y"}) {
  %a, %b, %c = nn.split %x dim -1 sizes [4, 4, 4] : tensor<2x12xf32> -> tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
  %y = nn.concat %c, %b, %a dim 1 : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x12xf32>
  return %y : tensor<2x12xf32>
}
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK: %[[A:.+]] = call_opaque "fsdp_op_slice"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 4}}">, 1 : index, #emitc.opaque<"1">, #emitc.opaque<"0">]}
// CHECK: %[[B:.+]] = call_opaque "fsdp_op_slice"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 4}}">, 1 : index, #emitc.opaque<"1">, #emitc.opaque<"4">]}
// CHECK: %[[C:.+]] = call_opaque "fsdp_op_slice"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 4}}">, 1 : index, #emitc.opaque<"1">, #emitc.opaque<"8">]}
// CHECK: call_opaque "fsdp_op_concat"(%{{.+}}, %[[C]], %[[B]], %[[A]]) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 12}}">, #emitc.opaque<"1">, #emitc.opaque<"3">, 1 : index, 2 : index, 3 : index]}
// CHECK-DAG: call_opaque "fsdp_release"(%[[C]])
// CHECK-DAG: call_opaque "fsdp_release"(%[[A]])

// -----

// Tests that a view lowers to the mask of its axes.
dist.mesh @mesh(dp_replicate = 2, dp_shard = 2, tp = 2) {views = {dp = ["dp_replicate", "dp_shard"]}}
func.func @forward(%x: tensor<8x4xf32> {nn.input = "x"}) -> (tensor<2x4xf32> {nn.output = "y"}) {
  %y = dist.reduce_scatter %x on @mesh[dp] sum dim 0 : tensor<8x4xf32> -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK: call_opaque "fsdp_op_reduce_scatter"({{.+}}) {args = [0 : index, #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 4}}">, 1 : index, #emitc.opaque<"3u">, #emitc.opaque<"FSDP_REDUCE_SUM">, #emitc.opaque<"0">]}

// -----

// Tests that dist.copy lowers to another reference to the same tensor.
dist.mesh @mesh(tp = 2)
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> (tensor<4xf32> {nn.output = "y"}) {
  %y = dist.copy %x on @mesh[tp] : tensor<4xf32>
  return %y : tensor<4xf32>
}
// CHECK-LABEL: emitc.func @fsdp_program_forward
// CHECK: %[[X:.+]] = call_opaque "fsdp_prog_arg"
// CHECK: %[[Y:.+]] = call_opaque "fsdp_retain"(%[[X]]) {args = [0 : index]}
// CHECK: call_opaque "fsdp_prog_result"(%{{.+}}, %[[Y]])
// CHECK: call_opaque "fsdp_release"(%[[Y]])

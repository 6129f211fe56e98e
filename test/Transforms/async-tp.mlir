// RUN: fsdp-opt %s -fsdp-async-tp="enable=true" 2>/dev/null | FileCheck %s
// RUN: fsdp-opt %s -fsdp-async-tp="enable=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK
// RUN: fsdp-opt %s -fsdp-async-tp 2>&1 | FileCheck %s --check-prefix=OFF
// fsdp-async-tp on tp = 2: a sequence all-gather read by two linears (q and
// k share it) becomes 2 ring steps: each multiplies the block held while a
// permute brings the other; one nn.roll joins the products in rank order. The reduce-scatter of a linear's rows becomes partial products
// added to a running sum passed on by a permute. An all-gather that no
// matmul reads stays whole. Without enable=true or the config's
// fsdp.async_tp nothing changes.

dist.mesh @mesh(dp_shard = 1, tp = 2)
func.func @forward(%x: tensor<2x4x8xf32>, %wq: tensor<6x8xf32>, %wk: tensor<6x8xf32>, %wo: tensor<8x6xf32>, %e: tensor<2x4x8xf32>) -> (tensor<2x8x6xf32>, tensor<2x4x8xf32>, tensor<2x8x8xf32>) {
  %g = dist.all_gather %x on @mesh[tp] dim 1 : tensor<2x4x8xf32> -> tensor<2x8x8xf32>
  %q = nn.linear %g, %wq {path = "model.layers.0.self_attn.q_proj"} : (tensor<2x8x8xf32>, tensor<6x8xf32>) -> tensor<2x8x6xf32>
  %k = nn.linear %g, %wk {path = "model.layers.0.self_attn.k_proj"} : (tensor<2x8x8xf32>, tensor<6x8xf32>) -> tensor<2x8x6xf32>
  %s = nn.add %q, %k : (tensor<2x8x6xf32>, tensor<2x8x6xf32>) -> tensor<2x8x6xf32>
  %o = nn.linear %s, %wo {path = "model.layers.0.self_attn.o_proj"} : (tensor<2x8x6xf32>, tensor<8x6xf32>) -> tensor<2x8x8xf32>
  %r = dist.reduce_scatter %o on @mesh[tp] sum dim 1 : tensor<2x8x8xf32> -> tensor<2x4x8xf32>
  %ge = dist.all_gather %e on @mesh[tp] dim 1 : tensor<2x4x8xf32> -> tensor<2x8x8xf32>
  return %s, %r, %ge : tensor<2x8x6xf32>, tensor<2x4x8xf32>, tensor<2x8x8xf32>
}
// REMARK: remark: fsdp-async-tp: 1 all-gathers and 1 reduce-scatters over tp decomposed into 2 async permutes overlapping their matmuls; 1 left whole
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[X:[^:]+]]: tensor<2x4x8xf32>
// One rank index serves every ring, at the top.
// CHECK-NEXT: %[[RANK:.+]] = dist.axis_index @mesh[tp]
// CHECK-NOT: dist.axis_index
// CHECK: %[[F:.+]] = dist.permute %[[X]] on @mesh[tp] offset -1 : tensor<2x4x8xf32> -> !dist.future<tensor<2x4x8xf32>>
// CHECK: %[[Q0:.+]] = nn.linear %[[X]], %{{.+}} {path = "model.layers.0.self_attn.q_proj"} : (tensor<2x4x8xf32>
// CHECK: %[[K0:.+]] = nn.linear %[[X]], %{{.+}} {path = "model.layers.0.self_attn.k_proj"}
// CHECK: %[[NEXT:.+]] = dist.wait %[[F]]
// CHECK: %[[Q1:.+]] = nn.linear %[[NEXT]], {{.*}}q_proj
// CHECK: %[[K1:.+]] = nn.linear %[[NEXT]], {{.*}}k_proj
// CHECK: nn.roll %[[Q0]], %[[Q1]] by %[[RANK]] dim 1 block 4 scale 1 offset 0 : (tensor<2x4x6xf32>, tensor<2x4x6xf32>, tensor<i64>) -> tensor<2x8x6xf32>
// CHECK: nn.roll %[[K0]], %[[K1]] by %[[RANK]] dim 1 block 4 scale 1 offset 0
// The reduce-scatter: step k takes block (rank - 1 - k) mod 2 of the
// linear's input rows (a one-block roll), so the rank's own block arrives
// summed.
// CHECK: %[[B0:.+]] = nn.roll %{{.+}} by %[[RANK]] dim 1 block 4 scale -1 offset 1 count 1 : (tensor<2x8x6xf32>, tensor<i64>) -> tensor<2x4x6xf32>
// CHECK: %[[P0:.+]] = nn.linear %[[B0]], {{.*}}o_proj
// CHECK: %[[SEND:.+]] = dist.permute %[[P0]] on @mesh[tp] offset 1 : tensor<2x4x8xf32> -> !dist.future
// CHECK: %[[B1:.+]] = nn.roll %{{.+}} by %[[RANK]] dim 1 block 4 scale -1 offset 2 count 1
// CHECK: %[[P1:.+]] = nn.linear %[[B1]], {{.*}}o_proj
// CHECK: %[[GOT:.+]] = dist.wait %[[SEND]]
// CHECK: %[[SUM:.+]] = nn.add %[[GOT]], %[[P1]]
// CHECK-NOT: dist.reduce_scatter
// CHECK: dist.all_gather %{{.+}} on @mesh[tp] dim 1 : tensor<2x4x8xf32> -> tensor<2x8x8xf32>
// CHECK: return {{.*}}%[[SUM]]

// OFF-NOT: dist.permute

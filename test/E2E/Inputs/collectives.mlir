// Every collective kind on a 2x2 mesh, one of them asynchronous, one over a
// view, one in bf16: the input of comm-report.test.
dist.mesh @mesh(dp = 2, tp = 2) {views = {all = ["dp", "tp"]}}
func.func @forward(%w: tensor<4x8xf32> {nn.param = "w", nn.init = #nn.init<normal, mean = 0.0, std = 1.0>})
    -> (tensor<4x8xf32> {nn.output = "g"}, tensor<4x16xf32> {nn.output = "h"}, tensor<4x8xbf16> {nn.output = "k"}) {
  %a = dist.all_gather %w on @mesh[dp] dim 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  %b = dist.reduce_scatter %a on @mesh[tp] sum dim 1 : tensor<8x8xf32> -> tensor<8x4xf32>
  %c = dist.all_reduce %b on @mesh[all] avg : tensor<8x4xf32> -> tensor<8x4xf32>
  %f = dist.permute %c on @mesh[tp] offset 1 : tensor<8x4xf32> -> !dist.future<tensor<8x4xf32>>
  %d = dist.wait %f : !dist.future<tensor<8x4xf32>>
  %e = dist.all_to_all %d on @mesh[dp] split 0 concat 1 : tensor<8x4xf32> -> tensor<4x8xf32>
  %g = dist.broadcast %e on @mesh[dp] root 1 : tensor<4x8xf32> -> tensor<4x8xf32>
  %h = dist.all_gather %w on @mesh[dp] dim 1 : tensor<4x8xf32> -> tensor<4x16xf32>
  %w16 = nn.cast %w to bf16 : tensor<4x8xf32> -> tensor<4x8xbf16>
  %k = dist.all_reduce %w16 on @mesh[tp] sum : tensor<4x8xbf16> -> tensor<4x8xbf16>
  return %g, %h, %k : tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x8xbf16>
}

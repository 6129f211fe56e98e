// Parameters held as blocks on a 2x2 mesh: w split on both dims, v's
// columns split over both axes (dp major). The input of sharded-init.test.
dist.mesh @mesh(dp = 2, tp = 2)
func.func @forward(%w: tensor<4x6xf32> {nn.param = "w", nn.init = #nn.init<normal, mean = 0.0, std = 1.0>, dist.sharding = #dist.sharding<@mesh, [[dp], [tp]]>},
                   %v: tensor<3x5xbf16> {nn.param = "v", nn.init = #nn.init<uniform, low = -1.0, high = 1.0>, dist.sharding = #dist.sharding<@mesh, [[], [dp, tp]]>})
    -> (tensor<4x6xf32> {nn.output = "w_block"}, tensor<3x5xbf16> {nn.output = "v_block"}) {
  return %w, %v : tensor<4x6xf32>, tensor<3x5xbf16>
}

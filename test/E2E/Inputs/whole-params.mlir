// The whole tensors of sharded-params.mlir on one rank.
func.func @forward(%w: tensor<8x12xf32> {nn.param = "w", nn.init = #nn.init<normal, mean = 0.0, std = 1.0>},
                   %v: tensor<3x20xbf16> {nn.param = "v", nn.init = #nn.init<uniform, low = -1.0, high = 1.0>})
    -> (tensor<8x12xf32> {nn.output = "w_whole"}, tensor<3x20xbf16> {nn.output = "v_whole"}) {
  return %w, %v : tensor<8x12xf32>, tensor<3x20xbf16>
}

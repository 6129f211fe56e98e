// RUN: fsdp-opt %s -split-input-file -fsdp-offload="enable=true" -verify-diagnostics | FileCheck %s
// fsdp-offload on a hand-written step: the parameter, its state and the
// step count move to the host; the parameter's forward read gets a device
// copy just before it; the updated gradient is copied to the host where it
// is produced, and the clip norm, the coefficient and the update run on the
// host. Without the option the pass follows the module's fsdp.offload.

// CHECK-LABEL: func.func @forward
// CHECK-SAME:  %[[X:[a-z0-9]+]]: tensor<4xf32> {nn.input = "x"}
// CHECK-SAME:  %[[STEP:[a-z0-9]+]]: tensor<f32> {fsdp.host, nn.input = "optimizer_step"}
// CHECK-SAME:  %[[P:[a-z0-9]+]]: tensor<4xf32> {fsdp.host, nn.param = "w"}
// CHECK-SAME:  %[[M:[a-z0-9]+]]: tensor<4xf32> {fsdp.host, nn.state = "w.exp_avg"}
// CHECK:       %[[D:.*]] = nn.to_device %[[P]] : tensor<4xf32>
// CHECK-NEXT:  %[[Y:.*]] = nn.mul %[[X]], %[[D]] : (
// CHECK-NEXT:  %[[G:.*]] = nn.add %[[Y]], %[[Y]] : (
// CHECK-NEXT:  %[[H:.*]] = nn.to_host %[[G]] : tensor<4xf32>
// CHECK-NEXT:  %[[SS:.*]] = nn.sum_squares %[[H]] {fsdp.host} :
// CHECK-NEXT:  %[[C:.*]] = nn.clip_coefficient %[[SS]] {fsdp.host, max_norm
// CHECK-NEXT:  nn.adamw %[[P]], %[[H]], %[[M]], %{{.*}}, %[[STEP]], %[[C]] {{{.*}}fsdp.host
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %y = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %g = nn.add %y, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %ss = nn.sum_squares %g : tensor<4xf32> -> tensor<f32>
  %c = nn.clip_coefficient %ss {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %c {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return %np, %nm, %nv : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A step without parameters has nothing to offload.
// expected-error @+1 {{has no parameters to offload (offload_policy)}}
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}) -> tensor<4xf32> {
  %y = nn.add %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// RUN: fsdp-opt %s -fsdp-simulate="hardware=%S/Inputs/test-gpu-offload.json" -o /dev/null | FileCheck %s
// RUN: not fsdp-opt %s -fsdp-simulate="hardware=%S/Inputs/test-gpu.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOLINK
// RUN: %python -c "import json, sys; d = json.load(open(sys.argv[1])); del d['host_cpu']; json.dump(d, open(sys.argv[2], 'w'))" %S/Inputs/test-gpu-offload.json %t.json
// RUN: not fsdp-opt %s -fsdp-simulate="hardware=%t.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOCPU
// CPU offload on the simulator's GPU: a placement copy moves its tensor over
// the host link once (1e-5 s + bytes / 1e9 B/s), an op placed on the host
// (fsdp.host) streams its bytes over it, except the optimizer and the
// squared sums, which stream theirs through the host's memory on its cores
// (1e-5 s + bytes / 1e10 B/s), and device ops run as before.
// 4 MiB to the device: 4.204 ms; the add on the device streams 12 MiB at
// 1e11 B/s: 0.126 ms; back to the host: 4.204 ms; the host mul streams
// 12 MiB over the link: 12.593 ms; the host sum_squares reads 4 MiB and
// writes 4 bytes on the cores: 0.429 ms. Step 21.557 ms, 21.002 ms of it on
// the host link and 0.429 ms on the host's cores (fsdp-offload's default
// optimizer=cpu, recorded on the module).
module attributes {fsdp.offload_optimizer = "cpu"} {
func.func @forward(%p: tensor<1024x1024xf32> {fsdp.host}) -> (tensor<1024x1024xf32>, tensor<f32>) {
  %d = nn.to_device %p : tensor<1024x1024xf32>
  %a = nn.add %d, %d : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %h = nn.to_host %a : tensor<1024x1024xf32>
  %m = nn.mul %p, %h {fsdp.host} : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %s = nn.sum_squares %m {fsdp.host} : tensor<1024x1024xf32> -> tensor<f32>
  return %m, %s : tensor<1024x1024xf32>, tensor<f32>
}
}
// CHECK-LABEL: simulated step on test GPU with a host link, rank 0 of 1
// CHECK-NEXT:  step time                    21.557 ms
// CHECK:       compute: memory-bound ops    0.126 ms
// CHECK-NEXT:  CPU offload: host link       21.002 ms
// CHECK-NEXT:  CPU offload: host cores      0.429 ms

// NOLINK: error: 'nn.to_device' op is placed in host memory (offload_policy), but the hardware model '{{.*}}test-gpu.json' has no host_link
// NOCPU: error: 'nn.sum_squares' op is placed in host memory (offload_policy), but the hardware model '{{.*}}' has no host_cpu

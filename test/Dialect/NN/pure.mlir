// RUN: fsdp-opt %s --pass-pipeline='builtin.module(func.func(cse,canonicalize))' --mlir-print-ir-after-all 2>%t.log | FileCheck %s
// RUN: FileCheck %s --check-prefix=LOG < %t.log
// nn ops are pure: upstream cse merges identical ones and canonicalize drops
// unused ones; fsdp-opt takes upstream pass pipelines and IR printing flags.

// LOG: IR Dump After CSE
// LOG: IR Dump After Canonicalizer

// CHECK-LABEL: func.func @dedup
func.func @dedup(%x: tensor<2x16x64xf32>, %w: tensor<32x64xf32>) -> (tensor<2x16x32xf32>, tensor<2x16x32xf32>) {
  // CHECK: %[[Y:.+]] = nn.linear
  // CHECK-NOT: nn.linear
  // CHECK-NOT: nn.silu
  // CHECK: return %[[Y]], %[[Y]]
  %y0 = nn.linear %x, %w : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  %y1 = nn.linear %x, %w : (tensor<2x16x64xf32>, tensor<32x64xf32>) -> tensor<2x16x32xf32>
  %dead = nn.silu %y0 : tensor<2x16x32xf32>
  return %y0, %y1 : tensor<2x16x32xf32>, tensor<2x16x32xf32>
}

// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime | fsdp-translate --mlir-to-cpp | FileCheck %s
// RUN: fsdp-opt %s -split-input-file -fsdp-memory-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// RUN: fsdp-opt %s -split-input-file -fsdp-lower-to-runtime="memory-plan=false" | fsdp-translate --mlir-to-cpp | FileCheck %s --check-prefix=OFF
// The memory plan (StepBuffers.h): every device buffer the step frees gets
// an offset in one arena, from the lifetimes the lowering's releases give;
// a buffer the step returns stays outside (-1). Offsets traced by hand.

// A chain: a dies at b, b at c, c at d. a and c never live together and
// share offset 0; b sits beside both; d is returned. Arena 8192, which the
// report adds to the input (4096) and to d outside the arena (4096).
func.func @forward(%x: tensor<32x32xf32> {nn.input = "x"}) -> (tensor<32x32xf32> {nn.output = "y"}) {
  %a = nn.add %x, %x : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %b = nn.mul %a, %a : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %c = nn.add %b, %b : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  %d = nn.mul %c, %c : (tensor<32x32xf32>, tensor<32x32xf32>) -> tensor<32x32xf32>
  return %d : tensor<32x32xf32>
}
// CHECK: static const int64_t fsdp_memory_plan[8] = {4096, 0, 4096, 4096, 4096, 0, 4096, -1};
// CHECK-LABEL: void fsdp_program_describe(
// CHECK: fsdp_prog_memory_plan(v1, 8192, 4, fsdp_memory_plan);
// OFF-NOT: fsdp_memory_plan
// REPORT:      activations and temporaries, peak             8192
// REPORT-NEXT: memory plan arena                             8192
// REPORT-NEXT: outside the arena, peak                       4096
// REPORT-NEXT: estimated peak                               16384
// REPORT:      memory plan: 3 buffers in an arena of 8192 bytes; at most 8192 bytes of them live at once (0.0% packing overhead)

// -----

// An async all-gather reads a until its wait: c, allocated after a's last
// use but before the wait, must not take a's slot (0) and goes above b.
// The gathered buffer is returned (-1).
dist.mesh @mesh(dp = 2)
func.func @forward(%x: tensor<256xf32> {nn.input = "x"}) -> (tensor<512xf32> {nn.output = "y"}, tensor<256xf32> {nn.output = "z"}) {
  %a = nn.add %x, %x : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %f = dist.all_gather %a on @mesh[dp] dim 0 : tensor<256xf32> -> !dist.future<tensor<512xf32>>
  %b = nn.mul %x, %x : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %c = nn.add %b, %x : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  %y = dist.wait %f : !dist.future<tensor<512xf32>>
  %z = nn.mul %c, %c : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
  return %y, %z : tensor<512xf32>, tensor<256xf32>
}
// CHECK: static const int64_t fsdp_memory_plan[10] = {1024, 0, 2048, -1, 1024, 1024, 1024, 2048, 1024, -1};
// CHECK-LABEL: void fsdp_program_describe(
// CHECK: fsdp_prog_memory_plan(v1, 3072, 5, fsdp_memory_plan);
// REPORT: memory plan: 3 buffers in an arena of 3072 bytes; at most 3072 bytes of them live at once (0.0% packing overhead)

// -----

// AdamW is deferred to the step's end, so its gradient g stays until then:
// t, allocated after the update, does not take g's slot. A 16-byte buffer
// takes a 256-byte slot.
func.func @forward(%x: tensor<4xf32> {nn.input = "x"}, %step: tensor<f32> {nn.input = "optimizer_step"}, %p: tensor<4xf32> {nn.param = "w"}, %m: tensor<4xf32> {nn.state = "w.exp_avg"}, %v: tensor<4xf32> {nn.state = "w.exp_avg_sq"}) -> (tensor<4xf32> {nn.updates = 2 : i64}, tensor<4xf32> {nn.updates = 3 : i64}, tensor<4xf32> {nn.updates = 4 : i64}) {
  %g = nn.mul %x, %p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %np, %nm, %nv = nn.adamw %p, %g, %m, %v, %step, %step {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, weight_decay = 0.0 : f64} : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %t = nn.add %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %np, %nm, %nv : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK: static const int64_t fsdp_memory_plan[4] = {16, 0, 16, 256};
// CHECK-LABEL: void fsdp_program_describe(
// CHECK: fsdp_prog_defer_updates(v1);
// CHECK-NEXT: fsdp_prog_memory_plan(v1, 512, 2, fsdp_memory_plan);
// REPORT: memory plan: 2 buffers in an arena of 512 bytes; at most 512 bytes of them live at once (0.0% packing overhead)

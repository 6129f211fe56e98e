//===- Passes.td - fsdp-mlir conversions -------------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_CONVERSION_PASSES_TD
#define FSDP_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def LowerToRuntimePass : Pass<"fsdp-lower-to-runtime", "mlir::ModuleOp"> {
  let summary = "Lower a per-rank nn/dist program to runtime calls in EmitC";
  let description = [{
    Turns the entry function (a per-rank program of `nn` and `dist` ops)
    into the two functions every compiled program defines
    (`include/fsdp/Runtime/Program.h`): `fsdp_program_describe`, which
    declares the mesh, inputs, parameters with their initializers, outputs
    and communicator groups, and `fsdp_program_forward`, which runs one step
    as a sequence of `fsdp_op_*` calls. Tensors become runtime handles; each
    handle an op returns is released right after its last use, so the
    program's peak memory is that of its live values. The result is plain
    EmitC, ready for `fsdp-translate --mlir-to-cpp`.

    With `memory-plan` (the default), the description hands the runtime the
    step's memory plan (StepBuffers.h): per device buffer in allocation
    order, its size and its offset in one arena, or -1 for a buffer the
    step returns. The runtime allocates the arena once and checks each
    allocation against the plan.

    With `outline-layers` (the default), runs of ops that repeat per layer
    (LayerSegments.h: the forward of one decoder layer, its backward, its
    optimizer steps) are emitted once, as a `static` function taking an
    `fsdp_frame` of handles, and called per layer, so the generated C++
    and its compile time do not grow with the model's depth. A call keeps
    the inline code's order of allocations and releases: a function
    releases the inputs whose last use it holds and hands its outputs back,
    so peak memory is unchanged.

    Before:

    ```mlir
    func.func @forward(%x: tensor<2x64xf32> {nn.input = "x"},
                       %w: tensor<32x64xf32> {nn.param = "w", nn.init = #nn.init<ones>})
        -> (tensor<2x32xf32> {nn.output = "y"}) {
      %y = nn.linear %x, %w : (tensor<2x64xf32>, tensor<32x64xf32>) -> tensor<2x32xf32>
      return %y : tensor<2x32xf32>
    }
    ```

    After (abridged):

    ```mlir
    emitc.func @fsdp_program_describe(%p: !emitc.ptr<!emitc.opaque<"fsdp_program">>) {
      emitc.call_opaque "fsdp_prog_input"(%p) {args = [0 : index, #emitc.opaque<"\"x\"">, ...]}
      ...
    }
    emitc.func @fsdp_program_forward(%p: !emitc.ptr<!emitc.opaque<"fsdp_program">>) {
      %0 = emitc.call_opaque "fsdp_prog_arg"(%p) {args = [0 : index, #emitc.opaque<"0">]} : ...
      %1 = emitc.call_opaque "fsdp_prog_arg"(%p) {args = [0 : index, #emitc.opaque<"1">]} : ...
      %2 = emitc.call_opaque "fsdp_op_linear"(%p, %0, %1) {args = [0 : index,
             #emitc.opaque<"fsdp_type{FSDP_RT_F32, 2, {2, 32}}">, 1 : index, 2 : index,
             #emitc.opaque<"nullptr">]} : ...
      emitc.call_opaque "fsdp_prog_result"(%p, %2) ...
      emitc.call_opaque "fsdp_release"(%2) ...
      emitc.return
    }
    ```
  }];
  let dependentDialects = ["mlir::emitc::EmitCDialect"];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"forward\"",
           "The function to lower">,
    Option<"outlineLayers", "outline-layers", "bool", /*default=*/"true",
           "Emit runs of ops that repeat per layer once, as a function, "
           "and adjacent calls of one such function as a loop">,
    Option<"memoryPlan", "memory-plan", "bool", /*default=*/"true",
           "Place the step's device buffers that die inside it at offsets "
           "the compiler plans in one arena (fsdp_prog_memory_plan)">,
  ];
  let statistics = [
    Statistic<"numOpCalls", "op-calls", "Runtime op calls emitted">,
    Statistic<"numReleases", "releases", "Tensor releases emitted">,
    Statistic<"numLayerFunctions", "layer-functions",
              "Functions emitted for runs that repeat per layer">,
    Statistic<"numLayerCalls", "layer-calls", "Calls of those functions">,
    Statistic<"numLayerLoops", "layer-loops",
              "Loops over the layers that make those calls">,
  ];
}

#endif // FSDP_CONVERSION_PASSES_TD

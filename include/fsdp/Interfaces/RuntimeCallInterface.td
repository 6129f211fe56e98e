//===- RuntimeCallInterface.td - An op's runtime call, in ODS -*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Every op the runtime executes states its call once, in its ODS definition:
//
//   def NN_SiluOp : NN_UnaryOp<"silu", [RuntimeCall<"fsdp_op_silu">]>
//
// and the lowering (lib/Conversion/NNToRuntime) turns any op with the
// interface into that call by one pattern.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_INTERFACES_RUNTIMECALLINTERFACE_TD
#define FSDP_INTERFACES_RUNTIMECALLINTERFACE_TD

include "mlir/IR/OpBase.td"

def RuntimeCallOpInterface : OpInterface<"RuntimeCallOpInterface"> {
  let cppNamespace = "::fsdp";
  let description = [{
    An op that runs as one call of the runtime ABI
    (include/fsdp/Runtime/Program.h). The call's arguments follow one
    convention:

    - the program handle;
    - either the result type as a literal (the runtime allocates the result
      and returns it), or, for an op that writes its results, one handle per
      result, allocated by the caller with `fsdp_tensor_new`;
    - the operands in order; an optional operand that is absent is passed
      as `nullptr`;
    - the op's attributes as literals, in the order the op lists them.

    Each literal is written `attribute:kind`; the kinds are `bool` (a unit
    or bool attribute; absent is false), `int` (absent is 0), `f64` (absent
    is 0.0), `ints` (an integer array), `dim` (a dim of operand 0, counted
    from the front), `loss` (a loss reduction: FSDP_LOSS_*), `reduce` (a
    collective's reduction: FSDP_REDUCE_*), `tanh` (whether a string is
    "tanh"), `table` (a double array, emitted once at file scope; absent is
    nullptr) and `group` (mesh axes: the communicator group's mask).
  }];
  let methods = [
    InterfaceMethod<"The runtime function.", "::llvm::StringRef",
      "getRuntimeCallee", (ins), [{}],
      [{ return ConcreteOp::kRuntimeCallee; }]>,
    InterfaceMethod<"The literal arguments, as `attribute:kind` words.",
      "::llvm::StringRef", "getRuntimeLiterals", (ins), [{}],
      [{ return ConcreteOp::kRuntimeLiterals; }]>,
    InterfaceMethod<[{
        The number of operand arguments: more than the op has when optional
        operands at its end are absent.
      }], "unsigned", "getRuntimeNumOperands", (ins), [{}],
      [{
        int n = ConcreteOp::kRuntimeNumOperands;
        return n < 0 ? $_op->getNumOperands() : static_cast<unsigned>(n);
      }]>,
    InterfaceMethod<"Whether the call writes caller-allocated results.",
      "bool", "getRuntimeWritesResults", (ins), [{}],
      [{ return ConcreteOp::kRuntimeWritesResults; }]>,
  ];
}

class RuntimeCallInfo<string callee, string literals, int operands,
                      bit writesResults>
    : NativeOpTrait<"RuntimeCallInfo", [], [{
        static constexpr ::llvm::StringLiteral kRuntimeCallee = "}] # callee # [{";
        static constexpr ::llvm::StringLiteral kRuntimeLiterals = "}] # literals # [{";
        static constexpr int kRuntimeNumOperands = }] # operands # [{;
        static constexpr bool kRuntimeWritesResults = }]
          # !if(writesResults, "true", "false") # [{;
      }]> {
  let cppNamespace = "::fsdp";
}

/// The op runs as `callee`, which returns its result; `operands` is the
/// operand count with optional operands, when some may be absent.
class RuntimeCall<string callee, string literals = "", int operands = -1>
    : TraitList<[RuntimeCallOpInterface,
                 RuntimeCallInfo<callee, literals, operands, 0>]>;

/// The op runs as `callee`, which writes results the caller allocated.
class RuntimeOutCall<string callee, string literals = "", int operands = -1>
    : TraitList<[RuntimeCallOpInterface,
                 RuntimeCallInfo<callee, literals, operands, 1>]>;

#endif // FSDP_INTERFACES_RUNTIMECALLINTERFACE_TD

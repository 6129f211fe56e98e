//===- NNInterfaces.td - nn dialect interfaces -------------*- tablegen -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNINTERFACES_TD
#define FSDP_DIALECT_NN_IR_NNINTERFACES_TD

include "mlir/IR/OpBase.td"

def NN_ShapeRuleOpInterface : OpInterface<"ShapeRuleOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An op whose result types follow from its operands and attributes by a
    rule written once, in the op's static `inferTypes`. The verifier checks
    the written result types against the rule, and the graph importer and
    passes build ops with the inferred types, so a shape error reads the same
    wherever it is found. Unlike upstream `InferTypeOpInterface`, a broken
    rule reports one error, the op's own, not a second generic one.
  }];
  let methods = [
    StaticInterfaceMethod<[{
        Infers the result types from `operands` and `attributes`; on a broken
        rule, emits an error at `location` (when given) and fails.
      }],
      "::llvm::LogicalResult", "inferResultTypes",
      (ins "::mlir::MLIRContext *":$context,
           "std::optional<::mlir::Location>":$location,
           "::mlir::ValueRange":$operands,
           "::mlir::DictionaryAttr":$attributes,
           "::llvm::SmallVectorImpl<::mlir::Type> &":$results),
      [{}], [{
        // Inherent attributes are properties: read them from `attributes`,
        // over the defaults of those with one.
        typename ConcreteOp::Properties properties;
        ConcreteOp::populateDefaultProperties(
            ::mlir::OperationName(ConcreteOp::getOperationName(), context),
            properties);
        if (::mlir::failed(ConcreteOp::setPropertiesFromAttr(
                properties, attributes, [&]() -> ::mlir::InFlightDiagnostic {
                  if (location)
                    return ::mlir::emitError(*location);
                  return ::mlir::InFlightDiagnostic();
                })))
          return ::mlir::failure();
        return ConcreteOp::inferTypes(
            context, location,
            typename ConcreteOp::Adaptor(operands, attributes, properties),
            results);
      }]>,
  ];
  let verify = [{ return ::fsdp::nn::verifyShapeRule($_op); }];
}

def NN_ShardRuleOpInterface : OpInterface<"ShardRuleOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An op that can run on operands split over ranks: given where each
    operand is split (the dim, or replicated), the rule says where its
    results are split, what each replicated operand must become (kept, cut
    to the rank's block, or marked as entering per-rank computation whole,
    so that its gradient sums the ranks'), and the attributes that give the
    op its per-rank shapes. The partitioner applies the rules; an op without
    one runs only on replicated operands.
  }];
  let methods = [
    InterfaceMethod<[{
        The rule for operands split as `operands` over `parts` ranks; emits
        an error naming the op and fails when the op cannot run on them.
      }],
      "::llvm::FailureOr<::fsdp::nn::ShardRule>", "getShardRule",
      (ins "::llvm::ArrayRef<::fsdp::nn::OperandShard>":$operands,
           "int64_t":$parts)>,
  ];
}

def NN_TPStyleOpInterface : OpInterface<"TPStyleOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An op a tensor-parallel plan entry can style column- or row-parallel
    (PyTorch's `ColwiseParallel`, `RowwiseParallel`): the parameters the
    style splits, and the op's per-rank form, built through the partitioner
    (`TPPartitioner`, Partitioning.h). fsdp-tp-plan and fsdp-partition ask
    the op; they hold no case per op. The rules live in NNPartitionRules.cpp.
  }];
  let methods = [
    InterfaceMethod<[{
        The operands (by index) the style splits over tp and the dim of each:
        the weight, and a column-parallel bias.
      }],
      "::llvm::SmallVector<std::pair<unsigned, int64_t>>", "getTPSplitOperands",
      (ins "bool":$colwise)>,
    InterfaceMethod<[{
        Emits an error naming plan entry `entry` and fails when the op, as
        configured, cannot take the style.
      }],
      "::llvm::LogicalResult", "checkTPStyle",
      (ins "bool":$colwise, "::llvm::StringRef":$entry), [{}],
      [{ return ::mlir::success(); }]>,
    InterfaceMethod<[{
        The projection whose output features a column-parallel split of this
        op follows (itself; a Conv1D bias add's matmul), or null when the
        split is not along a projection's features (an embedding's).
      }],
      "::mlir::Operation *", "getTPProjection", (ins), [{}],
      [{ return $_op; }]>,
    InterfaceMethod<[{
        Whether a split parameter may be a vocabulary table padded to a
        multiple of tp (Megatron's padding): its rows are the loss's classes.
      }],
      "bool", "mayPadVocabulary", (ins "bool":$colwise), [{}],
      [{ return false; }]>,
    InterfaceMethod<[{
        Builds the per-rank form of the op under a column- or row-parallel
        style and binds its result; emits an error and fails when the
        operands' layouts do not allow it.
      }],
      "::llvm::LogicalResult", "partitionStyled",
      (ins "::fsdp::nn::TPPartitioner &":$partitioner, "bool":$colwise)>,
  ];
}

def NN_SplitExpansionOpInterface : OpInterface<"SplitExpansionOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An op whose form on split operands is several ops with collectives
    between them, which a shard rule cannot say (the vocabulary-parallel
    cross-entropy: a global max, then each rank's sums, then their total).
    fsdp-partition asks it when any operand is split.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the per-rank form on split operands through the partitioner
        and binds the results; emits an error and fails on splits the op
        cannot take.
      }],
      "::llvm::LogicalResult", "partitionSplit",
      (ins "::fsdp::nn::TPPartitioner &":$partitioner)>,
  ];
}

def NN_MultiHeadOpInterface : OpInterface<"MultiHeadOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An attention over heads: queries `[B, S, Hq, D]` and keys and values
    `[B, S, Hkv, D]` (Hq a multiple of Hkv, grouped-query). Tensor
    parallelism splits the heads: fsdp-tp-plan checks they divide, and
    fsdp-partition repeats key/value heads when there are fewer than tp.
  }];
  let methods = [
    InterfaceMethod<"The number of query heads.", "int64_t", "getNumHeads">,
    InterfaceMethod<"The number of key/value heads.", "int64_t",
      "getNumKeyValueHeads">,
    InterfaceMethod<"The indices of the key and value operands.",
      "::llvm::SmallVector<unsigned, 2>", "getKeyValueOperands">,
  ];
}

def NN_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An op that reverse-mode differentiation can go through: given the
    gradients of its results (`grads.grad(result)`, null where none reached
    it), the rule builds the gradients of the operands that need one and
    adds them with `grads.accumulate`. The rule lives with the op, as its
    shape and shard rules do; `differentiate` (Gradient.h) runs the rules
    from the last op to the first. The dist dialect's collectives implement
    it as external models (`registerDistGradientModels`).
  }];
  let methods = [
    InterfaceMethod<[{
        Builds the operands' gradients from the results' at the builder's
        insertion point; emits an error at the op and fails when the op, as
        configured, has no gradient.
      }],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::fsdp::nn::GradientBuilder &":$grads)>,
  ];
}

def NN_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    The work an op does on one rank, for the step-time simulator
    (`fsdp-simulate`): the floating-point operations it executes, the ones
    that count as model FLOPs for MFU (torchtitan's convention: matmuls and
    attention, causal masking not credited, recomputation not counted), the
    bytes it moves through memory, and the engine that bounds it. The rule
    lives with the op, in NNCostRules.cpp. An op without one streams: it
    reads its operands and writes its results once (`streamingCost`).
  }];
  let methods = [
    InterfaceMethod<"The op's cost on its operand shapes.",
      "::fsdp::nn::OpCost", "getCost">,
  ];
}

def NN_UpdateOpInterface : OpInterface<"UpdateOpInterface"> {
  let cppNamespace = "::fsdp::nn";
  let description = [{
    An optimizer update: each result is the new value of one operand (the
    parameter or a state tensor), element i from element i of the operands
    alone. A result may therefore take its operand's buffer when nothing
    reads the operand after the op: `fsdp::InPlaceUpdates` decides where,
    for the memory report and the lowering alike.
  }];
  let methods = [
    InterfaceMethod<"The operand whose new value result `result` is.",
      "::mlir::OpOperand &", "getUpdatedOperand", (ins "unsigned":$result)>,
  ];
}

#endif // FSDP_DIALECT_NN_IR_NNINTERFACES_TD

//===- NNOps.h - nn dialect operations --------------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_NNOPS_H
#define FSDP_DIALECT_NN_IR_NNOPS_H

#include "fsdp/Dialect/NN/IR/NNDialect.h"
#include "fsdp/Interfaces/RuntimeCallInterface.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace fsdp::nn {
/// Where a value is split over ranks: on `dim` (in `groups` strided groups),
/// or, with dim = -1, nowhere (replicated).
struct OperandShard {
  int64_t dim = -1;
  int64_t groups = 1;
  bool isSplit() const { return dim >= 0; }
};

/// "replicated", "sharded on dim 2", "sharded on dim 2 in 3 groups".
std::string describe(OperandShard shard);

/// What a replicated operand becomes when the op runs per rank.
enum class ReplicatedUse {
  /// Used as it is (an index, a value no split reaches).
  Keep,
  /// Enters per-rank computation whole: its gradient sums the ranks' parts.
  Whole,
  /// Cut to the rank's block along `sliceDim`.
  Slice,
};

/// How an op runs on split operands (ShardRuleOpInterface).
struct ShardRule {
  /// Where each result is split.
  llvm::SmallVector<OperandShard> results;
  /// Per operand: what a replicated one becomes, and the dim of a Slice.
  llvm::SmallVector<std::pair<ReplicatedUse, int64_t>> operands;
  /// The op's attributes for its per-rank shapes (null: unchanged).
  mlir::DictionaryAttr attributes;
};

/// The ranked tensor type of `v` (every nn value has one).
inline mlir::RankedTensorType tensorOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// Checks an op's result types against its shape rule.
llvm::LogicalResult verifyShapeRule(mlir::Operation *op);
/// Creates op `name` on `operands` with `attributes` and the result types
/// its shape rule infers. When `name` has no shape rule, or the rule rejects
/// the operands (its error is emitted at `loc`), creates nothing and returns
/// null.
mlir::Operation *createWithShapeRule(mlir::OpBuilder &builder,
                                     mlir::Location loc,
                                     mlir::OperationName name,
                                     mlir::ValueRange operands,
                                     mlir::DictionaryAttr attributes);

/// Re-creates `op` (an op with a shape rule) at the builder's insertion point
/// on `operands`, with `attributes` (null: its own), and the result types its
/// rule infers for them. On a broken rule, emits the rule's error at the op,
/// creates nothing and returns null.
mlir::Operation *rebuildWithShapeRule(mlir::OpBuilder &builder,
                                      mlir::Operation &op,
                                      mlir::ValueRange operands,
                                      mlir::DictionaryAttr attributes);

/// What bounds an op's time (CostOpInterface).
enum class CostUnit { Memory, Matmul, AttentionForward, AttentionBackward };

/// The work of one op on one rank (CostOpInterface).
struct OpCost {
  CostUnit unit = CostUnit::Memory;
  /// Floating-point operations the kernel executes.
  double flops = 0;
  /// The part of them that counts as model FLOPs for MFU.
  double modelFlops = 0;
  /// Bytes read and written in memory.
  double bytes = 0;
  /// The element type the FLOPs run in (null for a memory-bound op).
  mlir::Type dtype;
};

/// The cost of an op that reads its operands and writes its results once.
OpCost streamingCost(mlir::Operation *op);

/// The state gradient rules work on (Gradient.h).
class GradientBuilder;
/// The partitioner as tensor-parallel rules see it (Partitioning.h).
class TPPartitioner;

/// What selective activation checkpointing saves (NNOps.td): every other
/// matrix product, and each op with RematSaved.
template <typename ConcreteType>
class RematProduct
    : public mlir::OpTrait::TraitBase<ConcreteType, RematProduct> {};
template <typename ConcreteType>
class RematSaved : public mlir::OpTrait::TraitBase<ConcreteType, RematSaved> {};
/// Normalizes each token on its own, so sequence parallelism can run it on
/// the rank's block of the sequence (NNOps.td).
template <typename ConcreteType>
class TokenwiseNorm
    : public mlir::OpTrait::TraitBase<ConcreteType, TokenwiseNorm> {};
/// An op a graph.json node may name (NNOps.td).
template <typename ConcreteType>
class Imported : public mlir::OpTrait::TraitBase<ConcreteType, Imported> {};
} // namespace fsdp::nn

#include "fsdp/Dialect/NN/IR/NNInterfaces.h.inc"

#define GET_OP_CLASSES
#include "fsdp/Dialect/NN/IR/NNOps.h.inc"

#endif // FSDP_DIALECT_NN_IR_NNOPS_H

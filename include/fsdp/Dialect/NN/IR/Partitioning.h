//===- Partitioning.h - The partitioner as TP rules see it ------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The partitioner (fsdp-partition) as an op's tensor-parallel rules see it.
// An op that a plan entry styles (TPStyleOpInterface: linear, Conv1D's
// matmul and bias add, embedding) or whose split form is several ops
// (SplitExpansionOpInterface: the vocabulary-parallel cross-entropy) builds
// its per-rank form through this class, so the partitioner itself holds no
// case per op. The rules run for one op at a time, the "current" op, with
// the builder after the per-rank ops built so far.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_DIALECT_NN_IR_PARTITIONING_H
#define FSDP_DIALECT_NN_IR_PARTITIONING_H

#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"

namespace fsdp::nn {

class TPPartitioner {
public:
  virtual ~TPPartitioner();

  /// Builds the per-rank ops, after those built so far.
  virtual mlir::OpBuilder &builder() = 0;
  /// The number of ranks of the tp axis.
  virtual int64_t parts() const = 0;
  /// The plan entry that styles the current op, for messages.
  virtual std::string entry() const = 0;
  /// Whether the current op's style declares its input sharded.
  virtual bool inputDeclaredSharded() const = 0;

  /// The per-rank value of a value of the global program.
  virtual mlir::Value lookup(mlir::Value global) const = 0;
  /// Whether a per-rank value is whole on every rank (neither split nor a
  /// pending partial sum).
  virtual bool isReplicated(mlir::Value perRank) const = 0;
  /// Where a per-rank value is split (dim -1 when it is not: replicated or a
  /// partial sum).
  virtual OperandShard shardOf(mlir::Value perRank) const = 0;
  /// "replicated", "sharded on dim 2", "a partial sum", for messages.
  virtual std::string describeLayout(mlir::Value perRank) const = 0;

  /// The per-rank form of the current op's activation operand `global`
  /// under its style: whole for column-parallel (a sequence block
  /// gathered), the rank's features for row-parallel.
  virtual mlir::FailureOr<mlir::Value> activation(mlir::Value global) = 0;
  /// `perRank` as a value entering per-rank computation whole: its
  /// gradient sums the ranks' parts.
  virtual mlir::Value copyIn(mlir::Value perRank) = 0;
  /// A partial sum reduced into its style's output layout.
  virtual mlir::FailureOr<mlir::Value> reduce(mlir::Value partial) = 0;
  /// `value` reduced over the tp ranks: their maximum, or their sum.
  virtual mlir::Value allReduce(mlir::Value value, bool max) = 0;
  /// This rank's index on the tp axis (an i64 scalar tensor).
  virtual mlir::Value axisIndex() = 0;
  /// The number of equal parts the current op's projection's output is
  /// split into along its features (a fused [Q | K | V]), or 1.
  virtual int64_t fusedGroups() = 0;

  /// The current op rebuilt on per-rank `operands` through its shape rule.
  virtual mlir::Operation *rebuild(mlir::ValueRange operands) = 0;
  /// The current op partitioned as any unstyled op, by its shard rule.
  virtual mlir::LogicalResult partitionByShardRule() = 0;

  /// The current op's result `result` is `perRank`, split as `split`.
  virtual void bind(unsigned result, mlir::Value perRank,
                    OperandShard split) = 0;
  /// ... a partial sum, reduced when used into the style's output layout.
  virtual void bindPartial(mlir::Value perRank) = 0;
  /// ... laid out as `like` is.
  virtual void bindLike(mlir::Value perRank, mlir::Value like) = 0;
  /// ... the module's output sharded on the features (`dim`, in `groups`),
  /// gathered when the style wants it whole (colwise_rep).
  virtual mlir::LogicalResult bindModuleOutput(mlir::Value perRank, int64_t dim,
                                               int64_t groups) = 0;
};

} // namespace fsdp::nn

#endif // FSDP_DIALECT_NN_IR_PARTITIONING_H

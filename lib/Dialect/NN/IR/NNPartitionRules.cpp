//===- NNPartitionRules.cpp - How nn ops split under tensor parallelism ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The ops' tensor-parallel rules beyond their shard rules: what a column- or
// row-parallel plan entry splits and the per-rank form it gives
// (TPStyleOpInterface), the vocabulary-parallel cross-entropy
// (SplitExpansionOpInterface), and the heads of an attention
// (MultiHeadOpInterface). fsdp-tp-plan and fsdp-partition apply them.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/Partitioning.h"

using namespace mlir;
using namespace fsdp::nn;

TPPartitioner::~TPPartitioner() = default;

//===----------------------------------------------------------------------===//
// Styled modules
//===----------------------------------------------------------------------===//

// nn.Linear: the weight's rows (column-parallel, with the bias) or columns.
SmallVector<std::pair<unsigned, int64_t>>
LinearOp::getTPSplitOperands(bool colwise) {
  SmallVector<std::pair<unsigned, int64_t>> split = {{1, colwise ? 0 : 1}};
  if (colwise && getBias())
    split.push_back({2, 0});
  return split;
}

bool LinearOp::mayPadVocabulary(bool colwise) { return colwise; }

LogicalResult LinearOp::partitionStyled(TPPartitioner &p, bool colwise) {
  FailureOr<Value> x = p.activation(getInput());
  if (failed(x))
    return failure();
  SmallVector<Value> operands = {*x, p.lookup(getWeight())};
  Value bias = getBias() ? p.lookup(getBias()) : Value();
  if (colwise && bias)
    operands.push_back(bias);
  Operation *copy = p.rebuild(operands);
  if (!copy)
    return failure();
  Value result = copy->getResult(0);
  int64_t last = tensorOf(result).getRank() - 1;
  if (colwise)
    return p.bindModuleOutput(result, last, p.fusedGroups());
  p.bindPartial(result);
  if (!bias)
    return success();
  // Row-parallel with a bias: reduce first, then add it once. Added on every
  // rank to a whole value it needs no copy; to a sequence block it does
  // (its gradient sums the blocks').
  FailureOr<Value> sum = p.reduce(result);
  if (failed(sum))
    return failure();
  OpBuilder &b = p.builder();
  Value b2 = p.isReplicated(*sum) ? bias : p.copyIn(bias);
  p.bindLike(AddOp::create(b, getLoc(), *sum, b2, StringAttr()), *sum);
  return success();
}

// A Conv1D's matmul (x · W, W [in, out]): W's columns or rows.
SmallVector<std::pair<unsigned, int64_t>>
MatmulOp::getTPSplitOperands(bool colwise) {
  return {{1, colwise ? 1 : 0}};
}

LogicalResult MatmulOp::checkTPStyle(bool, StringRef entry) {
  if (!getTransposeA() && !getTransposeB() && getRhs().getType().getRank() == 2)
    return success();
  return emitOpError("is matched by tensor-parallel plan entry '")
         << entry << "', which splits a matmul only as a Conv1D (x · W, W "
         << "[in, out])";
}

LogicalResult MatmulOp::partitionStyled(TPPartitioner &p, bool colwise) {
  FailureOr<Value> x = p.activation(getLhs());
  if (failed(x))
    return failure();
  Operation *copy = p.rebuild({*x, p.lookup(getRhs())});
  if (!copy)
    return failure();
  Value result = copy->getResult(0);
  if (!colwise) {
    p.bindPartial(result);
    return success();
  }
  // The bias add of the same module follows the sharded features.
  p.bind(0, result,
         OperandShard{tensorOf(result).getRank() - 1, p.fusedGroups()});
  return success();
}

// A Conv1D's bias add after a column-parallel matmul: the bias's rows.
SmallVector<std::pair<unsigned, int64_t>>
AddOp::getTPSplitOperands(bool colwise) {
  if (!colwise)
    return {};
  return {{1, 0}};
}

Operation *AddOp::getTPProjection() { return getLhs().getDefiningOp(); }

LogicalResult AddOp::partitionStyled(TPPartitioner &p, bool) {
  // The operands' layouts decide.
  return p.partitionByShardRule();
}

// nn.Embedding: the table's columns (column-parallel) or rows (the
// vocabulary).
SmallVector<std::pair<unsigned, int64_t>>
EmbeddingOp::getTPSplitOperands(bool colwise) {
  return {{0, colwise ? 1 : 0}};
}

Operation *EmbeddingOp::getTPProjection() { return nullptr; }

bool EmbeddingOp::mayPadVocabulary(bool) { return true; }

LogicalResult EmbeddingOp::partitionStyled(TPPartitioner &p, bool colwise) {
  Value ids = p.lookup(getIds());
  if (!p.isReplicated(ids) || p.inputDeclaredSharded())
    return emitOpError("is a ")
           << (colwise ? "colwise" : "rowwise")
           << " embedding, whose ids must be replicated (input_layouts "
              "Replicate())";
  Value table = p.lookup(getTable());
  if (colwise) {
    Operation *copy = p.rebuild({table, ids});
    if (!copy)
      return failure();
    Value result = copy->getResult(0);
    return p.bindModuleOutput(result, tensorOf(result).getRank() - 1, 1);
  }
  // Vocabulary-parallel: the rank's rows; other ids give zero rows.
  Operation *copy = p.rebuild({table, ids, p.axisIndex()});
  if (!copy)
    return failure();
  p.bindPartial(copy->getResult(0));
  return success();
}

//===----------------------------------------------------------------------===//
// The vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::partitionSplit(TPPartitioner &p) {
  Value logits = p.lookup(getLogits()), labels = p.lookup(getLabels());
  OperandShard split = p.shardOf(logits);
  int64_t last = tensorOf(logits).getRank() - 1;
  if (split.dim != last || split.groups != 1 || !p.isReplicated(labels))
    return emitOpError("takes logits ")
           << p.describeLayout(logits)
           << "; a cross-entropy is partitioned only over the vocabulary "
              "(lm_head column-parallel with output_layouts Shard(-1))";
  // The global row max, then each rank's Σexp and target logit, summed
  // over the ranks.
  OpBuilder &b = p.builder();
  Location loc = getLoc();
  StringAttr path = getPathAttr();
  Value rank = p.axisIndex();
  auto max = ReduceMaxOp::create(b, loc, logits, path);
  Value shift = p.allReduce(max, /*max=*/true);
  // Padded classes (vocabulary not divisible by tp) are left out.
  int64_t classes = getLogits().getType().getShape().back();
  IntegerAttr numClasses =
      tensorOf(logits).getShape().back() * p.parts() != classes
          ? b.getI64IntegerAttr(classes)
          : IntegerAttr();
  auto partial =
      CrossEntropyPartialOp::create(b, loc, logits, labels, shift, rank,
                                    getIgnoreIndexAttr(), numClasses, path);
  Value sumExp = p.allReduce(partial.getSumExp(), /*max=*/false);
  Value target = p.allReduce(partial.getTarget(), /*max=*/false);
  auto loss = CrossEntropyCombineOp::create(b, loc, sumExp, target, labels,
                                            getIgnoreIndexAttr(),
                                            getReductionAttr(), path);
  p.bind(0, loss, OperandShard{});
  return success();
}

//===----------------------------------------------------------------------===//
// Heads
//===----------------------------------------------------------------------===//

int64_t AttentionOp::getNumHeads() {
  return getQuery().getType().getDimSize(2);
}

int64_t AttentionOp::getNumKeyValueHeads() {
  return getKey().getType().getDimSize(2);
}

SmallVector<unsigned, 2> AttentionOp::getKeyValueOperands() { return {1, 2}; }

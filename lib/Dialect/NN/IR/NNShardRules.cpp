//===- NNShardRules.cpp - How nn ops run on operands split over ranks -----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// ShardRuleOpInterface: for each op, where its results are split given where
// its operands are, what its replicated operands become, and its per-rank
// attributes. fsdp-partition applies these rules.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

using namespace mlir;
using namespace fsdp::nn;
using namespace fsdp::nn::detail;

namespace {

LogicalResult unsupported(Operation *op, ArrayRef<OperandShard> operands,
                          unsigned i) {
  return op->emitOpError("cannot be partitioned with operand #")
         << i << " " << describe(operands[i]);
}

/// The split the operands share (aligned to the result from the trailing
/// dims when `broadcast`); fails on two different splits.
FailureOr<OperandShard>
commonSplit(Operation *op, ArrayRef<OperandShard> operands, bool broadcast) {
  int64_t rank = tensorOf(op->getResult(0)).getRank();
  std::optional<OperandShard> common;
  for (auto [i, s] : llvm::enumerate(operands)) {
    if (!s.isSplit())
      continue;
    OperandShard aligned = s;
    if (broadcast)
      aligned.dim += rank - tensorOf(op->getOperand(i)).getRank();
    if (common &&
        (common->dim != aligned.dim || common->groups != aligned.groups)) {
      (void)unsupported(op, operands, i);
      return failure();
    }
    common = aligned;
  }
  return *common;
}

/// A rule keeping replicated operands as they are and splitting every
/// result as `result`.
ShardRule keep(Operation *op, OperandShard result) {
  ShardRule rule;
  rule.results.assign(op->getNumResults(), result);
  rule.operands.assign(op->getNumOperands(), {ReplicatedUse::Keep, 0});
  return rule;
}

/// A replicated float operand used with split ones enters per-rank
/// computation whole.
void wholeFloats(Operation *op, ArrayRef<OperandShard> operands,
                 ShardRule &rule) {
  for (auto [i, s] : llvm::enumerate(operands))
    if (!s.isSplit() &&
        isa<FloatType>(tensorOf(op->getOperand(i)).getElementType()))
      rule.operands[i] = {ReplicatedUse::Whole, 0};
}

/// An op normalizing along `along` of its first operand, whose other
/// operands (weights) are replicated.
FailureOr<ShardRule> normalizing(Operation *op, ArrayRef<OperandShard> operands,
                                 int64_t along) {
  for (unsigned i = 1; i < operands.size(); ++i)
    if (operands[i].isSplit())
      return unsupported(op, operands, i);
  if (operands[0].dim == along)
    return op->emitOpError("normalizes along dim ")
           << along << ", which is sharded";
  ShardRule rule = keep(op, operands[0]);
  wholeFloats(op, operands, rule);
  return rule;
}

/// A replicated projection (linear, matmul) of the first operand's rows
/// split on a dim other than the features (the last of `rank`).
FailureOr<ShardRule> onSplitRows(Operation *op, ArrayRef<OperandShard> operands,
                                 int64_t rank) {
  for (unsigned i = 1; i < operands.size(); ++i)
    if (operands[i].isSplit())
      return unsupported(op, operands, i);
  if (operands[0].dim >= rank - 1)
    return unsupported(op, operands, 0);
  ShardRule rule = keep(op, operands[0]);
  wholeFloats(op, operands, rule);
  return rule;
}

int64_t frontDim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

} // namespace

FailureOr<ShardRule> fsdp::nn::detail::elementwiseShardRule(
    Operation *op, ArrayRef<OperandShard> operands, bool broadcast) {
  FailureOr<OperandShard> split = commonSplit(op, operands, broadcast);
  if (failed(split))
    return failure();
  ShardRule rule = keep(op, *split);
  int64_t rank = tensorOf(op->getResult(0)).getRank();
  for (auto [i, s] : llvm::enumerate(operands)) {
    if (s.isSplit())
      continue;
    RankedTensorType type = tensorOf(op->getOperand(i));
    int64_t dim = split->dim - (rank - type.getRank());
    if (dim >= 0 && type.getDimSize(dim) != 1) {
      if (split->groups != 1)
        return unsupported(op, operands, i);
      rule.operands[i] = {ReplicatedUse::Slice, dim};
    } else if (isa<FloatType>(type.getElementType())) {
      rule.operands[i] = {ReplicatedUse::Whole, 0};
    }
  }
  return rule;
}

std::string fsdp::nn::describe(OperandShard s) {
  if (!s.isSplit())
    return "replicated";
  std::string text = "sharded on dim " + std::to_string(s.dim);
  if (s.groups > 1)
    text += " in " + std::to_string(s.groups) + " groups";
  return text;
}

#define ELEMENTWISE_RULE(OP, BROADCAST)                                        \
  FailureOr<ShardRule> OP::getShardRule(ArrayRef<OperandShard> operands,       \
                                        int64_t) {                             \
    return elementwiseShardRule(*this, operands, BROADCAST);                   \
  }
ELEMENTWISE_RULE(NegOp, false)
ELEMENTWISE_RULE(ScaleOp, false)
ELEMENTWISE_RULE(GeluOp, false)
ELEMENTWISE_RULE(CastOp, false)
#undef ELEMENTWISE_RULE

FailureOr<ShardRule> RMSNormOp::getShardRule(ArrayRef<OperandShard> operands,
                                             int64_t) {
  return normalizing(*this, operands, getInput().getType().getRank() - 1);
}

FailureOr<ShardRule> LayerNormOp::getShardRule(ArrayRef<OperandShard> operands,
                                               int64_t) {
  return normalizing(*this, operands, getInput().getType().getRank() - 1);
}

FailureOr<ShardRule> SoftmaxOp::getShardRule(ArrayRef<OperandShard> operands,
                                             int64_t) {
  return normalizing(
      *this, operands,
      frontDim(static_cast<int64_t>(getDim()), getInput().getType().getRank()));
}

FailureOr<ShardRule> LinearOp::getShardRule(ArrayRef<OperandShard> operands,
                                            int64_t) {
  return onSplitRows(*this, operands, getInput().getType().getRank());
}

FailureOr<ShardRule> MatmulOp::getShardRule(ArrayRef<OperandShard> operands,
                                            int64_t) {
  return onSplitRows(*this, operands, getLhs().getType().getRank());
}

FailureOr<ShardRule> EmbeddingOp::getShardRule(ArrayRef<OperandShard> operands,
                                               int64_t) {
  // Split ids select the same rows of a replicated table.
  if (operands[0].isSplit() || !operands[1].isSplit())
    return unsupported(*this, operands, operands[0].isSplit() ? 0 : 1);
  ShardRule rule = keep(*this, operands[1]);
  wholeFloats(*this, operands, rule);
  return rule;
}

FailureOr<ShardRule> RotaryOp::getShardRule(ArrayRef<OperandShard> operands,
                                            int64_t) {
  // On the rank's heads, or on its sequence block with its positions.
  ShardRule rule = keep(*this, operands[0]);
  if (operands[0].dim == 1 && operands[0].groups == 1 &&
      !operands[1].isSplit()) {
    rule.operands[1] = {ReplicatedUse::Slice, 1};
    return rule;
  }
  if (operands[0].dim != 2 || operands[1].isSplit())
    return unsupported(*this, operands, operands[0].dim != 2 ? 0 : 1);
  return rule;
}

FailureOr<ShardRule> AttentionOp::getShardRule(ArrayRef<OperandShard> operands,
                                               int64_t) {
  // On the rank's heads: query, key and value all split by heads. A key or
  // value every rank holds whole (key/value heads repeated up to tp, when
  // there are fewer than tp) is cut to the rank's heads.
  if (operands[0].dim != 2 || operands[0].groups != 1)
    return unsupported(*this, operands, 0);
  ShardRule rule = keep(*this, operands[0]);
  // The statistics [B, Nq, S] hold the heads at dim 1.
  rule.results[1].dim = 1;
  for (unsigned i = 1; i < 3; ++i) {
    if (!operands[i].isSplit()) {
      rule.operands[i] = {ReplicatedUse::Slice, 2};
      continue;
    }
    if (operands[i].dim != 2 || operands[i].groups != 1)
      return unsupported(*this, operands, i);
  }
  return rule;
}

FailureOr<ShardRule> ReshapeOp::getShardRule(ArrayRef<OperandShard> operands,
                                             int64_t parts) {
  // The split dim maps to the output dim with the same prefix product; it
  // must be that dim's major part.
  OperandShard split = operands[0];
  ArrayRef<int64_t> in = getInput().getType().getShape();
  SmallVector<int64_t> shape(getShape());
  if (split.groups != 1)
    return unsupported(*this, operands, 0);
  int64_t prefix = 1;
  for (int64_t d = 0; d < split.dim; ++d)
    prefix *= in[d];
  int64_t product = 1;
  size_t j = 0;
  while (j < shape.size() && product < prefix)
    product *= shape[j++];
  while (j < shape.size() && shape[j] == 1 && in[split.dim] != 1)
    ++j;
  if (product != prefix || j == shape.size() ||
      (in[split.dim] % shape[j] != 0 && shape[j] % in[split.dim] != 0))
    return emitOpError("reshapes a tensor ")
           << describe(split) << " in a way the partitioner cannot follow";
  if (shape[j] % parts != 0)
    return emitOpError("splits a dim of ")
           << shape[j] << " (heads) that does not divide by " << parts
           << " ranks";
  shape[j] /= parts;
  ShardRule rule = keep(*this, {static_cast<int64_t>(j), 1});
  NamedAttrList attrs((*this)->getAttrDictionary());
  attrs.set("shape", DenseI64ArrayAttr::get(getContext(), shape));
  rule.attributes = attrs.getDictionary(getContext());
  return rule;
}

FailureOr<ShardRule> TransposeOp::getShardRule(ArrayRef<OperandShard> operands,
                                               int64_t) {
  ArrayRef<int64_t> perm = getPerm();
  OperandShard result = operands[0];
  result.dim =
      std::find(perm.begin(), perm.end(), operands[0].dim) - perm.begin();
  return keep(*this, result);
}

FailureOr<ShardRule> SliceOp::getShardRule(ArrayRef<OperandShard> operands,
                                           int64_t) {
  if (frontDim(static_cast<int64_t>(getDim()),
               getInput().getType().getRank()) == operands[0].dim)
    return unsupported(*this, operands, 0);
  return keep(*this, operands[0]);
}

FailureOr<ShardRule> SplitOp::getShardRule(ArrayRef<OperandShard> operands,
                                           int64_t parts) {
  OperandShard split = operands[0];
  int64_t dim =
      frontDim(static_cast<int64_t>(getDim()), getInput().getType().getRank());
  if (dim != split.dim)
    return keep(*this, split);
  // A fused projection's parts: each holds the rank's share of one.
  ArrayRef<int64_t> sizes = getSizes();
  if (split.groups != static_cast<int64_t>(sizes.size()) ||
      !llvm::all_equal(sizes))
    return unsupported(*this, operands, 0);
  ShardRule rule = keep(*this, {dim, 1});
  SmallVector<int64_t> local(sizes.size(), sizes.front() / parts);
  NamedAttrList attrs((*this)->getAttrDictionary());
  attrs.set("sizes", DenseI64ArrayAttr::get(getContext(), local));
  rule.attributes = attrs.getDictionary(getContext());
  return rule;
}

FailureOr<ShardRule> ConcatOp::getShardRule(ArrayRef<OperandShard> operands,
                                            int64_t) {
  int64_t dim =
      frontDim(static_cast<int64_t>(getDim()), tensorOf(getResult()).getRank());
  for (auto [i, s] : llvm::enumerate(operands))
    if (s.dim != operands[0].dim || s.groups != operands[0].groups ||
        s.dim == dim)
      return unsupported(*this, operands, i);
  return keep(*this, operands[0]);
}

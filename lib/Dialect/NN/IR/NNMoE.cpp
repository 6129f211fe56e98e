//===- NNMoE.cpp - Mixture-of-experts ops: shapes, gradients, costs -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The shape rules, gradient rules and cost rules of the ops NNMoEOps.td
// defines. Routing indices and counts are integers and have no gradient.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

#include "fsdp/Dialect/NN/IR/Gradient.h"
#include "fsdp/Dialect/NN/IR/Partitioning.h"

using namespace mlir;
using namespace fsdp::nn;
using namespace fsdp::nn::detail;

namespace {

/// The product of `shape`'s dims.
int64_t product(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

RankedTensorType i64Tensor(MLIRContext *context, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, IntegerType::get(context, 64));
}

RankedTensorType f32Tensor(MLIRContext *context, ArrayRef<int64_t> shape) {
  return RankedTensorType::get(shape, Float32Type::get(context));
}

/// Router logits `[..., E]` and a top-k in [1, E].
template <typename OpTy>
FailureOr<int64_t> checkLogits(std::optional<Location> loc, Value logits,
                               int64_t topK) {
  RankedTensorType type = tensorOf(logits);
  if (type.getRank() < 1) {
    (void)reject<OpTy>(loc, "logits must be [..., experts], got ", type);
    return failure();
  }
  int64_t experts = type.getShape().back();
  if (topK < 1 || topK > experts) {
    (void)reject<OpTy>(loc, "top_k ", topK, " must be in [1, ", experts,
                       "] (the experts)");
    return failure();
  }
  return experts;
}

/// Routing `indices` `[..., k]`; returns the token count (the leading dims'
/// product).
template <typename OpTy>
FailureOr<int64_t> checkIndices(std::optional<Location> loc, Value indices) {
  RankedTensorType type = tensorOf(indices);
  if (type.getRank() < 1) {
    (void)reject<OpTy>(loc, "indices must be [..., top_k], got ", type);
    return failure();
  }
  return product(type.getShape().drop_back());
}

/// Routing statistics `[2E + 1]` f32; returns E.
template <typename OpTy>
FailureOr<int64_t> checkStats(std::optional<Location> loc, Value stats) {
  RankedTensorType type = tensorOf(stats);
  if (type.getRank() != 1 || type.getDimSize(0) < 3 ||
      type.getDimSize(0) % 2 != 1) {
    (void)reject<OpTy>(loc, "stats must be [2 · experts + 1], got ", type);
    return failure();
  }
  return (type.getDimSize(0) - 1) / 2;
}

} // namespace

//===----------------------------------------------------------------------===//
// Shape rules
//===----------------------------------------------------------------------===//

NN_SHAPE_RULE(MoeRouterOp) {
  RankedTensorType logits = tensorOf(adaptor.getLogits());
  int64_t topK = static_cast<int64_t>(adaptor.getTopK());
  if (failed(checkLogits<MoeRouterOp>(loc, adaptor.getLogits(), topK)))
    return failure();
  SmallVector<int64_t> shape(logits.getShape());
  shape.back() = topK;
  results.push_back(RankedTensorType::get(shape, logits.getElementType()));
  results.push_back(i64Tensor(context, shape));
  return success();
}

NN_SHAPE_RULE(MoePermuteOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  RankedTensorType indices = tensorOf(adaptor.getIndices());
  int64_t experts = static_cast<int64_t>(adaptor.getNumExperts());
  if (experts < 1)
    return reject<MoePermuteOp>(loc, "num_experts must be >= 1, got ", experts);
  if (input.getRank() < 1 || indices.getRank() != input.getRank() ||
      input.getShape().drop_back() != indices.getShape().drop_back())
    return reject<MoePermuteOp>(loc, "input ", input, " and indices ", indices,
                                " must be [..., H] and [..., top_k] over the "
                                "same tokens");
  int64_t slots = indices.getNumElements();
  results.push_back(RankedTensorType::get({slots, input.getShape().back()},
                                          input.getElementType()));
  results.push_back(i64Tensor(context, {experts}));
  return success();
}

NN_SHAPE_RULE(MoeUnpermuteOp) {
  RankedTensorType rows = tensorOf(adaptor.getRows());
  RankedTensorType indices = tensorOf(adaptor.getIndices());
  if (adaptor.getNumExperts() < 1)
    return reject<MoeUnpermuteOp>(loc, "num_experts must be >= 1");
  if (failed(checkIndices<MoeUnpermuteOp>(loc, adaptor.getIndices())))
    return failure();
  if (rows.getRank() != 2 || rows.getDimSize(0) != indices.getNumElements())
    return reject<MoeUnpermuteOp>(
        loc, "rows ", rows, " must be [", indices.getNumElements(),
        ", H]: one row per routing slot of ", indices);
  if (Value weights = adaptor.getWeights()) {
    if (failed(sameElementType<MoeUnpermuteOp>(loc, "weights",
                                               adaptor.getRows(), weights)))
      return failure();
    if (tensorOf(weights).getShape() != indices.getShape())
      return reject<MoeUnpermuteOp>(loc, "weights ", weights.getType(),
                                    " must have the shape of indices ",
                                    indices);
  }
  SmallVector<int64_t> shape(indices.getShape());
  shape.back() = rows.getDimSize(1);
  results.push_back(RankedTensorType::get(shape, rows.getElementType()));
  return success();
}

NN_SHAPE_RULE(GroupedLinearOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  RankedTensorType counts = tensorOf(adaptor.getCounts());
  RankedTensorType weight = tensorOf(adaptor.getWeight());
  if (failed(sameElementType<GroupedLinearOp>(loc, "weight", adaptor.getInput(),
                                              adaptor.getWeight())))
    return failure();
  if (input.getRank() != 2 || weight.getRank() != 3 ||
      weight.getDimSize(2) != input.getDimSize(1))
    return reject<GroupedLinearOp>(loc, "input ", input, " and weight ", weight,
                                   " must be [R, K] and [experts, N, K]");
  if (counts.getRank() != 1 || weight.getDimSize(0) == 0 ||
      counts.getDimSize(0) % weight.getDimSize(0) != 0)
    return reject<GroupedLinearOp>(loc, "counts ", counts,
                                   " must have a multiple of the ",
                                   weight.getDimSize(0), " experts' segments");
  results.push_back(RankedTensorType::get(
      {input.getDimSize(0), weight.getDimSize(1)}, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(MoeRankCountsOp) {
  RankedTensorType counts = tensorOf(adaptor.getCounts());
  int64_t ranks = static_cast<int64_t>(adaptor.getRanks());
  if (ranks < 1 || counts.getRank() != 1 || counts.getDimSize(0) % ranks != 0)
    return reject<MoeRankCountsOp>(loc, "counts ", counts,
                                   " do not split into ", ranks, " ranks");
  results.push_back(i64Tensor(context, {ranks}));
  return success();
}

NN_SHAPE_RULE(MoeAuxStatsOp) {
  FailureOr<int64_t> experts = checkLogits<MoeAuxStatsOp>(
      loc, adaptor.getLogits(), static_cast<int64_t>(adaptor.getTopK()));
  if (failed(experts))
    return failure();
  results.push_back(f32Tensor(context, {2 * *experts + 1}));
  return success();
}

NN_SHAPE_RULE(MoeAuxCombineOp) {
  if (failed(checkStats<MoeAuxCombineOp>(loc, adaptor.getStats())))
    return failure();
  if (adaptor.getCoef().convertToDouble() < 0)
    return reject<MoeAuxCombineOp>(loc, "coef must be >= 0");
  results.push_back(f32Tensor(context, {}));
  return success();
}

NN_SHAPE_RULE(MoeRouterGradOp) {
  RankedTensorType indices = tensorOf(adaptor.getIndices());
  if (failed(checkLogits<MoeRouterGradOp>(
          loc, adaptor.getLogits(),
          indices.getRank() ? indices.getShape().back() : 0)))
    return failure();
  SmallVector<int64_t> shape(tensorOf(adaptor.getLogits()).getShape());
  shape.back() = indices.getRank() ? indices.getShape().back() : 0;
  if (indices.getShape() != ArrayRef<int64_t>(shape))
    return reject<MoeRouterGradOp>(loc, "indices ", indices,
                                   " do not match the logits");
  Type weights = RankedTensorType::get(
      shape, tensorOf(adaptor.getLogits()).getElementType());
  if (failed(checkGrad<MoeRouterGradOp>(loc, adaptor.getGrad(), weights)))
    return failure();
  results.push_back(adaptor.getLogits().getType());
  return success();
}

NN_SHAPE_RULE(MoeAuxStatsGradOp) {
  RankedTensorType logits = tensorOf(adaptor.getLogits());
  int64_t experts = logits.getRank() ? logits.getShape().back() : 0;
  if (failed(checkGrad<MoeAuxStatsGradOp>(
          loc, adaptor.getGrad(), f32Tensor(context, {2 * experts + 1}))))
    return failure();
  results.push_back(logits);
  return success();
}

NN_SHAPE_RULE(MoeAuxCombineGradOp) {
  if (failed(checkStats<MoeAuxCombineGradOp>(loc, adaptor.getStats())) ||
      failed(checkGrad<MoeAuxCombineGradOp>(loc, adaptor.getGrad(),
                                            f32Tensor(context, {}))))
    return failure();
  results.push_back(adaptor.getStats().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

LogicalResult MoeRouterOp::buildGradient(GradientBuilder &grads) {
  Value dw = grads.grad(getWeights());
  if (dw && grads.needsGrad(getLogits()))
    grads.accumulate(getLogits(),
                     grads.make<MoeRouterGradOp>(getLogits(), getIndices(), dw,
                                                 getNormalizeAttr()));
  return success();
}

LogicalResult MoePermuteOp::buildGradient(GradientBuilder &grads) {
  // Each copy's gradient adds into its token's: the unweighted unpermute.
  Value drows = grads.grad(getRows());
  if (drows && grads.needsGrad(getInput()))
    grads.accumulate(getInput(),
                     grads.make<MoeUnpermuteOp>(drows, getIndices(), Value(),
                                                getNumExpertsAttr()));
  return success();
}

LogicalResult MoeUnpermuteOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  if (!dy)
    return success();
  if (!getWeights()) {
    if (grads.needsGrad(getRows()))
      grads.accumulate(
          getRows(),
          grads.make<MoePermuteOp>(dy, getIndices(), getNumExpertsAttr())
              .getRows());
    return success();
  }
  auto g = grads.make<MoeUnpermuteGradOp>(getRows(), getIndices(), getWeights(),
                                          dy, getNumExpertsAttr());
  grads.accumulate(getRows(), g.getRowsGrad());
  grads.accumulate(getWeights(), g.getWeightsGrad());
  return success();
}

LogicalResult GroupedLinearOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  if (!dy)
    return success();
  auto g = grads.make<GroupedLinearGradOp>(getInput(), getCounts(), getWeight(),
                                           dy, getActiveShareAttr());
  grads.accumulate(getInput(), g.getInputGrad());
  grads.accumulate(getWeight(), g.getWeightGrad());
  return success();
}

LogicalResult MoeAuxStatsOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  if (dy && grads.needsGrad(getLogits()))
    grads.accumulate(getLogits(),
                     grads.make<MoeAuxStatsGradOp>(getLogits(), dy));
  return success();
}

LogicalResult MoeAuxCombineOp::buildGradient(GradientBuilder &grads) {
  Value dy = grads.grad(getResult());
  if (dy && grads.needsGrad(getStats()))
    grads.accumulate(getStats(),
                     grads.make<MoeAuxCombineGradOp>(getStats(), dy));
  return success();
}

//===----------------------------------------------------------------------===//
// Partitioning over tp: each rank routes its tokens
//===----------------------------------------------------------------------===//

namespace {
/// The rule of an op on token-split operands: each result split on `result`,
/// replicated float operands (expert weights) whole, so their gradients sum
/// the ranks' parts.
ShardRule tokenLocal(Operation *op, ArrayRef<OperandShard> operands,
                     ArrayRef<OperandShard> results) {
  ShardRule rule;
  rule.results.assign(results.begin(), results.end());
  rule.operands.assign(operands.size(), {ReplicatedUse::Keep, 0});
  for (auto [i, s] : llvm::enumerate(operands))
    if (!s.isSplit() &&
        isa<FloatType>(tensorOf(op->getOperand(i)).getElementType()))
      rule.operands[i] = {ReplicatedUse::Whole, 0};
  return rule;
}

/// Fails unless operands `split` are split alike on a token dim (before the
/// features, the last dim; counts have only the one) and the others
/// replicated.
FailureOr<OperandShard> tokenSplit(Operation *op,
                                   ArrayRef<OperandShard> operands,
                                   ArrayRef<unsigned> split) {
  OperandShard token = operands[split.front()];
  for (auto [i, s] : llvm::enumerate(operands)) {
    bool wanted = llvm::is_contained(split, i);
    int64_t rank = tensorOf(op->getOperand(i)).getRank();
    if (wanted ? (s.dim != token.dim || s.groups != token.groups ||
                  (rank > 1 && s.dim >= rank - 1))
               : s.isSplit()) {
      InFlightDiagnostic diag =
          op->emitOpError("cannot be partitioned with operand #");
      diag << i << " " << describe(s)
           << "; a sparse layer splits only its tokens";
      return failure();
    }
  }
  return token;
}
} // namespace

FailureOr<ShardRule> MoeRouterOp::getShardRule(ArrayRef<OperandShard> operands,
                                               int64_t) {
  FailureOr<OperandShard> token = tokenSplit(*this, operands, {0});
  if (failed(token))
    return failure();
  return tokenLocal(*this, operands, {*token, *token});
}

FailureOr<ShardRule> MoePermuteOp::getShardRule(ArrayRef<OperandShard> operands,
                                                int64_t) {
  FailureOr<OperandShard> token = tokenSplit(*this, operands, {0, 1});
  if (failed(token))
    return failure();
  // The rank's rows and counts: said split on dim 0 so that only ops on
  // rows follow them.
  return tokenLocal(*this, operands, {OperandShard{0, 1}, OperandShard{0, 1}});
}

FailureOr<ShardRule>
GroupedLinearOp::getShardRule(ArrayRef<OperandShard> operands, int64_t) {
  if (failed(tokenSplit(*this, operands, {0, 1})))
    return failure();
  return tokenLocal(*this, operands, {OperandShard{0, 1}});
}

FailureOr<ShardRule>
MoeUnpermuteOp::getShardRule(ArrayRef<OperandShard> operands, int64_t) {
  if (operands[0].dim != 0 || operands[0].groups != 1)
    return emitOpError("takes rows ")
           << describe(operands[0])
           << "; token-split routing needs the rank's own rows";
  // The routing decides the result's split; the rows are the rank's.
  SmallVector<OperandShard> routing(operands);
  routing[0] = OperandShard{};
  SmallVector<unsigned> split = {1};
  if (getWeights())
    split.push_back(2);
  FailureOr<OperandShard> token = tokenSplit(*this, routing, split);
  if (failed(token))
    return failure();
  return tokenLocal(*this, operands, {*token});
}

LogicalResult MoeAuxStatsOp::partitionSplit(TPPartitioner &p) {
  Value logits = p.lookup(getLogits());
  OperandShard split = p.shardOf(logits);
  if (split.dim >= tensorOf(logits).getRank() - 1)
    return emitOpError("takes logits ")
           << p.describeLayout(logits) << "; only the tokens may be split";
  // Each rank's statistics, summed: the all-reduce's gradient is the
  // identity, so every rank's logits get the whole loss's gradient.
  Operation *local = p.rebuild({logits});
  if (!local)
    return failure();
  p.bind(0, p.allReduce(local->getResult(0), /*max=*/false), OperandShard{});
  return success();
}

//===----------------------------------------------------------------------===//
// Costs
//===----------------------------------------------------------------------===//

/// The rows a grouped product computes: the share balanced routing fills
/// when the expert-parallel dispatch states it, else all.
template <typename OpTy> static double activeRows(OpTy op) {
  double rows = static_cast<double>(tensorOf(op.getInput()).getDimSize(0));
  std::optional<APFloat> share = op.getActiveShare();
  return share ? rows * share->convertToDouble() : rows;
}

/// Streaming the active rows of the row operands plus the weight once.
template <typename OpTy> static OpCost groupedCost(OpTy op, double products) {
  RankedTensorType x = tensorOf(op.getInput());
  RankedTensorType w = tensorOf(op.getWeight());
  double rows = activeRows(op);
  double bytesPerElement = llvm::divideCeil(x.getElementTypeBitWidth(), 8);
  OpCost cost;
  cost.unit = CostUnit::Matmul;
  cost.flops = cost.modelFlops =
      products * 2 * rows * w.getDimSize(1) * w.getDimSize(2);
  cost.bytes = products * bytesPerElement *
               (rows * (x.getDimSize(1) + w.getDimSize(1)) +
                static_cast<double>(w.getNumElements()));
  cost.dtype = x.getElementType();
  return cost;
}

OpCost GroupedLinearOp::getCost() { return groupedCost(*this, 1); }
OpCost GroupedLinearGradOp::getCost() { return groupedCost(*this, 2); }

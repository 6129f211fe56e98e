//===- NNOps.cpp - nn dialect operations: shape and dtype rules -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Every nn op infers its result types here. The same code verifies parsed IR
// (the inferred types must equal the written ones) and gives the graph
// importer its result types, so a shape error reads the same either way.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Dialect/NN/IR/Gradient.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace fsdp::nn;

#include "fsdp/Dialect/NN/IR/NNInterfaces.cpp.inc"

#include "ShapeRules.h"

using namespace fsdp::nn::detail;

namespace {
/// The last two dims of `type`, swapped when `transposed`.
std::pair<int64_t, int64_t> matrixDims(RankedTensorType type, bool transposed) {
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  return transposed ? std::make_pair(cols, rows) : std::make_pair(rows, cols);
}

/// Checks a norm's per-feature operand (weight or bias) against the input.
template <typename OpTy>
LogicalResult checkFeatureVector(std::optional<Location> loc, StringRef what,
                                 Value input, Value vec) {
  if (!vec)
    return success();
  RankedTensorType in = tensorOf(input), v = tensorOf(vec);
  if (in.getRank() < 1)
    return reject<OpTy>(loc, "input must have rank >= 1");
  if (v.getRank() != 1 || v.getDimSize(0) != in.getShape().back())
    return reject<OpTy>(loc, what, " must be [", in.getShape().back(),
                        "] to match the input's last dim, got ", v);
  return sameElementType<OpTy>(loc, what, input, vec);
}

} // namespace

Operation *fsdp::nn::createWithShapeRule(OpBuilder &builder, Location loc,
                                         OperationName name,
                                         ValueRange operands,
                                         DictionaryAttr attributes) {
  auto *rule = name.getInterface<ShapeRuleOpInterface>();
  // The shape rules read defaulted attributes; a caller may omit them.
  NamedAttrList attrs(attributes);
  name.populateDefaultAttrs(attrs);
  attributes = attrs.getDictionary(builder.getContext());
  SmallVector<Type> types;
  if (!rule || failed(rule->inferResultTypes(builder.getContext(), loc,
                                             operands, attributes, types)))
    return nullptr;
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addAttributes(attributes.getValue());
  state.addTypes(types);
  return builder.create(state);
}

Operation *fsdp::nn::rebuildWithShapeRule(OpBuilder &builder, Operation &op,
                                          ValueRange operands,
                                          DictionaryAttr attributes) {
  Operation *copy = builder.clone(op);
  copy->setOperands(operands);
  if (attributes)
    copy->setAttrs(attributes);
  auto rule = dyn_cast<ShapeRuleOpInterface>(copy);
  SmallVector<Type> types;
  if (!rule || failed(rule.inferResultTypes(
                   copy->getContext(), copy->getLoc(), copy->getOperands(),
                   copy->getAttrDictionary(), types))) {
    copy->erase();
    return nullptr;
  }
  for (auto [result, type] : llvm::zip(copy->getResults(), types))
    result.setType(type);
  return copy;
}

LogicalResult fsdp::nn::verifyShapeRule(Operation *op) {
  // An attribute is the op's own or a dialect's (`dist.tp`, `fsdp.unit`):
  // a misspelt one (`tranpose_a`) would otherwise be kept and ignored.
  ArrayRef<StringAttr> known = op->getName().getAttributeNames();
  for (NamedAttribute attr : op->getAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name.contains('.') || llvm::is_contained(known, attr.getName()))
      continue;
    InFlightDiagnostic diag = op->emitOpError("has no attribute '")
                              << name << "' (it has ";
    llvm::interleaveComma(known, diag,
                          [&](StringAttr a) { diag << a.getValue(); });
    return diag << ")";
  }
  SmallVector<Type> inferred;
  if (failed(cast<ShapeRuleOpInterface>(op).inferResultTypes(
          op->getContext(), op->getLoc(), op->getOperands(),
          op->getAttrDictionary(), inferred)))
    return failure();
  if (TypeRange(inferred) == op->getResultTypes())
    return success();
  InFlightDiagnostic diag = op->emitOpError("result type");
  if (op->getNumResults() != 1)
    diag << "s";
  diag << " ";
  llvm::interleaveComma(op->getResultTypes(), diag);
  diag << " differ" << (op->getNumResults() == 1 ? "s" : "")
       << " from the inferred ";
  llvm::interleaveComma(inferred, diag);
  return diag;
}

//===----------------------------------------------------------------------===//
// Embedding and linear algebra
//===----------------------------------------------------------------------===//

NN_SHAPE_RULE(EmbeddingOp) {
  RankedTensorType table = tensorOf(adaptor.getTable());
  if (table.getRank() != 2)
    return reject<EmbeddingOp>(loc, "table must be [V, H], got ", table);
  if (Value index = adaptor.getShardIndex())
    if (failed(checkScalar<EmbeddingOp>(loc, "shard_index", index)))
      return failure();
  SmallVector<int64_t> shape(tensorOf(adaptor.getIds()).getShape());
  shape.push_back(table.getDimSize(1));
  results.push_back(RankedTensorType::get(shape, table.getElementType()));
  return success();
}

NN_SHAPE_RULE(LinearOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  RankedTensorType weight = tensorOf(adaptor.getWeight());
  if (input.getRank() < 1)
    return reject<LinearOp>(loc, "input must have rank >= 1");
  if (weight.getRank() != 2)
    return reject<LinearOp>(loc, "weight must be [N, K], got ", weight);
  if (weight.getDimSize(1) != input.getShape().back())
    return reject<LinearOp>(loc, "weight ", weight,
                            " does not match the input's last dim ",
                            input.getShape().back(), " (weight is [out, in])");
  if (failed(sameElementType<LinearOp>(loc, "weight", adaptor.getInput(),
                                       adaptor.getWeight())))
    return failure();
  if (Value bias = adaptor.getBias()) {
    RankedTensorType b = tensorOf(bias);
    if (b.getRank() != 1 || b.getDimSize(0) != weight.getDimSize(0))
      return reject<LinearOp>(loc, "bias must be [", weight.getDimSize(0),
                              "], got ", b);
    if (failed(
            sameElementType<LinearOp>(loc, "bias", adaptor.getInput(), bias)))
      return failure();
  }
  SmallVector<int64_t> shape(input.getShape());
  shape.back() = weight.getDimSize(0);
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(MatmulOp) {
  RankedTensorType lhs = tensorOf(adaptor.getLhs());
  RankedTensorType rhs = tensorOf(adaptor.getRhs());
  if (lhs.getRank() < 2)
    return reject<MatmulOp>(loc, "lhs must have rank >= 2, got ", lhs);
  if (rhs.getRank() != 2)
    return reject<MatmulOp>(loc, "rhs must have rank 2, got ", rhs,
                            " (use nn.batch_matmul for batched operands)");
  if (failed(sameElementType<MatmulOp>(loc, "rhs", adaptor.getLhs(),
                                       adaptor.getRhs())))
    return failure();
  auto [m, k] = matrixDims(lhs, adaptor.getTransposeA());
  auto [k2, n] = matrixDims(rhs, adaptor.getTransposeB());
  if (k != k2)
    return reject<MatmulOp>(loc, "contraction dims differ: lhs has ", k,
                            ", rhs has ", k2);
  SmallVector<int64_t> shape(lhs.getShape().drop_back(2));
  shape.append({m, n});
  results.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

NN_SHAPE_RULE(BatchMatmulOp) {
  RankedTensorType lhs = tensorOf(adaptor.getLhs());
  RankedTensorType rhs = tensorOf(adaptor.getRhs());
  if (lhs.getRank() < 3 || lhs.getRank() != rhs.getRank())
    return reject<BatchMatmulOp>(
        loc, "operands must have the same rank >= 3, got ", lhs, " and ", rhs);
  if (lhs.getShape().drop_back(2) != rhs.getShape().drop_back(2))
    return reject<BatchMatmulOp>(loc, "batch dims differ: ", lhs, " vs ", rhs);
  if (failed(sameElementType<BatchMatmulOp>(loc, "rhs", adaptor.getLhs(),
                                            adaptor.getRhs())))
    return failure();
  auto [m, k] = matrixDims(lhs, adaptor.getTransposeA());
  auto [k2, n] = matrixDims(rhs, adaptor.getTransposeB());
  if (k != k2)
    return reject<BatchMatmulOp>(loc, "contraction dims differ: lhs has ", k,
                                 ", rhs has ", k2);
  SmallVector<int64_t> shape(lhs.getShape().drop_back(2));
  shape.append({m, n});
  results.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

LogicalResult GeluOp::verify() {
  StringRef approximate = getApproximate();
  if (approximate != "none" && approximate != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << approximate << "\"";
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization, rotary embedding, attention, softmax
//===----------------------------------------------------------------------===//

NN_SHAPE_RULE(RMSNormOp) {
  if (adaptor.getEps().convertToDouble() < 0.0)
    return reject<RMSNormOp>(loc, "eps must be >= 0");
  if (failed(checkFeatureVector<RMSNormOp>(loc, "weight", adaptor.getInput(),
                                           adaptor.getWeight())))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

NN_SHAPE_RULE(LayerNormOp) {
  if (adaptor.getEps().convertToDouble() < 0.0)
    return reject<LayerNormOp>(loc, "eps must be >= 0");
  if (failed(checkFeatureVector<LayerNormOp>(loc, "weight", adaptor.getInput(),
                                             adaptor.getWeight())) ||
      failed(checkFeatureVector<LayerNormOp>(loc, "bias", adaptor.getInput(),
                                             adaptor.getBias())))
    return failure();
  results.push_back(adaptor.getInput().getType());
  return success();
}

NN_SHAPE_RULE(RotaryOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  RankedTensorType pos = tensorOf(adaptor.getPositions());
  if (input.getRank() != 4)
    return reject<RotaryOp>(loc, "input must be [B, S, N, D], got ", input);
  if (input.getDimSize(3) % 2 != 0)
    return reject<RotaryOp>(loc, "head dim ", input.getDimSize(3),
                            " must be even");
  if (pos.getShape() != input.getShape().take_front(2))
    return reject<RotaryOp>(loc, "positions must be [", input.getDimSize(0),
                            ", ", input.getDimSize(1), "], got ", pos);
  if (!(adaptor.getTheta().convertToDouble() > 0.0))
    return reject<RotaryOp>(loc, "theta must be > 0");
  if (std::optional<ArrayRef<double>> freq = adaptor.getInvFreq()) {
    if (int64_t(freq->size()) != input.getDimSize(3) / 2)
      return reject<RotaryOp>(
          loc, "inv_freq has ", freq->size(),
          " entries, expected head dim / 2 = ", input.getDimSize(3) / 2);
    if (!llvm::all_of(*freq,
                      [](double f) { return std::isfinite(f) && f > 0.0; }))
      return reject<RotaryOp>(loc, "inv_freq entries must be finite and > 0");
  }
  double scaling = adaptor.getAttentionScaling().convertToDouble();
  if (!std::isfinite(scaling) || !(scaling > 0.0))
    return reject<RotaryOp>(loc, "attention_scaling must be finite and > 0");
  results.push_back(adaptor.getInput().getType());
  return success();
}

NN_SHAPE_RULE(AttentionOp) {
  RankedTensorType q = tensorOf(adaptor.getQuery());
  RankedTensorType k = tensorOf(adaptor.getKey());
  RankedTensorType v = tensorOf(adaptor.getValue());
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return reject<AttentionOp>(loc,
                               "query, key and value must be "
                               "[B, S, N, D], got ",
                               q, ", ", k, ", ", v);
  if (failed(sameElementType<AttentionOp>(loc, "key", adaptor.getQuery(),
                                          adaptor.getKey())) ||
      failed(sameElementType<AttentionOp>(loc, "value", adaptor.getQuery(),
                                          adaptor.getValue())))
    return failure();
  if (k.getDimSize(0) != q.getDimSize(0) || v.getDimSize(0) != q.getDimSize(0))
    return reject<AttentionOp>(loc, "batch sizes differ");
  if (k.getDimSize(1) != v.getDimSize(1) || k.getDimSize(2) != v.getDimSize(2))
    return reject<AttentionOp>(loc, "key ", k, " and value ", v,
                               " must agree on sequence and head count");
  if (k.getDimSize(3) != q.getDimSize(3))
    return reject<AttentionOp>(loc, "query head dim ", q.getDimSize(3),
                               " differs from key head dim ", k.getDimSize(3));
  if (q.getDimSize(2) % k.getDimSize(2) != 0)
    return reject<AttentionOp>(loc, "query heads ", q.getDimSize(2),
                               " are not a multiple of key/value heads ",
                               k.getDimSize(2));
  if (std::optional<int64_t> window = adaptor.getSlidingWindow()) {
    if (*window < 1)
      return reject<AttentionOp>(loc, "sliding_window must be >= 1, got ",
                                 *window);
    if (!adaptor.getCausal())
      return reject<AttentionOp>(loc, "sliding_window requires causal");
  }
  if (std::optional<APFloat> scale = adaptor.getScale())
    if (!(scale->convertToDouble() > 0.0))
      return reject<AttentionOp>(loc, "scale must be > 0");
  ValueRange positions = adaptor.getPositions();
  bool packed = adaptor.getPacked();
  if (packed && !adaptor.getCausal())
    return reject<AttentionOp>(loc, "packed requires causal");
  if (packed && positions.empty())
    return reject<AttentionOp>(
        loc, "packed needs the queries' positions in their documents "
             "(position_ids) as its first positions");
  if (positions.size() > 2 + packed)
    return reject<AttentionOp>(loc,
                               packed ? "takes the document positions, the "
                                        "queries' and the keys' positions, got "
                                      : "takes the queries' and the keys' "
                                        "positions, got ",
                               positions.size(), " tensors");
  for (auto [i, v] : llvm::enumerate(positions)) {
    // The document positions and the queries' are the queries'.
    bool ofKeys = i == size_t(1 + packed);
    RankedTensorType of = ofKeys ? k : q;
    if (tensorOf(v).getShape() !=
        ArrayRef<int64_t>{of.getDimSize(0), of.getDimSize(1)})
      return reject<AttentionOp>(loc,
                                 packed && i == 0 ? "document"
                                 : ofKeys         ? "key"
                                                  : "query",
                                 " positions ", v.getType(),
                                 " must be [B, S] of ", of);
  }
  results.push_back(RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), v.getDimSize(3)},
      q.getElementType()));
  results.push_back(
      RankedTensorType::get({q.getDimSize(0), q.getDimSize(2), q.getDimSize(1)},
                            Float32Type::get(q.getContext())));
  return success();
}

NN_SHAPE_RULE(AttentionCombineOp) {
  RankedTensorType o = tensorOf(adaptor.getResultA());
  RankedTensorType lse = tensorOf(adaptor.getLogsumexpA());
  if (o.getRank() != 4)
    return reject<AttentionCombineOp>(loc,
                                      "results must be [B, S, Nq, Dv], "
                                      "got ",
                                      o);
  auto stats =
      RankedTensorType::get({o.getDimSize(0), o.getDimSize(2), o.getDimSize(1)},
                            Float32Type::get(o.getContext()));
  if (lse != stats)
    return reject<AttentionCombineOp>(loc, "logsumexp ", lse, " is not the ",
                                      stats, " of ", o);
  if (adaptor.getResultB().getType() != o ||
      adaptor.getLogsumexpB().getType() != lse)
    return reject<AttentionCombineOp>(loc, "the two attentions differ: ", o,
                                      ", ", lse, " and ",
                                      adaptor.getResultB().getType(), ", ",
                                      adaptor.getLogsumexpB().getType());
  results.append({o, lse});
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return normalizeDim<SoftmaxOp>(getLoc(), getDim(),
                                 getInput().getType().getRank());
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

NN_SHAPE_RULE(ReshapeOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> shape = adaptor.getShape();
  int64_t count = 1;
  for (int64_t d : shape) {
    if (d < 1)
      return reject<ReshapeOp>(loc, "shape entries must be >= 1, got ", d);
    if (llvm::MulOverflow(count, d, count))
      return reject<ReshapeOp>(loc, "shape's element count overflows int64");
  }
  if (count != input.getNumElements())
    return reject<ReshapeOp>(loc, "shape has ", count, " elements but ", input,
                             " has ", input.getNumElements());
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(TransposeOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return reject<TransposeOp>(loc, "perm has ", perm.size(),
                               " entries for rank ", input.getRank());
  SmallVector<bool> seen(perm.size(), false);
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= input.getRank() || seen[p])
      return reject<TransposeOp>(loc, "perm is not a permutation of [0, ",
                                 input.getRank(), ")");
    seen[p] = true;
    shape.push_back(input.getDimSize(p));
  }
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(SliceOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  FailureOr<int64_t> dim =
      normalizeDim<SliceOp>(loc, adaptor.getDim(), input.getRank());
  if (failed(dim))
    return failure();
  int64_t start = adaptor.getStart(), size = adaptor.getSize();
  if (start < 0 || size < 1 || start > input.getDimSize(*dim) ||
      size > input.getDimSize(*dim) - start)
    return reject<SliceOp>(loc, "range starting at ", start, " of size ", size,
                           " is not inside dim ", *dim, " of size ",
                           input.getDimSize(*dim));
  SmallVector<int64_t> shape(input.getShape());
  shape[*dim] = size;
  results.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

NN_SHAPE_RULE(SplitOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  FailureOr<int64_t> dim =
      normalizeDim<SplitOp>(loc, adaptor.getDim(), input.getRank());
  if (failed(dim))
    return failure();
  ArrayRef<int64_t> sizes = adaptor.getSizes();
  if (sizes.empty())
    return reject<SplitOp>(loc, "needs at least one size");
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 1)
      return reject<SplitOp>(loc, "sizes must be >= 1, got ", size);
    total += size;
  }
  if (total != input.getDimSize(*dim))
    return reject<SplitOp>(loc, "sizes sum to ", total, " but dim ", *dim,
                           " has size ", input.getDimSize(*dim));
  for (int64_t size : sizes) {
    SmallVector<int64_t> shape(input.getShape());
    shape[*dim] = size;
    results.push_back(RankedTensorType::get(shape, input.getElementType()));
  }
  return success();
}

/// The shape of `inputs` joined along `dim` (normalized there), or an
/// error at `loc` in the words of `OpTy`.
template <typename OpTy>
static FailureOr<SmallVector<int64_t>>
joinedShape(std::optional<Location> loc, ValueRange inputs, int64_t &dim) {
  if (inputs.empty())
    return reject<OpTy>(loc, "needs at least one input");
  RankedTensorType first = tensorOf(inputs.front());
  FailureOr<int64_t> normalized = normalizeDim<OpTy>(loc, dim, first.getRank());
  if (failed(normalized))
    return failure();
  dim = *normalized;
  SmallVector<int64_t> shape(first.getShape());
  for (Value input : inputs.drop_front()) {
    RankedTensorType t = tensorOf(input);
    if (t.getRank() != first.getRank() ||
        t.getElementType() != first.getElementType())
      return reject<OpTy>(loc, "input ", t, " does not match ", first);
    for (int64_t d = 0; d < first.getRank(); ++d)
      if (d != dim && t.getDimSize(d) != first.getDimSize(d))
        return reject<OpTy>(loc, "input ", t, " differs from ", first,
                            " outside dim ", dim);
    shape[dim] += t.getDimSize(dim);
  }
  return shape;
}

NN_SHAPE_RULE(ConcatOp) {
  int64_t dim = adaptor.getDim();
  FailureOr<SmallVector<int64_t>> shape =
      joinedShape<ConcatOp>(loc, adaptor.getInputs(), dim);
  if (failed(shape))
    return failure();
  results.push_back(RankedTensorType::get(
      *shape, tensorOf(adaptor.getInputs().front()).getElementType()));
  return success();
}

NN_SHAPE_RULE(RollOp) {
  int64_t dim = adaptor.getDim();
  FailureOr<SmallVector<int64_t>> shape =
      joinedShape<RollOp>(loc, adaptor.getInputs(), dim);
  if (failed(shape))
    return failure();
  int64_t block = adaptor.getBlock();
  for (Value input : adaptor.getInputs())
    if (block < 1 || tensorOf(input).getDimSize(dim) % block != 0)
      return reject<RollOp>(loc, "block ", block, " does not divide dim ", dim,
                            " of ", input.getType());
  if (tensorOf(adaptor.getShift()).getRank() != 0)
    return reject<RollOp>(loc, "shift must be a scalar, got ",
                          adaptor.getShift().getType());
  int64_t blocks = (*shape)[dim] / block;
  std::optional<uint64_t> count = adaptor.getCount();
  if (count && (*count < 1 || static_cast<int64_t>(*count) > blocks))
    return reject<RollOp>(loc, "count ", static_cast<int64_t>(*count),
                          " is not between 1 and the ", blocks, " blocks");
  if (count)
    (*shape)[dim] = static_cast<int64_t>(*count) * block;
  results.push_back(RankedTensorType::get(
      *shape, tensorOf(adaptor.getInputs().front()).getElementType()));
  return success();
}

NN_SHAPE_RULE(CastOp) {
  Type dtype = adaptor.getDtype();
  if (!dtype.isF32() && !dtype.isBF16() && !dtype.isF16())
    return reject<CastOp>(loc, "dtype must be f32, bf16 or f16, got ", dtype);
  results.push_back(tensorOf(adaptor.getInput()).clone(dtype));
  return success();
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

namespace {
/// The f32 result of a loss with `reduction`: per position (`none`, shaped
/// like the labels) or a scalar (`mean`, `sum`).
template <typename OpTy>
LogicalResult lossResult(MLIRContext *context, std::optional<Location> loc,
                         StringRef reduction, ArrayRef<int64_t> positions,
                         SmallVectorImpl<Type> &results) {
  Type f32 = Float32Type::get(context);
  if (reduction == "none")
    results.push_back(RankedTensorType::get(positions, f32));
  else if (reduction == "mean" || reduction == "sum")
    results.push_back(RankedTensorType::get({}, f32));
  else
    return reject<OpTy>(
        loc, "reduction must be \"mean\", \"sum\" or \"none\", got \"",
        reduction, "\"");
  return success();
}
} // namespace

NN_SHAPE_RULE(CrossEntropyOp) {
  RankedTensorType logits = tensorOf(adaptor.getLogits());
  RankedTensorType labels = tensorOf(adaptor.getLabels());
  if (logits.getRank() < 1)
    return reject<CrossEntropyOp>(loc, "logits must have rank >= 1");
  if (labels.getShape() != logits.getShape().drop_back())
    return reject<CrossEntropyOp>(loc, "labels ", labels,
                                  " must have the logits' shape without the "
                                  "class dim, logits are ",
                                  logits);
  return lossResult<CrossEntropyOp>(context, loc, adaptor.getReduction(),
                                    labels.getShape(), results);
}

NN_SHAPE_RULE(ReduceMaxOp) {
  RankedTensorType input = tensorOf(adaptor.getInput());
  if (input.getRank() < 1)
    return reject<ReduceMaxOp>(loc, "input must have rank >= 1");
  results.push_back(RankedTensorType::get(input.getShape().drop_back(),
                                          input.getElementType()));
  return success();
}

namespace {
/// `labels` must be `logits` without its class dim.
template <typename OpTy>
LogicalResult checkLabels(std::optional<Location> loc, RankedTensorType logits,
                          Value labels) {
  if (logits.getRank() < 1)
    return reject<OpTy>(loc, "logits must have rank >= 1");
  if (tensorOf(labels).getShape() != logits.getShape().drop_back())
    return reject<OpTy>(loc, "labels ", labels.getType(),
                        " must have the logits' shape without the class "
                        "dim, logits are ",
                        logits);
  return success();
}

/// A per-position f32 operand must have the labels' shape.
template <typename OpTy>
LogicalResult checkPerPosition(std::optional<Location> loc, StringRef what,
                               Value v, Value labels) {
  if (tensorOf(v).getShape() == tensorOf(labels).getShape())
    return success();
  return reject<OpTy>(loc, what, " ", v.getType(),
                      " must have the labels' shape ", labels.getType());
}
} // namespace

NN_SHAPE_RULE(CrossEntropyPartialOp) {
  RankedTensorType logits = tensorOf(adaptor.getLogits());
  if (failed(checkLabels<CrossEntropyPartialOp>(loc, logits,
                                                adaptor.getLabels())) ||
      failed(checkPerPosition<CrossEntropyPartialOp>(
          loc, "shift", adaptor.getShift(), adaptor.getLabels())) ||
      failed(checkScalar<CrossEntropyPartialOp>(loc, "shard_index",
                                                adaptor.getShardIndex())))
    return failure();
  auto perPosition = RankedTensorType::get(logits.getShape().drop_back(),
                                           Float32Type::get(context));
  results.append({perPosition, perPosition});
  return success();
}

NN_SHAPE_RULE(CrossEntropyCombineOp) {
  Value labels = adaptor.getLabels();
  if (failed(checkPerPosition<CrossEntropyCombineOp>(
          loc, "sum_exp", adaptor.getSumExp(), labels)) ||
      failed(checkPerPosition<CrossEntropyCombineOp>(
          loc, "target", adaptor.getTarget(), labels)))
    return failure();
  return lossResult<CrossEntropyCombineOp>(context, loc, adaptor.getReduction(),
                                           tensorOf(labels).getShape(),
                                           results);
}

#define GET_OP_CLASSES
#include "fsdp/Dialect/NN/IR/NNOps.cpp.inc"

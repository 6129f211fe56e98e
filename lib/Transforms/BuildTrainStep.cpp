//===- BuildTrainStep.cpp - Forward function to training step -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-build-train-step`: loss normalization, microbatching,
// reverse-mode autodiff of nn ops, gradient clipping and the optimizer. Every
// op is built through its shape rule (ShapeRuleOpInterface), so a backward
// rule that produced an ill-typed op is caught where it is built.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

namespace fsdp {
#define GEN_PASS_DEF_BUILDTRAINSTEPPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using namespace fsdp::nn;

namespace {

/// Builds nn ops with their inferred result types.
class Builder {
public:
  Builder(OpBuilder &b, Location loc) : b(b), loc(loc) {}

  /// Creates op `OpTy`; returns null (after an error) if its rule rejects
  /// the operands, which would be a bug in a backward rule.
  template <typename OpTy>
  Operation *op(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    Operation *o = createWithShapeRule(
        b, loc, OperationName(OpTy::getOperationName(), b.getContext()),
        operands, b.getDictionaryAttr(attrs));
    count += o != nullptr;
    return o;
  }
  template <typename OpTy>
  Value value(ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
    Operation *o = op<OpTy>(operands, attrs);
    return o ? o->getResult(0) : Value();
  }

  NamedAttribute attr(StringRef name, Attribute value) {
    return b.getNamedAttr(name, value);
  }
  NamedAttribute i64(StringRef name, int64_t v) {
    return attr(name, b.getI64IntegerAttr(v));
  }
  NamedAttribute f64(StringRef name, double v) {
    return attr(name, b.getF64FloatAttr(v));
  }
  NamedAttribute ints(StringRef name, ArrayRef<int64_t> v) {
    return attr(name, b.getDenseI64ArrayAttr(v));
  }
  NamedAttribute unit(StringRef name) { return attr(name, b.getUnitAttr()); }

  Value fill(double v, RankedTensorType type) {
    ++count;
    return FillOp::create(b, loc, v, type).getResult();
  }
  Value reshape(Value x, ArrayRef<int64_t> shape) {
    if (tensorOf(x).getShape() == shape)
      return x;
    return value<ReshapeOp>({x}, {ints("shape", shape)});
  }
  /// Sums `g` down to `type` (the transpose of broadcasting).
  Value sumTo(Value g, Type type) {
    if (!g || g.getType() == type)
      return g;
    return value<ReduceSumToOp>(
        {g}, {ints("shape", cast<RankedTensorType>(type).getShape())});
  }
  /// `x` flattened to [rows, last dim].
  Value rows(Value x) {
    RankedTensorType t = tensorOf(x);
    int64_t last = t.getShape().back();
    return reshape(x, {t.getNumElements() / last, last});
  }

  OpBuilder &b;
  Location loc;
  unsigned count = 0;
};

/// The gradients of values, accumulated over their uses.
class Gradients {
public:
  explicit Gradients(Builder &build) : build(build) {}

  void add(Value v, Value g) {
    if (!g)
      return;
    Value &slot = grads[v];
    slot = slot ? build.value<AddOp>({slot, g}) : g;
  }
  Value get(Value v) const { return grads.lookup(v); }

private:
  Builder &build;
  DenseMap<Value, Value> grads;
};

/// Reverse-mode rules: given the result gradients of `op`, adds the
/// gradients of its operands that `needs` holds.
/// FSDP2's deferred gradient sync (defer_fsdp_grad_sync): the gradients of
/// each unit's gathered parameters are summed over the microbatches, whole,
/// and reduce-scattered once, in the last microbatch's backward.
struct DeferredSync {
  bool enabled = false;
  bool lastMicrobatch = true;
  /// Per unit, the sum of the earlier microbatches' gathered gradients.
  llvm::StringMap<Value> pending;
};

class Backward {
public:
  Backward(Builder &build, Gradients &grads, const DenseSet<Value> &needs,
           Type reduceType, DeferredSync &deferred)
      : build(build), grads(grads), needs(needs), reduceType(reduceType),
        deferred(deferred) {}

  LogicalResult run(Operation *op);

private:
  bool need(Value v) const { return v && needs.contains(v); }
  void add(Value v, Value g) {
    if (need(v))
      grads.add(v, g);
  }

  LogicalResult linear(LinearOp op, Value dy);
  LogicalResult collective(dist::CollectiveOpInterface op, Value dy);
  /// `v` in reduce_dtype, to cross ranks.
  Value toReduce(Value v) {
    Type own = tensorOf(v).getElementType();
    if (!reduceType || reduceType == own)
      return v;
    return build.value<CastOp>(
        {v}, {build.attr("dtype", TypeAttr::get(reduceType))});
  }
  /// `v` back in element type `own` after crossing ranks.
  Value fromReduce(Value v, Type own) {
    if (tensorOf(v).getElementType() == own)
      return v;
    return build.value<CastOp>({v}, {build.attr("dtype", TypeAttr::get(own))});
  }
  LogicalResult matmul(MatmulOp op, Value dy);
  LogicalResult batchMatmul(BatchMatmulOp op, Value dy);

  Builder &build;
  Gradients &grads;
  const DenseSet<Value> &needs;
  /// MixedPrecisionPolicy.reduce_dtype: gradients are reduced across ranks
  /// in this type (null: their own).
  Type reduceType;
  DeferredSync &deferred;
};

LogicalResult Backward::collective(dist::CollectiveOpInterface op, Value dy) {
  if (op.isAsync())
    return op->emitOpError("in its asynchronous form has no gradient rule; "
                           "differentiate before scheduling");
  Value x = op.getInput();
  if (!need(x))
    return success();
  OpBuilder &b = build.b;
  Location loc = op->getLoc();
  // A gradient crosses ranks in reduce_dtype and comes back in its own type.
  Type own = tensorOf(dy).getElementType();
  auto like = [&](Value v, RankedTensorType shape) {
    return RankedTensorType::get(shape.getShape(),
                                 tensorOf(v).getElementType());
  };
  FlatSymbolRefAttr mesh = op.getMeshAttr();
  ArrayAttr axes = op.getMeshAxes();
  auto sum =
      dist::ReductionKindAttr::get(b.getContext(), dist::ReductionKind::sum);
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](dist::AllGatherOp o) {
        if (auto unit = o->getAttrOfType<StringAttr>("fsdp.unit");
            unit && deferred.enabled) {
          // Deferred sync: hold the whole gradient until the last
          // microbatch, then reduce-scatter the sum once.
          Value &sum = deferred.pending[unit.getValue()];
          sum = sum ? build.value<AddOp>({sum, dy}) : dy;
          if (!deferred.lastMicrobatch)
            return success();
          dy = sum;
          sum = Value();
        }
        if (o.getReplicatedGrad()) {
          // Every rank holds the whole gradient: keep this rank's block.
          auto slice =
              dist::AllSliceOp::create(b, loc, like(dy, tensorOf(x)), dy, mesh,
                                       axes, o.getGatherDimAttr());
          ++build.count;
          add(x, slice.getResult());
          return success();
        }
        // all_gather's transpose: reduce_scatter (sum) along the same dim.
        Value g = toReduce(dy);
        auto rs =
            dist::ReduceScatterOp::create(b, loc, like(g, tensorOf(x)), g, mesh,
                                          axes, sum, o.getGatherDimAttr());
        ++build.count;
        add(x, fromReduce(rs.getResult(), own));
        return success();
      })
      .Case([&](dist::ReduceScatterOp o) -> LogicalResult {
        if (o.getReduction() != dist::ReductionKind::sum)
          return o.emitOpError("with a non-sum reduction has no gradient "
                               "rule");
        auto ag = dist::AllGatherOp::create(b, loc, like(dy, tensorOf(x)), dy,
                                            mesh, axes, o.getScatterDimAttr());
        ++build.count;
        add(x, ag.getResult());
        return success();
      })
      .Case([&](dist::AllReduceOp o) -> LogicalResult {
        // Megatron's g: the reduced value is replicated and so is its
        // gradient; each rank's partial sum receives it unchanged.
        if (o.getReduction() != dist::ReductionKind::sum)
          return o.emitOpError("with a non-sum reduction has no gradient "
                               "rule");
        add(x, dy);
        return success();
      })
      .Case([&](dist::AllToAllOp o) {
        auto a2a = dist::AllToAllOp::create(b, loc, like(dy, tensorOf(x)), dy,
                                            mesh, axes, o.getConcatDimAttr(),
                                            o.getSplitDimAttr());
        ++build.count;
        add(x, a2a.getResult());
        return success();
      })
      .Case([&](dist::PermuteOp o) {
        auto back = dist::PermuteOp::create(
            b, loc, dy.getType(), dy, mesh, axes,
            b.getI64IntegerAttr(-static_cast<int64_t>(o.getOffset())));
        ++build.count;
        add(x, back.getResult());
        return success();
      })
      .Default(
          [&](Operation *) { return op->emitOpError("has no gradient rule"); });
}

LogicalResult Backward::linear(LinearOp op, Value dy) {
  Value x = op.getInput(), w = op.getWeight(), bias = op.getBias();
  if (need(x))
    add(x, build.value<MatmulOp>({dy, w}));
  if (need(w))
    add(w, build.value<MatmulOp>({build.rows(dy), build.rows(x)},
                                 {build.unit("transpose_a")}));
  if (need(bias))
    add(bias, build.sumTo(dy, bias.getType()));
  return success();
}

LogicalResult Backward::matmul(MatmulOp op, Value dy) {
  if (op.getTransposeA())
    return op.emitOpError("with transpose_a has no gradient rule yet");
  Value a = op.getLhs(), b = op.getRhs();
  bool tb = op.getTransposeB();
  // C = A · op(B): dA = dC · op(B)ᵀ; d op(B) = Aᵀ · dC over all rows.
  if (need(a))
    add(a, tb ? build.value<MatmulOp>({dy, b})
              : build.value<MatmulOp>({dy, b}, {build.unit("transpose_b")}));
  if (need(b)) {
    Value a2 = build.rows(a), dy2 = build.rows(dy);
    add(b, tb ? build.value<MatmulOp>({dy2, a2}, {build.unit("transpose_a")})
              : build.value<MatmulOp>({a2, dy2}, {build.unit("transpose_a")}));
  }
  return success();
}

LogicalResult Backward::batchMatmul(BatchMatmulOp op, Value dy) {
  if (op.getTransposeA())
    return op.emitOpError("with transpose_a has no gradient rule yet");
  Value a = op.getLhs(), b = op.getRhs();
  bool tb = op.getTransposeB();
  if (need(a))
    add(a,
        tb ? build.value<BatchMatmulOp>({dy, b})
           : build.value<BatchMatmulOp>({dy, b}, {build.unit("transpose_b")}));
  if (need(b))
    add(b,
        tb ? build.value<BatchMatmulOp>({dy, a}, {build.unit("transpose_a")})
           : build.value<BatchMatmulOp>({a, dy}, {build.unit("transpose_a")}));
  return success();
}

LogicalResult Backward::run(Operation *op) {
  // Ops whose results carry no gradient contribute nothing.
  SmallVector<Value> dys;
  bool any = false;
  for (Value r : op->getResults()) {
    dys.push_back(grads.get(r));
    any |= bool(dys.back());
  }
  if (!any)
    return success();
  Value dy = dys.front();
  auto same = [&](Value operand, Value g) { add(operand, g); };

  if (auto c = dyn_cast<dist::CollectiveOpInterface>(op))
    return collective(c, dy);
  if (auto slice = dyn_cast<dist::AllSliceOp>(op)) {
    // Each rank kept its block of a replicated value: the value's gradient
    // is the blocks' gradients side by side.
    if (!need(slice.getInput()))
      return success();
    auto type = RankedTensorType::get(slice.getInput().getType().getShape(),
                                      tensorOf(dy).getElementType());
    auto ag = dist::AllGatherOp::create(
        build.b, slice.getLoc(), type, dy, slice.getMeshAttr(),
        slice.getMeshAxes(), slice.getSliceDimAttr());
    ++build.count;
    add(slice.getInput(), ag.getResult());
    return success();
  }
  if (auto copy = dyn_cast<dist::CopyOp>(op)) {
    // Megatron's f: the replicated input's gradient sums the ranks' parts.
    if (!need(copy.getInput()))
      return success();
    OpBuilder &b = build.b;
    Value g = toReduce(dy);
    auto ar = dist::AllReduceOp::create(
        b, copy.getLoc(), g.getType(), g, copy.getMeshAttr(),
        copy.getMeshAxes(),
        dist::ReductionKindAttr::get(b.getContext(), dist::ReductionKind::sum));
    ++build.count;
    add(copy.getInput(),
        fromReduce(ar.getResult(), tensorOf(dy).getElementType()));
    return success();
  }
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](EmbeddingOp o) {
        SmallVector<Value> operands = {o.getIds(), dy};
        if (Value index = o.getShardIndex())
          operands.push_back(index);
        if (need(o.getTable()))
          add(o.getTable(),
              build.value<EmbeddingGradOp>(
                  operands, {build.i64("num_embeddings",
                                       o.getTable().getType().getDimSize(0))}));
        return success();
      })
      .Case([&](CrossEntropyPartialOp o) {
        // The shift gets no gradient: it cancels out of the loss.
        auto perPosition = tensorOf(o.getSumExp());
        Value dSum = dys[0] ? dys[0] : build.fill(0.0, perPosition);
        Value dTarget = dys[1] ? dys[1] : build.fill(0.0, perPosition);
        SmallVector<NamedAttribute> attrs = {
            build.attr("ignore_index", o.getIgnoreIndexAttr())};
        if (o.getNumClassesAttr())
          attrs.push_back(build.attr("num_classes", o.getNumClassesAttr()));
        same(o.getLogits(), build.value<CrossEntropyPartialGradOp>(
                                {o.getLogits(), o.getLabels(), o.getShift(),
                                 o.getShardIndex(), dSum, dTarget},
                                attrs));
        return success();
      })
      .Case([&](CrossEntropyCombineOp o) -> LogicalResult {
        Operation *g = build.op<CrossEntropyCombineGradOp>(
            {o.getSumExp(), o.getLabels(), dy},
            {build.attr("ignore_index", o.getIgnoreIndexAttr()),
             build.attr("reduction", o.getReductionAttr())});
        if (!g)
          return failure();
        add(o.getSumExp(), g->getResult(0));
        add(o.getTarget(), g->getResult(1));
        return success();
      })
      .Case([&](LinearOp o) { return linear(o, dy); })
      .Case([&](MatmulOp o) { return matmul(o, dy); })
      .Case([&](BatchMatmulOp o) { return batchMatmul(o, dy); })
      .Case([&](AddOp o) {
        same(o.getLhs(), build.sumTo(dy, o.getLhs().getType()));
        same(o.getRhs(), build.sumTo(dy, o.getRhs().getType()));
        return success();
      })
      .Case([&](SubOp o) {
        same(o.getLhs(), build.sumTo(dy, o.getLhs().getType()));
        if (need(o.getRhs()))
          add(o.getRhs(),
              build.value<NegOp>({build.sumTo(dy, o.getRhs().getType())}));
        return success();
      })
      .Case([&](MulOp o) {
        if (need(o.getLhs()))
          add(o.getLhs(), build.sumTo(build.value<MulOp>({dy, o.getRhs()}),
                                      o.getLhs().getType()));
        if (need(o.getRhs()))
          add(o.getRhs(), build.sumTo(build.value<MulOp>({dy, o.getLhs()}),
                                      o.getRhs().getType()));
        return success();
      })
      .Case([&](NegOp o) {
        same(o.getInput(), build.value<NegOp>({dy}));
        return success();
      })
      .Case([&](ScaleOp o) {
        same(o.getInput(),
             build.value<ScaleOp>({dy},
                                  {build.attr("factor", o.getFactorAttr())}));
        return success();
      })
      .Case([&](SiluOp o) {
        same(o.getInput(), build.value<SiluGradOp>({o.getInput(), dy}));
        return success();
      })
      .Case([&](GeluOp o) {
        same(o.getInput(),
             build.value<GeluGradOp>(
                 {o.getInput(), dy},
                 {build.attr("approximate", o.getApproximateAttr())}));
        return success();
      })
      .Case([&](RMSNormOp o) {
        Operation *g =
            build.op<RMSNormGradOp>({o.getInput(), o.getWeight(), dy},
                                    {build.attr("eps", o.getEpsAttr())});
        if (!g)
          return failure();
        add(o.getInput(), g->getResult(0));
        add(o.getWeight(), g->getResult(1));
        return success();
      })
      .Case([&](LayerNormOp o) {
        Operation *g =
            build.op<LayerNormGradOp>({o.getInput(), o.getWeight(), dy},
                                      {build.attr("eps", o.getEpsAttr())});
        if (!g)
          return failure();
        add(o.getInput(), g->getResult(0));
        add(o.getWeight(), g->getResult(1));
        add(o.getBias(), g->getResult(2));
        return success();
      })
      .Case([&](RotaryOp o) {
        SmallVector<NamedAttribute> attrs = {
            build.attr("theta", o.getThetaAttr()),
            build.attr("attention_scaling", o.getAttentionScalingAttr())};
        if (o.getInvFreqAttr())
          attrs.push_back(build.attr("inv_freq", o.getInvFreqAttr()));
        if (!o.getInverse())
          attrs.push_back(build.unit("inverse"));
        same(o.getInput(),
             build.value<RotaryOp>({dy, o.getPositions()}, attrs));
        return success();
      })
      .Case([&](AttentionOp o) {
        SmallVector<NamedAttribute> attrs;
        for (StringRef name : {"causal", "sliding_window", "scale"})
          if (Attribute a = o->getAttr(name))
            attrs.push_back(build.attr(name, a));
        Operation *g = build.op<AttentionGradOp>(
            {o.getQuery(), o.getKey(), o.getValue(), dy}, attrs);
        if (!g)
          return failure();
        add(o.getQuery(), g->getResult(0));
        add(o.getKey(), g->getResult(1));
        add(o.getValue(), g->getResult(2));
        return success();
      })
      .Case([&](SoftmaxOp o) {
        same(o.getInput(),
             build.value<SoftmaxGradOp>({o.getResult(), dy},
                                        {build.attr("dim", o.getDimAttr())}));
        return success();
      })
      .Case([&](ReshapeOp o) {
        same(o.getInput(),
             build.reshape(dy, o.getInput().getType().getShape()));
        return success();
      })
      .Case([&](TransposeOp o) {
        SmallVector<int64_t> inverse(o.getPerm().size());
        for (auto [i, p] : llvm::enumerate(o.getPerm()))
          inverse[p] = i;
        same(o.getInput(),
             build.value<TransposeOp>({dy}, {build.ints("perm", inverse)}));
        return success();
      })
      .Case([&](SliceOp o) {
        RankedTensorType in = o.getInput().getType();
        int64_t rank = in.getRank(), dim = static_cast<int64_t>(o.getDim());
        if (dim < 0)
          dim += rank;
        int64_t start = static_cast<int64_t>(o.getStart());
        int64_t size = static_cast<int64_t>(o.getSize());
        same(
            o.getInput(),
            build.value<PadOp>(
                {dy}, {build.i64("dim", dim), build.i64("before", start),
                       build.i64("after", in.getDimSize(dim) - start - size)}));
        return success();
      })
      .Case([&](SplitOp o) {
        RankedTensorType in = o.getInput().getType();
        int64_t dim = static_cast<int64_t>(o.getDim());
        if (dim < 0)
          dim += in.getRank();
        // Every part has a gradient (an FSDP unit's parameters): one concat.
        SmallVector<Value> parts;
        for (Value result : o.getResults())
          if (Value g = grads.get(result))
            parts.push_back(g);
        if (parts.size() == o.getNumResults() && parts.size() > 1) {
          same(o.getInput(),
               build.value<ConcatOp>(parts, {build.i64("dim", dim)}));
          return success();
        }
        int64_t start = 0;
        for (auto [result, size] : llvm::zip(o.getResults(), o.getSizes())) {
          if (Value g = grads.get(result))
            same(o.getInput(),
                 build.value<PadOp>(
                     {g},
                     {build.i64("dim", dim), build.i64("before", start),
                      build.i64("after", in.getDimSize(dim) - start - size)}));
          start += size;
        }
        return success();
      })
      .Case([&](ConcatOp o) {
        int64_t rank = tensorOf(o.getResult()).getRank();
        int64_t dim = static_cast<int64_t>(o.getDim());
        if (dim < 0)
          dim += rank;
        int64_t start = 0;
        for (Value input : o.getInputs()) {
          int64_t size = tensorOf(input).getDimSize(dim);
          if (need(input))
            add(input, build.value<SliceOp>({dy}, {build.i64("dim", dim),
                                                   build.i64("start", start),
                                                   build.i64("size", size)}));
          start += size;
        }
        return success();
      })
      .Case([&](CastOp o) {
        same(o.getInput(),
             build.value<CastOp>(
                 {dy},
                 {build.attr(
                     "dtype",
                     TypeAttr::get(o.getInput().getType().getElementType()))}));
        return success();
      })
      .Default(
          [&](Operation *) { return op->emitOpError("has no gradient rule"); });
}

/// FSDP2's reshard_after_forward: a unit's gathered parameters (an
/// all_gather marked `fsdp.reshard` and the split and reshapes that unpack
/// it) are gathered again right before the backward first reads them, so
/// the forward's copy dies after its last forward use.
void regatherForBackward(OpBuilder &b, ArrayRef<Operation *> forward,
                         Operation *backwardStart) {
  DenseSet<Operation *> inForward(forward.begin(), forward.end());
  for (Operation *op : forward) {
    auto gather = dyn_cast<dist::AllGatherOp>(op);
    if (!gather || !gather->hasAttr("fsdp.reshard"))
      continue;
    // The unpacking: the gather, then splits and reshapes of the forward.
    SmallVector<Operation *> chain = {gather};
    for (size_t i = 0; i < chain.size(); ++i)
      for (Operation *user : chain[i]->getUsers())
        if (inForward.contains(user) && isa<SplitOp, ReshapeOp>(user) &&
            !llvm::is_contained(chain, user))
          chain.push_back(user);
    Operation *first = nullptr;
    for (Operation *link : chain)
      for (Operation *user : link->getUsers())
        if (!inForward.contains(user) && backwardStart->isBeforeInBlock(user) &&
            (!first || user->isBeforeInBlock(first)))
          first = user;
    if (!first)
      continue;
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(first);
    IRMapping map;
    for (Operation *link : chain) {
      Operation *copy = b.clone(*link, map);
      copy->removeAttr("fsdp.reshard");
      if (link == gather.getOperation())
        copy->setAttr("fsdp.regather", b.getUnitAttr());
    }
    for (Operation *link : chain)
      for (Value result : link->getResults())
        result.replaceUsesWithIf(map.lookup(result), [&](OpOperand &use) {
          Operation *user = use.getOwner();
          return !inForward.contains(user) &&
                 user != map.lookup(result).getDefiningOp() &&
                 backwardStart->isBeforeInBlock(user);
        });
  }
}

/// The values that depend on a parameter, in `body`.
DenseSet<Value> valuesNeedingGrad(Block &body, ArrayRef<Value> params) {
  DenseSet<Value> needs(params.begin(), params.end());
  for (Operation &op : body)
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return needs.contains(v); }))
      for (Value r : op.getResults())
        if (isa<FloatType>(tensorOf(r).getElementType()))
          needs.insert(r);
  return needs;
}

/// Re-creates `op` on mapped operands with result types from its shape rule,
/// so that a dtype change upstream (mixed precision) flows through.
Operation *rebuild(OpBuilder &b, Operation &op, IRMapping &map) {
  if (!op.getName().hasInterface<ShapeRuleOpInterface>()) {
    Operation *copy = b.clone(op, map);
    // A dist op moves its input's elements: it takes their (possibly mixed
    // precision) type.
    if (isa<dist::DistDialect>(op.getDialect()) && op.getNumOperands() > 0)
      if (auto in = dyn_cast<RankedTensorType>(copy->getOperand(0).getType()))
        for (Value result : copy->getResults())
          if (auto type = dyn_cast<RankedTensorType>(result.getType()))
            result.setType(
                RankedTensorType::get(type.getShape(), in.getElementType()));
    return copy;
  }
  SmallVector<Value> operands = llvm::map_to_vector(
      op.getOperands(), [&](Value v) { return map.lookupOrDefault(v); });
  Operation *copy = createWithShapeRule(b, op.getLoc(), op.getName(), operands,
                                        op.getAttrDictionary());
  if (copy)
    map.map(op.getResults(), copy->getResults());
  return copy;
}

/// The float type named `name` (f32, bf16, f16), or null.
Type floatType(MLIRContext *context, StringRef name) {
  return llvm::StringSwitch<Type>(name)
      .Case("f32", Float32Type::get(context))
      .Case("bf16", BFloat16Type::get(context))
      .Case("f16", Float16Type::get(context))
      .Default(Type());
}

struct BuildTrainStepPass
    : fsdp::impl::BuildTrainStepPassBase<BuildTrainStepPass> {
  using BuildTrainStepPassBase::BuildTrainStepPassBase;

  void runOnOperation() override;
  LogicalResult rewrite(func::FuncOp forward);
};

LogicalResult BuildTrainStepPass::rewrite(func::FuncOp forward) {
  MLIRContext *context = &getContext();
  if (optimizer != "adamw" && optimizer != "sgd" && optimizer != "none")
    return forward.emitOpError("optimizer must be adamw, sgd or none, got '")
           << optimizer << "'";
  if (microbatches < 1)
    return forward.emitOpError("microbatches must be >= 1");
  // torch.optim's own checks, and finite values: a NaN would reach the
  // generated C++ as a bare `nan`.
  struct Bound {
    StringRef name;
    double value, low, high;
    bool highOpen;
  };
  for (const Bound &check :
       {Bound{"lr", lr, 0.0, INFINITY, false},
        Bound{"beta1", beta1, 0.0, 1.0, true},
        Bound{"beta2", beta2, 0.0, 1.0, true},
        Bound{"eps", eps, 0.0, INFINITY, false},
        Bound{"weight-decay", weightDecay, 0.0, INFINITY, false},
        Bound{"momentum", momentum, 0.0, INFINITY, false},
        Bound{"max-grad-norm", maxGradNorm, 0.0, INFINITY, false}})
    if (!std::isfinite(check.value) || check.value < check.low ||
        (check.highOpen ? check.value >= check.high : check.value > check.high))
      return forward.emitOpError("option ")
             << check.name << " must be a finite number in [" << check.low
             << ", " << (check.highOpen ? "1)" : "inf)") << ", got "
             << check.value;
  Type computeType = floatType(context, paramDtype);
  Type outputType =
      outputDtype.empty() ? Type() : floatType(context, outputDtype);
  Type reduceType =
      reduceDtype.empty() ? Type() : floatType(context, reduceDtype);
  if (!reduceDtype.empty() && !reduceType)
    return forward.emitOpError("reduce-dtype must be f32, bf16 or f16, got '")
           << reduceDtype << "'";
  if (!computeType || (!outputDtype.empty() && !outputType))
    return forward.emitOpError("param-dtype and output-dtype must be f32, "
                               "bf16 or f16, got '")
           << paramDtype << "' and '" << outputDtype << "'";
  if (!forward.getBody().hasOneBlock())
    return forward.emitOpError("must have a single block");
  Block &body = forward.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());

  // The loss: the output named "loss", a cross-entropy (or the combine of
  // a vocabulary-parallel one).
  Operation *loss = nullptr;
  for (unsigned i = 0; i < forward.getNumResults(); ++i) {
    auto name =
        forward.getResultAttrOfType<StringAttr>(i, NNDialect::kOutputAttrName);
    if (name && name.getValue() == "loss")
      loss = ret.getOperand(i).getDefiningOp();
  }
  if (!isa_and_nonnull<CrossEntropyOp, CrossEntropyCombineOp>(loss) ||
      loss->getAttrOfType<StringAttr>("reduction").getValue() == "none")
    return forward.emitOpError(
        "needs an output named 'loss' computed by nn.cross_entropy (or "
        "nn.cross_entropy_combine) with a mean or sum reduction");
  Value lossLabels = isa<CrossEntropyOp>(loss)
                         ? cast<CrossEntropyOp>(loss).getLabels()
                         : cast<CrossEntropyCombineOp>(loss).getLabels();
  Attribute ignoreIndex = loss->getAttr("ignore_index");

  // The new signature: data inputs (grown by the microbatch count), the
  // optimizer step, parameters, optimizer state.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<unsigned> dataArgs, paramArgs;
  OpBuilder b(context);
  auto dict = [&](StringRef key, Attribute value) {
    return b.getDictionaryAttr(b.getNamedAttr(key, value));
  };
  for (BlockArgument arg : forward.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (!forward.getArgAttr(i, NNDialect::kInputAttrName))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    if (microbatches > 1) {
      if (type.getRank() == 0)
        return forward.emitOpError("input #")
               << i << " is a scalar; microbatching splits inputs on dim 0";
      SmallVector<int64_t> shape(type.getShape());
      shape[0] *= microbatches;
      type = RankedTensorType::get(shape, type.getElementType());
    }
    dataArgs.push_back(i);
    argTypes.push_back(type);
    argAttrs.push_back(forward.getArgAttrDict(i));
  }
  bool train = optimizer != "none";
  auto f32 = RankedTensorType::get({}, b.getF32Type());
  if (train) {
    argTypes.push_back(f32);
    argAttrs.push_back(
        dict(NNDialect::kInputAttrName, b.getStringAttr("optimizer_step")));
  }
  for (BlockArgument arg : forward.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (!forward.getArgAttr(i, NNDialect::kParamAttrName))
      continue;
    if (train && !tensorOf(arg).getElementType().isF32())
      return forward.emitOpError("parameter #")
             << i << " is " << arg.getType()
             << "; the optimizer keeps f32 master parameters";
    paramArgs.push_back(i);
    argTypes.push_back(arg.getType());
    argAttrs.push_back(forward.getArgAttrDict(i));
  }
  if (dataArgs.size() + paramArgs.size() != forward.getNumArguments())
    return forward.emitOpError(
        "has arguments that are neither nn.input nor nn.param");
  SmallVector<StringRef> stateNames =
      optimizer == "adamw" ? SmallVector<StringRef>{"exp_avg", "exp_avg_sq"}
      : optimizer == "sgd" && momentum != 0.0
          ? SmallVector<StringRef>{"momentum_buffer"}
          : SmallVector<StringRef>{};
  unsigned firstState = argTypes.size();
  for (unsigned p : paramArgs)
    for (StringRef state : stateNames) {
      auto name =
          forward.getArgAttrOfType<StringAttr>(p, NNDialect::kParamAttrName);
      argTypes.push_back(forward.getArgument(p).getType());
      argAttrs.push_back(dict(NNDialect::kStateAttrName,
                              b.getStringAttr(name.getValue() + "." + state)));
    }

  b.setInsertionPoint(forward);
  auto step = func::FuncOp::create(b, forward.getLoc(), forward.getName(),
                                   b.getFunctionType(argTypes, {}));
  Block *entryBlock = step.addEntryBlock();
  b.setInsertionPointToEnd(entryBlock);
  Builder build(b, forward.getLoc());
  unsigned firstParam = dataArgs.size() + (train ? 1 : 0);
  auto paramValue = [&](unsigned k) {
    return entryBlock->getArgument(firstParam + k);
  };

  // Slices of the data inputs for microbatch `m`.
  // A float value in the compute dtype (mixed precision), else itself.
  auto compute = [&](Value v) {
    Type element = tensorOf(v).getElementType();
    if (!isa<FloatType>(element) || element == computeType)
      return v;
    return build.value<CastOp>(
        {v}, {build.attr("dtype", TypeAttr::get(computeType))});
  };
  // Each input's slice for each microbatch, built once.
  DenseMap<std::pair<unsigned, int64_t>, Value> slices;
  auto microbatch = [&](int64_t m, IRMapping &map, bool withParams) {
    for (auto [k, i] : llvm::enumerate(dataArgs)) {
      Value &part = slices[{unsigned(k), m}];
      if (!part) {
        part = entryBlock->getArgument(k);
        if (microbatches > 1) {
          int64_t rows = tensorOf(forward.getArgument(i)).getDimSize(0);
          part = build.value<SliceOp>({part}, {build.i64("dim", 0),
                                               build.i64("start", m * rows),
                                               build.i64("size", rows)});
        }
        if (castForwardInputs)
          part = compute(part);
      }
      map.map(forward.getArgument(i), part);
    }
    if (withParams)
      for (auto [k, i] : llvm::enumerate(paramArgs))
        map.map(forward.getArgument(i), compute(paramValue(k)));
  };

  // The global token count over all microbatches comes first: every
  // microbatch's backward is seeded with 1 / count.
  Value count;
  for (int64_t m = 0; m < microbatches; ++m) {
    IRMapping map;
    microbatch(m, map, /*withParams=*/false);
    Value c = build.value<TokenCountOp>(
        {map.lookup(lossLabels)}, {build.attr("ignore_index", ignoreIndex)});
    count = count ? build.value<AddOp>({count, c}) : c;
  }
  // Data parallelism (fsdp-shard): each rank holds its own samples; the
  // loss divides by the count over all of them.
  auto dataAxes =
      getOperation()->getAttrOfType<ArrayAttr>("fsdp.data_parallel");
  dist::MeshOp mesh = dist::findMesh(getOperation());
  auto acrossData = [&](Value v) {
    if (!dataAxes || !mesh)
      return v;
    ++build.count;
    return dist::AllReduceOp::create(
               b, forward.getLoc(), v.getType(), v,
               FlatSymbolRefAttr::get(mesh.getSymNameAttr()), dataAxes,
               dist::ReductionKindAttr::get(context, dist::ReductionKind::sum))
        .getResult();
  };
  count = acrossData(count);
  Value seed = build.value<DivOp>({build.fill(1.0, f32), count});

  SmallVector<Value> paramGrads(paramArgs.size());
  Value lossSum;
  DeferredSync deferredSync;
  if (auto defer =
          getOperation()->getAttrOfType<BoolAttr>("fsdp.defer_grad_sync"))
    deferredSync.enabled = defer.getValue();
  SmallVector<Value> extraOutputs;
  for (int64_t m = 0; m < microbatches; ++m) {
    IRMapping map;
    microbatch(m, map, /*withParams=*/true);
    // Forward, with the loss summed instead of averaged.
    SmallVector<Operation *> cloned;
    Value logits, labels, sum;
    for (Operation &op : body.without_terminator()) {
      if (&op == loss) {
        labels = map.lookup(lossLabels);
        NamedAttrList attrs(loss->getAttrDictionary());
        attrs.set("reduction", b.getStringAttr("sum"));
        if (auto ce = dyn_cast<CrossEntropyOp>(loss)) {
          logits = map.lookup(ce.getLogits());
          sum = build.value<CrossEntropyOp>({logits, labels}, attrs);
        } else {
          // Vocabulary-parallel: differentiated through its rule.
          Operation *copy = rebuild(b, op, map);
          if (!copy)
            return failure();
          copy->setAttr("reduction", b.getStringAttr("sum"));
          cloned.push_back(copy);
          sum = copy->getResult(0);
        }
        map.map(loss->getResult(0), sum);
        lossSum = lossSum ? build.value<AddOp>({lossSum, sum}) : sum;
        continue;
      }
      Operation *copy = rebuild(b, op, map);
      if (!copy)
        return failure();
      cloned.push_back(copy);
    }
    if (microbatches == 1)
      for (unsigned i = 0; i < forward.getNumResults(); ++i)
        if (ret.getOperand(i) != loss->getResult(0)) {
          Value v = map.lookup(ret.getOperand(i));
          Type element = tensorOf(v).getElementType();
          if (outputType && isa<FloatType>(element) && element != outputType)
            v = build.value<CastOp>(
                {v}, {build.attr("dtype", TypeAttr::get(outputType))});
          extraOutputs.push_back(v);
        }

    // Backward.
    SmallVector<Value> params;
    for (unsigned k = 0; k < paramArgs.size(); ++k)
      params.push_back(paramValue(k));
    DenseSet<Value> needs = valuesNeedingGrad(*entryBlock, params);
    Gradients grads(build);
    if (logits && needs.contains(logits))
      grads.add(logits, build.value<CrossEntropyGradOp>(
                            {logits, labels, seed},
                            {build.attr("ignore_index", ignoreIndex),
                             build.attr("reduction", b.getStringAttr("sum"))}));
    if (!logits)
      grads.add(sum, seed);
    deferredSync.lastMicrobatch = m + 1 == microbatches;
    Backward backward(build, grads, needs, reduceType, deferredSync);
    Operation *backwardStart = &*std::prev(b.getInsertionPoint());
    for (Operation *op : llvm::reverse(cloned))
      if (failed(backward.run(op)))
        return failure();
    regatherForBackward(b, cloned, backwardStart);
    for (unsigned k = 0; k < params.size(); ++k) {
      // Mixed precision: the forward read a cast copy; its gradient comes
      // back to the f32 master through the cast's transpose.
      Value read = map.lookup(forward.getArgument(paramArgs[k]));
      Value g = grads.get(read);
      if (g && read != params[k])
        g = build.value<CastOp>(
            {g},
            {build.attr("dtype",
                        TypeAttr::get(tensorOf(params[k]).getElementType()))});
      if (g)
        paramGrads[k] =
            paramGrads[k] ? build.value<AddOp>({paramGrads[k], g}) : g;
    }
  }
  for (unsigned k = 0; k < paramGrads.size(); ++k)
    if (!paramGrads[k])
      paramGrads[k] = build.fill(0.0, tensorOf(paramValue(k)));
  Value lossValue = build.value<DivOp>({acrossData(lossSum), count});

  // Results: the loss, then updates (or gradients), then other outputs.
  SmallVector<Value> results = {lossValue};
  SmallVector<DictionaryAttr> resultAttrs = {
      dict(NNDialect::kOutputAttrName, b.getStringAttr("loss"))};
  auto paramName = [&](unsigned k) {
    return forward
        .getArgAttrOfType<StringAttr>(paramArgs[k], NNDialect::kParamAttrName)
        .getValue();
  };
  auto update = [&](Value v, StringRef name, unsigned arg) {
    results.push_back(v);
    resultAttrs.push_back(
        b.getDictionaryAttr({b.getNamedAttr(NNDialect::kOutputAttrName,
                                            b.getStringAttr("updated." + name)),
                             b.getNamedAttr(NNDialect::kUpdatesAttrName,
                                            b.getI64IntegerAttr(arg))}));
  };
  if (!train) {
    for (unsigned k = 0; k < paramGrads.size(); ++k) {
      results.push_back(paramGrads[k]);
      resultAttrs.push_back(dict(NNDialect::kOutputAttrName,
                                 b.getStringAttr("grad." + paramName(k))));
    }
  } else {
    Value scale = build.fill(1.0, f32);
    if (maxGradNorm > 0.0) {
      // torch's clip_grad_norm_ over the whole model: every element counted
      // once. A gradient block split over mesh axes sums over those axes; a
      // copy replicated over an axis (identical on its ranks) counts once.
      // Parameters split the same way share one all-reduce.
      llvm::MapVector<ArrayAttr, Value> partials;
      for (auto [k, g] : llvm::enumerate(paramGrads)) {
        SmallVector<Attribute> axes;
        if (auto sharding = forward.getArgAttrOfType<dist::ShardingAttr>(
                paramArgs[k], "dist.sharding"))
          for (unsigned d = 0; d < sharding.getDims().size(); ++d)
            for (StringRef axis : sharding.getDimAxes(d))
              axes.push_back(b.getStringAttr(axis));
        llvm::sort(axes, [](Attribute x, Attribute y) {
          return cast<StringAttr>(x).getValue() <
                 cast<StringAttr>(y).getValue();
        });
        Value s = build.value<SumSquaresOp>({g});
        Value &sum = partials[b.getArrayAttr(axes)];
        sum = sum ? build.value<AddOp>({sum, s}) : s;
      }
      Value total;
      for (auto [axes, sum] : partials) {
        Value global = sum;
        if (!axes.empty() && mesh) {
          ++build.count;
          global = dist::AllReduceOp::create(
                       b, forward.getLoc(), sum.getType(), sum,
                       FlatSymbolRefAttr::get(mesh.getSymNameAttr()), axes,
                       dist::ReductionKindAttr::get(context,
                                                    dist::ReductionKind::sum))
                       .getResult();
        }
        total = total ? build.value<AddOp>({total, global}) : global;
      }
      scale = build.value<ClipCoefficientOp>(
          {total}, {build.f64("max_norm", maxGradNorm)});
    }
    Value stepCount = entryBlock->getArgument(dataArgs.size());
    for (unsigned k = 0; k < paramGrads.size(); ++k) {
      unsigned stateArg = firstState + k * stateNames.size();
      Value param = paramValue(k);
      std::string name = paramName(k).str();
      if (optimizer == "adamw") {
        Operation *o = build.op<AdamWOp>(
            {param, paramGrads[k], entryBlock->getArgument(stateArg),
             entryBlock->getArgument(stateArg + 1), stepCount, scale},
            {build.f64("lr", lr), build.f64("beta1", beta1),
             build.f64("beta2", beta2), build.f64("eps", eps),
             build.f64("weight_decay", weightDecay)});
        if (!o)
          return failure();
        update(o->getResult(0), name, firstParam + k);
        update(o->getResult(1), name + ".exp_avg", stateArg);
        update(o->getResult(2), name + ".exp_avg_sq", stateArg + 1);
        continue;
      }
      // SGD without momentum still has a buffer operand; it stays zero.
      Value buffer = stateNames.empty() ? build.fill(0.0, tensorOf(param))
                                        : entryBlock->getArgument(stateArg);
      Operation *o =
          build.op<SGDOp>({param, paramGrads[k], buffer, stepCount, scale},
                          {build.f64("lr", lr), build.f64("momentum", momentum),
                           build.f64("weight_decay", weightDecay)});
      if (!o)
        return failure();
      update(o->getResult(0), name, firstParam + k);
      if (!stateNames.empty())
        update(o->getResult(1), name + ".momentum_buffer", stateArg);
    }
  }
  for (auto [i, v] : llvm::enumerate(extraOutputs)) {
    results.push_back(v);
    unsigned original = 0;
    for (unsigned r = 0, seen = 0; r < forward.getNumResults(); ++r)
      if (ret.getOperand(r) != loss->getResult(0) && seen++ == i)
        original = r;
    resultAttrs.push_back(forward.getResultAttrDict(original));
  }
  numGradOps += build.count;
  // The precision the step runs in, for the reports.
  auto name = [&](Type t) {
    return b.getStringAttr(t.isF32() ? "f32" : t.isBF16() ? "bf16" : "f16");
  };
  getOperation()->setAttr(
      "fsdp.precision",
      b.getDictionaryAttr(
          {b.getNamedAttr("param", name(computeType)),
           b.getNamedAttr("reduce",
                          name(reduceType ? reduceType : computeType)),
           b.getNamedAttr("output",
                          name(outputType ? outputType : computeType)),
           b.getNamedAttr("master", b.getStringAttr("f32"))}));
  replaceFunction(b, forward, step, forward.getLoc(), results, argAttrs,
                  resultAttrs);
  return success();
}

void BuildTrainStepPass::runOnOperation() {
  auto forward = getOperation().lookupSymbol<func::FuncOp>(entry);
  if (!forward) {
    getOperation().emitError("no function @") << entry << " to train";
    return signalPassFailure();
  }
  // The parallel config's MixedPrecisionPolicy (fsdp-tp-plan records it),
  // for each dtype option not given explicitly.
  if (auto mp =
          getOperation()->getAttrOfType<DictionaryAttr>("fsdp.mp_policy")) {
    auto text = [&](StringRef key) {
      auto s = mp.getAs<StringAttr>(key);
      return s ? s.getValue().str() : std::string();
    };
    if (!paramDtype.hasValue() && !text("param_dtype").empty())
      paramDtype = text("param_dtype");
    if (!reduceDtype.hasValue() && !text("reduce_dtype").empty())
      reduceDtype = text("reduce_dtype");
    if (!outputDtype.hasValue() && !text("output_dtype").empty())
      outputDtype = text("output_dtype");
    if (auto cast = mp.getAs<BoolAttr>("cast_forward_inputs");
        cast && !castForwardInputs.hasValue())
      castForwardInputs = cast.getValue();
  }
  if (failed(rewrite(forward)))
    signalPassFailure();
}

} // namespace

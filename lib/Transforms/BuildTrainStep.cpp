//===- BuildTrainStep.cpp - Forward function to training step -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-build-train-step`: loss normalization, microbatching,
// gradient clipping and the optimizer around the reverse-mode gradients of
// the forward. The gradients come from each op's own rule
// (GradientOpInterface, run by `nn::differentiate`); FSDP's deferred sync and
// re-gather come from FSDPGradients.h. Every op is built through its shape
// rule (ShapeRuleOpInterface), so an ill-typed op is caught where it is built.
//
//===----------------------------------------------------------------------===//

#include "FSDPGradients.h"
#include "PassUtils.h"
#include "Remat.h"

#include "fsdp/Analysis/MemoryReplay.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/Gradient.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringSwitch.h"

#include <cmath>

namespace fsdp {
#define GEN_PASS_DEF_BUILDTRAINSTEPPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using namespace fsdp::nn;

namespace {

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
  if (isa<ShapeRuleOpInterface>(op)) {
    Operation *copy = rebuildWithShapeRule(
        b, op,
        llvm::map_to_vector(op.getOperands(),
                            [&](Value v) { return map.lookupOrDefault(v); }),
        nullptr);
    if (copy)
      map.map(op.getResults(), copy->getResults());
    return copy;
  }
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

/// The element type `dtype` names (null for Same).
Type floatType(MLIRContext *context, Dtype dtype) {
  switch (dtype) {
  case Dtype::F32:
    return Float32Type::get(context);
  case Dtype::BF16:
    return BFloat16Type::get(context);
  case Dtype::F16:
    return Float16Type::get(context);
  case Dtype::Same:
    break;
  }
  return Type();
}

class TrainStep;

struct BuildTrainStepPass
    : fsdp::impl::BuildTrainStepPassBase<BuildTrainStepPass> {
  using BuildTrainStepPassBase::BuildTrainStepPassBase;
  friend class TrainStep;

  void runOnOperation() override;
  /// Checks the optimizer options against torch.optim's bounds, and the
  /// schedule's.
  LogicalResult checkOptions(func::FuncOp forward);
  /// weight-decay, else torch's default for the optimizer (AdamW 0.01,
  /// SGD 0).
  double resolvedWeightDecay() {
    if (weightDecay.hasValue())
      return weightDecay;
    return optimizer == Optimizer::SGD ? 0.0 : 0.01;
  }
  /// The activation checkpointing to apply: the option's, else the parallel
  /// config's.
  Checkpointing checkpointingMode() {
    if (activationCheckpointing != Checkpointing::Config)
      return activationCheckpointing;
    ParallelConfigAttr config = ParallelConfigAttr::of(getOperation());
    CheckpointMode mode =
        config ? config.getActivationCheckpointing() : CheckpointMode::None;
    return mode == CheckpointMode::Selective ? Checkpointing::Selective
           : mode == CheckpointMode::Full    ? Checkpointing::Full
                                             : Checkpointing::None;
  }
  /// The per-layer checkpointing whose saved activations fit `budget`
  /// bytes (a fraction of the uncheckpointed when <= 1) with the least
  /// recomputation along the plans' order; an error when none does.
  FailureOr<RematPlan> planForBudget(func::FuncOp forward, double budget);
  FailureOr<int64_t> savedWith(const RematPlan &plan);
  /// FSDP2's defer_fsdp_grad_sync: the parallel config's, else on where
  /// fsdp-shard sharded (FSDP2's default).
  bool deferGradSync() {
    if (ParallelConfigAttr config = ParallelConfigAttr::of(getOperation()))
      return config.getDeferGradSync().getValue();
    return getOperation()->hasAttr("fsdp.data_parallel");
  }
};

LogicalResult BuildTrainStepPass::checkOptions(func::FuncOp forward) {
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
        Bound{"weight-decay", resolvedWeightDecay(), 0.0, INFINITY, false},
        Bound{"momentum", momentum, 0.0, INFINITY, false},
        Bound{"max-grad-norm", maxGradNorm, 0.0, INFINITY, false}})
    if (!std::isfinite(check.value) || check.value < check.low ||
        (check.highOpen ? check.value >= check.high : check.value > check.high))
      return forward.emitOpError("option ")
             << check.name << " must be a finite number in [" << check.low
             << ", " << (check.highOpen ? "1)" : "inf)") << ", got "
             << check.value;
  bool decays = lrSchedule != fsdp::LrSchedule::Constant;
  if (optimizer == Optimizer::None && (decays || warmupSteps != 0))
    return forward.emitOpError(
        "a learning-rate schedule needs an optimizer (optimizer=none)");
  if (warmupSteps < 0)
    return forward.emitOpError("option warmup-steps must be >= 0, got ")
           << int64_t(warmupSteps);
  if (decays && totalSteps <= warmupSteps)
    return forward.emitOpError("lr-schedule ")
           << (lrSchedule == fsdp::LrSchedule::Linear ? "linear" : "cosine")
           << " needs total-steps > warmup-steps (" << int64_t(warmupSteps)
           << "), got " << int64_t(totalSteps);
  if (!decays && (totalSteps != 0 || minLrRatio != 0.0))
    return forward.emitOpError(
        "options total-steps and min-lr-ratio shape a decay: they need "
        "lr-schedule=linear or cosine");
  if (!(minLrRatio >= 0.0 && minLrRatio <= 1.0))
    return forward.emitOpError("option min-lr-ratio must be in [0, 1], got ")
           << double(minLrRatio);
  return success();
}

/// Builds the training step of one forward function, a piece per method.
class TrainStep {
public:
  /// `plan`: the activation checkpointing; `quiet`: no remark (a trial
  /// build for the memory budget).
  TrainStep(BuildTrainStepPass &pass, func::FuncOp forward,
            const RematPlan &plan, bool quiet = false)
      : pass(pass), forward(forward), plan(plan), quiet(quiet),
        context(forward.getContext()), b(context), build(b, forward.getLoc()),
        f32(RankedTensorType::get({}, b.getF32Type())) {}

  LogicalResult run();
  /// Builds `<entry>_eval` beside the forward: the step's signature, the
  /// forward of every microbatch and the global mean loss, nothing else.
  LogicalResult runEval();

private:
  void resolveTypes();
  LogicalResult findLoss();
  LogicalResult buildSignature();
  void mapMicrobatch(int64_t m, IRMapping &map, bool withParams);
  Value compute(Value v);
  Value acrossData(Value v);
  Value allReduceSum(Value v, ArrayAttr axes);
  Value tokenCount();
  LogicalResult microbatchStep(int64_t m, Value seed, DeferredGradSync &sync);
  /// Microbatch `m`'s forward: its ops (cloned in order), its logits (null
  /// for a vocabulary-parallel loss), labels and summed loss; adds the sum
  /// to `lossSum`.
  LogicalResult microbatchForward(int64_t m, IRMapping &map,
                                  SmallVectorImpl<Operation *> &cloned,
                                  Value &logits, Value &labels, Value &sum);
  /// The load-balancing loss of a microbatch, on the routing statistics of
  /// every data-parallel rank; sets `auxLoss`.
  LogicalResult auxiliaryLoss(MoeAuxCombineOp combine, IRMapping &map,
                              SmallVectorImpl<Operation *> &cloned);
  /// The mean loss over the data-parallel ranks and microbatches, plus the
  /// load-balancing loss's share.
  Value meanLoss(Value count);
  /// Says what activation checkpointing recomputed; fails when it was asked
  /// for and the model has no decoder layer to apply it to.
  LogicalResult reportRemat();
  LogicalResult backward(int64_t m, ArrayRef<Operation *> cloned,
                         IRMapping &map, Value logits, Value labels, Value sum,
                         Value seed, DeferredGradSync &sync);
  Value gradSumSquares();
  Value clipScale(Value sumSquares);
  Value lrScale();
  LogicalResult optimizerUpdates();
  void addOutput(Value v, DictionaryAttr attrs) {
    results.push_back(v);
    resultAttrs.push_back(attrs);
  }
  void addUpdate(Value v, StringRef name, unsigned arg);
  DictionaryAttr dict(StringRef key, Attribute value) {
    return b.getDictionaryAttr(b.getNamedAttr(key, value));
  }
  StringRef paramName(unsigned k) {
    return forward
        .getArgAttrOfType<StringAttr>(paramArgs[k], NNDialect::kParamAttrName)
        .getValue();
  }
  Value paramValue(unsigned k) {
    return entryBlock->getArgument(firstParam + k);
  }
  void recordPrecision();

  BuildTrainStepPass &pass;
  func::FuncOp forward;
  RematPlan plan;
  bool quiet;
  MLIRContext *context;
  OpBuilder b;
  ShapeRuleBuilder build;
  RankedTensorType f32;
  Type computeType, outputType, reduceType;
  bool train = false;
  /// Scalars the training step outputs after the model's: (name, value).
  SmallVector<std::pair<StringRef, Value>> trainingOutputs;

  // The forward's loss.
  Operation *loss = nullptr;
  Value lossLabels;
  IntegerAttr ignoreIndex;

  // The step's signature: data inputs, the optimizer step, parameters,
  // optimizer state.
  func::FuncOp step;
  Block *entryBlock = nullptr;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  SmallVector<unsigned> dataArgs, paramArgs;
  SmallVector<StringRef> stateNames;
  unsigned firstParam = 0, firstState = 0;

  // Built along the way.
  DenseMap<std::pair<unsigned, int64_t>, Value> slices;
  SmallVector<Value> paramGrads, extraOutputs;
  Value lossSum;
  /// The load-balancing loss (nn.moe_aux_combine) of the microbatch being
  /// built, the sum over microbatches, and its coefficient.
  Value auxLoss, auxSum;
  double auxCoef = 0;
  unsigned gradOps = 0;
  RematStats recomputed;
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
};

void TrainStep::resolveTypes() {
  computeType = floatType(context, pass.paramDtype);
  outputType = floatType(context, pass.outputDtype);
  reduceType = floatType(context, pass.reduceDtype);
}

/// The loss: the output named "loss", a cross-entropy (or the combine of a
/// vocabulary-parallel one).
LogicalResult TrainStep::findLoss() {
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  for (unsigned i = 0; i < forward.getNumResults(); ++i) {
    auto name =
        forward.getResultAttrOfType<StringAttr>(i, NNDialect::kOutputAttrName);
    if (name && name.getValue() == "loss")
      loss = ret.getOperand(i).getDefiningOp();
  }
  if (!isa_and_nonnull<CrossEntropyOp, CrossEntropyCombineOp>(loss) ||
      loss->getAttrOfType<StringAttr>("reduction").getValue() == "none") {
    InFlightDiagnostic diag = forward.emitOpError(
        "needs an output named 'loss' computed by nn.cross_entropy (or "
        "nn.cross_entropy_combine) with a mean or sum reduction");
    if (loss)
      diag.attachNote(loss->getLoc()) << "the output named 'loss' is this";
    return diag;
  }
  lossLabels = isa<CrossEntropyOp>(loss)
                   ? cast<CrossEntropyOp>(loss).getLabels()
                   : cast<CrossEntropyCombineOp>(loss).getLabels();
  ignoreIndex = loss->getAttrOfType<IntegerAttr>("ignore_index");
  return success();
}

/// The new signature: data inputs (grown by the microbatch count), the
/// optimizer step, parameters, optimizer state.
LogicalResult TrainStep::buildSignature() {
  int64_t microbatches = pass.microbatches;
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
  if (pass.optimizer == Optimizer::AdamW)
    stateNames = {"exp_avg", "exp_avg_sq"};
  else if (pass.optimizer == Optimizer::SGD && pass.momentum != 0.0)
    stateNames = {"momentum_buffer"};
  firstState = argTypes.size();
  for (unsigned p : paramArgs)
    for (StringRef state : stateNames) {
      auto name =
          forward.getArgAttrOfType<StringAttr>(p, NNDialect::kParamAttrName);
      argTypes.push_back(forward.getArgument(p).getType());
      argAttrs.push_back(dict(NNDialect::kStateAttrName,
                              b.getStringAttr(name.getValue() + "." + state)));
    }

  b.setInsertionPoint(forward);
  step = func::FuncOp::create(b, forward.getLoc(), forward.getName(),
                              b.getFunctionType(argTypes, {}));
  entryBlock = step.addEntryBlock();
  b.setInsertionPointToEnd(entryBlock);
  firstParam = dataArgs.size() + (train ? 1 : 0);
  return success();
}

/// A float value in the compute dtype (mixed precision), else itself.
Value TrainStep::compute(Value v) {
  Type element = tensorOf(v).getElementType();
  if (!isa<FloatType>(element))
    return v;
  return build.castTo(v, computeType);
}

/// Maps the forward's inputs to microbatch `m`'s slices of the step's (each
/// built once), and its parameters when `withParams`.
void TrainStep::mapMicrobatch(int64_t m, IRMapping &map, bool withParams) {
  for (auto [k, i] : llvm::enumerate(dataArgs)) {
    Value &part = slices[{unsigned(k), m}];
    if (!part) {
      part = entryBlock->getArgument(k);
      if (pass.microbatches > 1) {
        int64_t rows = tensorOf(forward.getArgument(i)).getDimSize(0);
        part = build.make<SliceOp>(part, 0, m * rows, rows).getResult();
      }
      if (pass.castForwardInputs)
        part = compute(part);
    }
    map.map(forward.getArgument(i), part);
  }
  if (withParams)
    for (auto [k, i] : llvm::enumerate(paramArgs))
      map.map(forward.getArgument(i), compute(paramValue(k)));
}

/// `v` summed over the ranks of `axes`.
Value TrainStep::allReduceSum(Value v, ArrayAttr axes) {
  dist::MeshOp mesh = dist::findMesh(pass.getOperation());
  if (!axes || axes.empty() || !mesh)
    return v;
  build.noteCreated();
  return dist::AllReduceOp::create(
             b, forward.getLoc(), v.getType(), v,
             FlatSymbolRefAttr::get(mesh.getSymNameAttr()), axes,
             dist::ReductionKindAttr::get(context, dist::ReductionKind::sum))
      .getResult();
}

/// Data parallelism (fsdp-shard): each rank holds its own samples; the loss
/// divides by the count over all of them.
Value TrainStep::acrossData(Value v) {
  return allReduceSum(
      v, pass.getOperation()->getAttrOfType<ArrayAttr>("fsdp.data_parallel"));
}

/// The global token count over all microbatches, first: every microbatch's
/// backward is seeded with 1 / count.
Value TrainStep::tokenCount() {
  Value count;
  for (int64_t m = 0; m < pass.microbatches; ++m) {
    IRMapping map;
    mapMicrobatch(m, map, /*withParams=*/false);
    Value c = build.make<TokenCountOp>(map.lookup(lossLabels), ignoreIndex)
                  .getResult();
    count = count ? build.make<AddOp>(count, c).getResult() : c;
  }
  return acrossData(count);
}

/// Microbatch `m`: the forward, with the loss summed instead of averaged,
/// then its backward.
LogicalResult TrainStep::microbatchForward(int64_t m, IRMapping &map,
                                           SmallVectorImpl<Operation *> &cloned,
                                           Value &logits, Value &labels,
                                           Value &sum) {
  mapMicrobatch(m, map, /*withParams=*/true);
  auxLoss = Value();
  Block &body = forward.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (auto combine = dyn_cast<MoeAuxCombineOp>(op)) {
      if (failed(auxiliaryLoss(combine, map, cloned)))
        return failure();
      continue;
    }
    if (&op != loss) {
      Operation *copy = rebuild(b, op, map);
      if (!copy)
        return failure();
      cloned.push_back(copy);
      continue;
    }
    labels = map.lookup(lossLabels);
    if (auto ce = dyn_cast<CrossEntropyOp>(loss)) {
      logits = map.lookup(ce.getLogits());
      auto summed = build.make<CrossEntropyOp>(logits, labels, ignoreIndex,
                                               b.getStringAttr("sum"));
      summed.setPathAttr(ce.getPathAttr());
      sum = summed.getResult();
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
    lossSum = lossSum ? build.make<AddOp>(lossSum, sum).getResult() : sum;
  }
  return success();
}

LogicalResult TrainStep::auxiliaryLoss(MoeAuxCombineOp combine, IRMapping &map,
                                       SmallVectorImpl<Operation *> &cloned) {
  if (auxLoss)
    return combine.emitOpError(
        "is a second load-balancing loss; one nn.moe_aux_combine takes the "
        "summed statistics of every sparse layer");
  // transformers computes the loss on the whole batch's routing: the ranks'
  // statistics add (the all-reduce's gradient is the identity, so each
  // rank's logits get their share).
  Value local = map.lookup(combine.getStats());
  Value stats = acrossData(local);
  if (stats != local)
    cloned.push_back(stats.getDefiningOp());
  auto copy = build.make<MoeAuxCombineOp>(stats, combine.getCoefAttr());
  copy.setPathAttr(combine.getPathAttr());
  cloned.push_back(copy);
  map.map(combine.getResult(), copy.getResult());
  auxLoss = copy.getResult();
  auxCoef = combine.getCoef().convertToDouble();
  auxSum = auxSum ? build.make<AddOp>(auxSum, auxLoss).getResult() : auxLoss;
  return success();
}

Value TrainStep::meanLoss(Value count) {
  Value mean = build.make<DivOp>(acrossData(lossSum), count);
  if (!auxSum)
    return mean;
  // Each microbatch's loss adds coef times its load-balancing loss.
  Value aux = build.make<ScaleOp>(
      auxSum, b.getF64FloatAttr(auxCoef / double(pass.microbatches)));
  return build.make<AddOp>(mean, aux);
}

LogicalResult TrainStep::microbatchStep(int64_t m, Value seed,
                                        DeferredGradSync &sync) {
  IRMapping map;
  SmallVector<Operation *> cloned;
  Value logits, labels, sum;
  if (failed(microbatchForward(m, map, cloned, logits, labels, sum)))
    return failure();
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  if (pass.microbatches == 1)
    for (unsigned i = 0; i < forward.getNumResults(); ++i)
      if (ret.getOperand(i) != loss->getResult(0)) {
        Value v = map.lookup(ret.getOperand(i));
        Type element = tensorOf(v).getElementType();
        if (outputType && isa<FloatType>(element))
          v = build.castTo(v, outputType);
        extraOutputs.push_back(v);
      }
  return backward(m, cloned, map, logits, labels, sum, seed, sync);
}

/// The backward of microbatch `m` over its forward ops `cloned`; adds the
/// parameters' gradients to `paramGrads`.
LogicalResult TrainStep::backward(int64_t m, ArrayRef<Operation *> cloned,
                                  IRMapping &map, Value logits, Value labels,
                                  Value sum, Value seed,
                                  DeferredGradSync &sync) {
  SmallVector<Value> params;
  for (unsigned k = 0; k < paramArgs.size(); ++k)
    params.push_back(paramValue(k));
  DenseSet<Value> needs = valuesNeedingGrad(*entryBlock, params);
  GradientBuilder grads(b, forward.getLoc(), needs, reduceType);
  if (pass.deferGradSync())
    grads.setGatherHook(sync.forMicrobatch(grads, m + 1 == pass.microbatches));
  if (logits && needs.contains(logits))
    grads.seed(logits,
               grads.make<CrossEntropyGradOp>(logits, labels, seed, ignoreIndex,
                                              b.getStringAttr("sum")));
  if (!logits)
    grads.seed(sum, seed);
  if (auxLoss)
    grads.seed(auxLoss, build.fill(auxCoef / double(pass.microbatches), f32));
  Operation *backwardStart = &*std::prev(b.getInsertionPoint());
  LogicalResult result = differentiate(cloned, grads);
  gradOps += grads.getNumCreated();
  if (failed(result))
    return failure();
  recomputed += rematerialize(b, cloned, backwardStart, plan);
  regatherForBackward(b, cloned, backwardStart);
  for (unsigned k = 0; k < params.size(); ++k) {
    // Mixed precision: the forward read a cast copy; its gradient comes
    // back to the f32 master through the cast's transpose.
    Value read = map.lookup(forward.getArgument(paramArgs[k]));
    Value g =
        build.castTo(grads.grad(read), tensorOf(params[k]).getElementType());
    if (g)
      paramGrads[k] =
          paramGrads[k] ? build.make<AddOp>(paramGrads[k], g).getResult() : g;
  }
  return success();
}

LogicalResult TrainStep::reportRemat() {
  if (!plan.any() || quiet)
    return success();
  StringRef name = plan.rest == Checkpointing::Full        ? "full"
                   : plan.rest == Checkpointing::Selective ? "selective"
                                                           : "budget";
  if (recomputed.layers == 0)
    return forward.emitError("activation checkpointing (")
           << name
           << ") found no decoder layer with values to recompute (ops "
              "whose path is in a module-list element such as "
              "`...layers.N`)";
  emitRemark(forward.getLoc())
      << "activation checkpointing (" << name
      << "): " << recomputed.layers / pass.microbatches << " layers recompute "
      << recomputed.ops << " ops before their backward, re-issuing "
      << recomputed.collectives << " collectives";
  return success();
}

/// The squared global gradient norm, as torch's clip_grad_norm_ computes it
/// over the whole model: every element counted once. A gradient block split
/// over mesh axes sums over those axes; a copy replicated over an axis
/// (identical on its ranks) counts once. Parameters split the same way
/// share one all-reduce.
Value TrainStep::gradSumSquares() {
  dist::MeshOp mesh = dist::findMesh(pass.getOperation());
  auto meshIndex = [&](StringAttr axis) {
    ArrayAttr names = mesh ? mesh.getAxes() : ArrayAttr();
    for (auto [i, name] :
         llvm::enumerate(names ? names.getValue() : ArrayRef<Attribute>()))
      if (name == axis)
        return i;
    return size_t(~0);
  };
  llvm::MapVector<ArrayAttr, Value> partials;
  for (auto [k, g] : llvm::enumerate(paramGrads)) {
    SmallVector<Attribute> axes;
    if (auto sharding = forward.getArgAttrOfType<dist::ShardingAttr>(
            paramArgs[k], "dist.sharding"))
      for (unsigned d = 0; d < sharding.getDims().size(); ++d)
        for (StringRef axis : sharding.getDimAxes(d))
          axes.push_back(b.getStringAttr(axis));
    // In the mesh's order, as the runtime orders a group's ranks.
    llvm::sort(axes, [&](Attribute x, Attribute y) {
      return meshIndex(cast<StringAttr>(x)) < meshIndex(cast<StringAttr>(y));
    });
    // Each parameter's share of the norm carries the parameter's name as
    // its path, so that the lowering sees which layer it belongs to.
    auto named = [&](Operation *op) {
      op->setAttr("path", b.getStringAttr(paramName(k)));
      return op->getResult(0);
    };
    Value s = named(build.make<SumSquaresOp>(g));
    Value &sum = partials[b.getArrayAttr(axes)];
    sum = sum ? named(build.make<AddOp>(sum, s)) : s;
  }
  Value total;
  for (auto [axes, sum] : partials) {
    Value global = allReduceSum(sum, axes);
    total = total ? build.make<AddOp>(total, global).getResult() : global;
  }
  return total;
}

/// clip_grad_norm_'s coefficient, or 1 without clipping.
Value TrainStep::clipScale(Value sumSquares) {
  if (pass.maxGradNorm <= 0.0)
    return build.fill(1.0, f32);
  return build.make<ClipCoefficientOp>(sumSquares, APFloat(pass.maxGradNorm));
}

/// The schedule's factor of the learning rate at this step, or null for a
/// constant rate without warmup.
Value TrainStep::lrScale() {
  if (pass.lrSchedule == fsdp::LrSchedule::Constant && pass.warmupSteps == 0)
    return Value();
  nn::LrSchedule schedule =
      pass.lrSchedule == fsdp::LrSchedule::Linear   ? nn::LrSchedule::linear
      : pass.lrSchedule == fsdp::LrSchedule::Cosine ? nn::LrSchedule::cosine
                                                    : nn::LrSchedule::constant;
  return build.make<LrScheduleOp>(entryBlock->getArgument(dataArgs.size()),
                                  schedule, pass.warmupSteps, pass.totalSteps,
                                  APFloat(pass.minLrRatio));
}

void TrainStep::addUpdate(Value v, StringRef name, unsigned arg) {
  addOutput(v, b.getDictionaryAttr(
                   {b.getNamedAttr(NNDialect::kOutputAttrName,
                                   b.getStringAttr("updated." + name)),
                    b.getNamedAttr(NNDialect::kUpdatesAttrName,
                                   b.getI64IntegerAttr(arg))}));
}

/// The optimizer's step on every parameter, as `updated.*` outputs.
LogicalResult TrainStep::optimizerUpdates() {
  bool norm = pass.maxGradNorm > 0.0 || pass.gradNorm;
  Value sumSquares = norm ? gradSumSquares() : Value();
  Value scale = clipScale(sumSquares);
  Value lrFactor = lrScale();
  Value stepCount = entryBlock->getArgument(dataArgs.size());
  double weightDecay = pass.resolvedWeightDecay();
  for (unsigned k = 0; k < paramGrads.size(); ++k) {
    unsigned stateArg = firstState + k * stateNames.size();
    Value param = paramValue(k);
    std::string name = paramName(k).str();
    if (pass.optimizer == Optimizer::AdamW) {
      auto o = build.make<AdamWOp>(
          param, paramGrads[k], entryBlock->getArgument(stateArg),
          entryBlock->getArgument(stateArg + 1), stepCount, scale, lrFactor,
          APFloat(pass.lr), APFloat(pass.beta1), APFloat(pass.beta2),
          APFloat(pass.eps), APFloat(weightDecay));
      addUpdate(o.getNewParam(), name, firstParam + k);
      addUpdate(o.getNewExpAvg(), name + ".exp_avg", stateArg);
      addUpdate(o.getNewExpAvgSq(), name + ".exp_avg_sq", stateArg + 1);
      continue;
    }
    // SGD without momentum still has a buffer operand; it stays zero.
    Value buffer = stateNames.empty() ? build.fill(0.0, tensorOf(param))
                                      : entryBlock->getArgument(stateArg);
    auto o = build.make<SGDOp>(param, paramGrads[k], buffer, stepCount, scale,
                               lrFactor, APFloat(pass.lr),
                               APFloat(pass.momentum), APFloat(weightDecay));
    addUpdate(o->getResult(0), name, firstParam + k);
    if (!stateNames.empty())
      addUpdate(o->getResult(1), name + ".momentum_buffer", stateArg);
  }
  // What the step line and the metrics report: this step's learning rate
  // and the squared global gradient norm.
  trainingOutputs.push_back(
      {"lr", lrFactor
                 ? build.make<ScaleOp>(lrFactor, APFloat(pass.lr)).getResult()
                 : build.fill(pass.lr, f32)});
  if (sumSquares)
    trainingOutputs.push_back({"grad_sum_squares", sumSquares});
  return success();
}

/// The precision the step runs in, for the reports.
void TrainStep::recordPrecision() {
  auto name = [&](Type t) {
    return b.getStringAttr(t.isF32() ? "f32" : t.isBF16() ? "bf16" : "f16");
  };
  pass.getOperation()->setAttr(
      "fsdp.precision",
      b.getDictionaryAttr(
          {b.getNamedAttr("param", name(computeType)),
           b.getNamedAttr("reduce",
                          name(reduceType ? reduceType : computeType)),
           b.getNamedAttr("output",
                          name(outputType ? outputType : computeType)),
           b.getNamedAttr("master", b.getStringAttr("f32"))}));
}

LogicalResult TrainStep::run() {
  train = pass.optimizer != Optimizer::None;
  resolveTypes();
  if (failed(pass.checkOptions(forward)) || failed(findLoss()) ||
      failed(buildSignature()))
    return failure();
  Value count = tokenCount();
  Value seed = build.make<DivOp>(build.fill(1.0, f32), count);
  paramGrads.assign(paramArgs.size(), Value());
  DeferredGradSync sync;
  for (int64_t m = 0; m < pass.microbatches; ++m)
    if (failed(microbatchStep(m, seed, sync)))
      return failure();
  for (unsigned k = 0; k < paramGrads.size(); ++k)
    if (!paramGrads[k])
      paramGrads[k] = build.fill(0.0, tensorOf(paramValue(k)));

  // Results: the loss, then updates (or gradients), then other outputs.
  addOutput(meanLoss(count),
            dict(NNDialect::kOutputAttrName, b.getStringAttr("loss")));
  if (!train) {
    for (unsigned k = 0; k < paramGrads.size(); ++k)
      addOutput(paramGrads[k], dict(NNDialect::kOutputAttrName,
                                    b.getStringAttr("grad." + paramName(k))));
  } else if (failed(optimizerUpdates())) {
    return failure();
  }
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  unsigned next = 0;
  for (unsigned r = 0; r < forward.getNumResults(); ++r)
    if (ret.getOperand(r) != loss->getResult(0) && next < extraOutputs.size())
      addOutput(extraOutputs[next++], forward.getResultAttrDict(r));
  for (auto [name, value] : trainingOutputs)
    addOutput(value, dict(NNDialect::kOutputAttrName, b.getStringAttr(name)));
  pass.numGradOps += gradOps + build.getNumCreated();
  if (failed(reportRemat()))
    return failure();
  recordPrecision();
  replaceFunction(b, forward, step, forward.getLoc(), results, argAttrs,
                  resultAttrs);
  return success();
}

LogicalResult TrainStep::runEval() {
  train = pass.optimizer != Optimizer::None;
  resolveTypes();
  if (failed(findLoss()) || failed(buildSignature()))
    return failure();
  std::string name = evalStepName(forward.getName());
  if (SymbolTable::lookupNearestSymbolFrom(forward, b.getStringAttr(name)))
    return forward.emitOpError("a function '")
           << name << "' exists; the eval step would replace it";
  step.setSymName(name);
  Value count = tokenCount();
  for (int64_t m = 0; m < pass.microbatches; ++m) {
    IRMapping map;
    SmallVector<Operation *> cloned;
    Value logits, labels, sum;
    if (failed(microbatchForward(m, map, cloned, logits, labels, sum)))
      return failure();
  }
  Value mean = meanLoss(count);
  func::ReturnOp::create(b, forward.getLoc(), mean);
  step.setFunctionType(b.getFunctionType(argTypes, {mean.getType()}));
  step.setAllArgAttrs(argAttrs);
  step.setResultAttr(0, NNDialect::kOutputAttrName, b.getStringAttr("loss"));
  return success();
}

/// The saved activations (bytes live when the backward starts) of the step
/// built from `module`'s copy with `plan`.
FailureOr<int64_t> BuildTrainStepPass::savedWith(const RematPlan &plan) {
  OwningOpRef<ModuleOp> trial = getOperation().clone();
  auto forward = trial->lookupSymbol<func::FuncOp>(entry);
  if (failed(TrainStep(*this, forward, plan, /*quiet=*/true).run()))
    return failure();
  auto step = trial->lookupSymbol<func::FuncOp>(entry);
  return replayMemory(step, dist::findMesh(*trial), /*planned=*/false)
      .saved.value_or(0);
}

FailureOr<RematPlan> BuildTrainStepPass::planForBudget(func::FuncOp forward,
                                                       double budget) {
  SmallVector<Operation *> ops;
  for (Operation &op : forward.getBody().front().without_terminator())
    ops.push_back(&op);
  int64_t layers = static_cast<int64_t>(decoderLayers(ops).size());
  if (layers == 0)
    return forward.emitError("an activation memory budget needs decoder "
                             "layers to checkpoint (ops whose path is in a "
                             "module-list element such as `...layers.N`)");
  // Plan p of 0 ... 2·layers: selective on the first p layers, then full
  // on the first p - layers; each recomputes more and saves less.
  auto planAt = [&](int64_t p) {
    RematPlan plan;
    plan.selective = std::min(p, layers);
    plan.full = std::max<int64_t>(p - layers, 0);
    return plan;
  };
  int64_t trials = 0;
  auto saved = [&](int64_t p) {
    ++trials;
    return savedWith(planAt(p));
  };
  FailureOr<int64_t> none = saved(0), all = saved(2 * layers);
  if (failed(none) || failed(all))
    return failure();
  double target = budget <= 1 ? budget * *none : budget;
  if (*all > target)
    return forward.emitError("activation memory budget of ")
           << static_cast<int64_t>(target)
           << " bytes per rank cannot be met: with full checkpointing of "
              "every layer the forward still saves "
           << *all << " bytes for the backward (" << *none << " without)";
  int64_t lo = -1, hi = 2 * layers, fits = *all;
  if (*none <= target) {
    hi = 0;
    fits = *none;
  }
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    FailureOr<int64_t> bytes = saved(mid);
    if (failed(bytes))
      return failure();
    if (*bytes <= target) {
      hi = mid;
      fits = *bytes;
    } else {
      lo = mid;
    }
  }
  RematPlan plan = planAt(hi);
  emitRemark(forward.getLoc())
      << "activation memory budget " << static_cast<int64_t>(target)
      << " bytes: " << plan.selective - plan.full << " layers selective and "
      << plan.full << " full of " << layers << " (the first ones), saving "
      << fits << " bytes for the backward (" << *none
      << " without checkpointing); " << trials << " plans tried";
  return plan;
}

void BuildTrainStepPass::runOnOperation() {
  func::FuncOp forward = lookupEntry(getOperation(), entry, "train");
  if (!forward)
    return signalPassFailure();
  // The parallel config's MixedPrecisionPolicy, for each dtype option not
  // given explicitly: a parallel program follows FSDP2Manager's (bf16
  // parameters, f32 reduction) however its mesh was given.
  ParallelConfigAttr config = ParallelConfigAttr::of(getOperation());
  if (config) {
    MixedPrecisionPolicyAttr mp = config.getMpPolicy();
    // The attribute's verifier admits f32, bf16 and f16 only.
    auto dtype = [](Type t) {
      return t.isF32() ? Dtype::F32 : t.isF16() ? Dtype::F16 : Dtype::BF16;
    };
    for (auto [type, option] :
         {std::pair<Type, Option<Dtype> *>{mp.getParam(), &paramDtype},
          {mp.getReduce(), &reduceDtype},
          {mp.getOutput(), &outputDtype}})
      if (!option->hasValue())
        *option = dtype(type);
    if (!castForwardInputs.hasValue())
      castForwardInputs = mp.getCastForwardInputs().getValue();
  }
  RematPlan plan = RematPlan::uniform(checkpointingMode());
  double budget = activationMemoryBudget;
  if (config && !activationMemoryBudget.hasValue())
    budget = config.getActivationMemoryBudget().getValueAsDouble();
  if (budget < 0) {
    forward.emitError("activation-memory-budget must be >= 0, got ") << budget;
    return signalPassFailure();
  }
  if (budget > 0) {
    if (plan.any()) {
      forward.emitError("activation checkpointing and an activation memory "
                        "budget are both given; the budget chooses the "
                        "checkpointing");
      return signalPassFailure();
    }
    FailureOr<RematPlan> chosen = planForBudget(forward, budget);
    if (failed(chosen))
      return signalPassFailure();
    plan = *chosen;
  }
  if (evalStep &&
      failed(TrainStep(*this, forward, RematPlan(), /*quiet=*/true).runEval()))
    return signalPassFailure();
  if (failed(TrainStep(*this, forward, plan).run()))
    signalPassFailure();
}

} // namespace

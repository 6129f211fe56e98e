//===- RuntimeCallPatterns.cpp - nn/dist ops to runtime calls -------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One pattern lowers every op with RuntimeCallOpInterface: the op's ODS
// definition states the callee and its literal arguments. A few ops are
// not one call (split, concat, copy, wait) and have a pattern of their own,
// as do the calls and returns of layer functions.
//
//===----------------------------------------------------------------------===//

#include "LoweringState.h"

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Interfaces/RuntimeCallInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace fsdp;

namespace {

/// The kinds of literal a RuntimeCall may name (RuntimeCallInterface.td).
constexpr StringLiteral kLiteralKinds[] = {"bool",  "int",  "f64",    "ints",
                                           "dim",   "loss", "reduce", "tanh",
                                           "table", "group"};

/// Calls `fn(name, kind)` per word of `spec`.
template <typename Fn> void forEachLiteral(StringRef spec, Fn fn) {
  SmallVector<StringRef> words;
  spec.split(words, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef word : words) {
    auto [name, kind] = word.split(':');
    fn(name, kind);
  }
}

/// The literal of attribute `attr` (null when absent) of `kind` on `op`.
std::string literalOf(Operation *op, Attribute attr, StringRef kind,
                      const LoweringState &state) {
  if (kind == "bool")
    return attr && (isa<UnitAttr>(attr) || cast<BoolAttr>(attr).getValue())
               ? "true"
               : "false";
  if (kind == "int" || kind == "dim") {
    int64_t value = attr ? cast<IntegerAttr>(attr).getInt() : 0;
    if (kind == "dim")
      value = frontDim(
          value, cast<RankedTensorType>(op->getOperand(0).getType()).getRank());
    return intLiteral(value);
  }
  if (kind == "f64")
    return doubleLiteral(attr ? cast<FloatAttr>(attr).getValueAsDouble() : 0.0);
  if (kind == "ints")
    return intsLiteral(cast<DenseI64ArrayAttr>(attr).asArrayRef());
  if (kind == "loss") {
    StringRef reduction = attr ? cast<StringAttr>(attr).getValue() : "mean";
    return reduction == "sum"    ? "FSDP_LOSS_SUM"
           : reduction == "none" ? "FSDP_LOSS_NONE"
                                 : "FSDP_LOSS_MEAN";
  }
  if (kind == "reduce") {
    static const char *reductions[] = {"FSDP_REDUCE_SUM", "FSDP_REDUCE_AVG",
                                       "FSDP_REDUCE_MAX"};
    return reductions[static_cast<unsigned>(
        cast<dist::ReductionKindAttr>(attr).getValue())];
  }
  if (kind == "tanh")
    return attr && cast<StringAttr>(attr).getValue() == "tanh" ? "true"
                                                               : "false";
  if (kind == "table")
    return attr ? state.tables.lookup(attr) : "nullptr";
  assert(kind == "group" && "kinds are checked by prepareLiterals");
  return maskLiteral(state.groupOf.lookup(op));
}

/// Lowers any op with RuntimeCallOpInterface to the call its ODS states.
struct RuntimeCallPattern
    : OpInterfaceConversionPattern<RuntimeCallOpInterface> {
  RuntimeCallPattern(const TypeConverter &converter, LoweringState &state)
      : OpInterfaceConversionPattern(converter, state.context), state(state) {}

  LogicalResult
  matchAndRewrite(RuntimeCallOpInterface call, ArrayRef<Value> operands,
                  ConversionPatternRewriter &rewriter) const override {
    Operation *op = call;
    Location loc = op->getLoc();
    Value program = state.program(op);
    auto collective = dyn_cast<dist::CollectiveOpInterface>(op);
    bool async = collective && collective.isAsync();
    Call c(state.context,
           (call.getRuntimeCallee() + (async ? "_start" : "")).str());
    c.value(program);
    // An op fsdp-offload placed on the host allocates its results there.
    bool host = op->hasAttr("fsdp.host");
    auto placement = [&](bool onHost) {
      Call(state.context, "fsdp_prog_placement")
          .value(program)
          .literal(onHost ? "true" : "false")
          .emit(rewriter, loc);
    };
    if (host)
      placement(true);
    SmallVector<Value> results;
    if (call.getRuntimeWritesResults()) {
      // An in-place update's result is another handle to its operand.
      for (OpResult result : op->getResults()) {
        int reused = state.inPlace->reusedOperand(result);
        results.push_back(reused >= 0
                              ? Call(state.context, "fsdp_retain")
                                    .value(operands[unsigned(reused)])
                                    .emit(rewriter, loc, state.tensorType)
                              : Call(state.context, "fsdp_tensor_new")
                                    .value(program)
                                    .literal(typeLiteral(cast<RankedTensorType>(
                                        result.getType())))
                                    .emit(rewriter, loc, state.tensorType));
      }
      for (Value result : results)
        c.value(result);
    } else {
      c.literal(typeLiteral(
          collective ? collective.getResultTensorType()
                     : cast<RankedTensorType>(op->getResult(0).getType())));
    }
    if (auto segments =
            op->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes")) {
      // Several optional operands: one argument per operand group, NULL
      // for an absent one.
      unsigned next = 0;
      for (int32_t size : segments.asArrayRef()) {
        size == 0 ? c.literal("nullptr") : c.value(operands[next]);
        next += static_cast<unsigned>(size);
      }
    } else {
      for (unsigned i = 0, e = call.getRuntimeNumOperands(); i < e; ++i)
        i < operands.size() ? c.value(operands[i]) : c.literal("nullptr");
    }
    forEachLiteral(call.getRuntimeLiterals(),
                   [&](StringRef name, StringRef kind) {
                     c.literal(literalOf(op, op->getAttr(name), kind, state));
                   });
    if (results.empty())
      results.push_back(
          c.emit(rewriter, loc,
                 getTypeConverter()->convertType(op->getResult(0).getType())));
    else
      c.emit(rewriter, loc);
    if (host)
      placement(false);
    state.finish(rewriter, op, operands, results, 1);
    return success();
  }

  LoweringState &state;
};

/// A base for the patterns below: the state, and calls that start with the
/// program handle.
template <typename OpTy> struct StatePattern : OpConversionPattern<OpTy> {
  StatePattern(const TypeConverter &converter, LoweringState &state)
      : OpConversionPattern<OpTy>(converter, state.context), state(state) {}

  Call call(StringRef callee, Operation *op) const {
    return Call(state.context, callee).value(state.program(op));
  }

  LoweringState &state;
};

/// An op whose value is one runtime call on its one operand: dist.copy is
/// the identity (`fsdp_retain`: another reference to the same tensor),
/// dist.wait the started collective's result (`fsdp_wait`, which takes the
/// program).
template <typename OpTy> struct OneCallPattern : StatePattern<OpTy> {
  OneCallPattern(const TypeConverter &converter, LoweringState &state,
                 StringRef callee, bool takesProgram)
      : StatePattern<OpTy>(converter, state), callee(callee),
        takesProgram(takesProgram) {}

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    LoweringState &state = this->state;
    Call call =
        takesProgram ? this->call(callee, op) : Call(state.context, callee);
    Value v = call.value(adaptor.getOperands().front())
                  .emit(rewriter, op.getLoc(), state.tensorType);
    state.finish(rewriter, op, adaptor.getOperands(), v, 1);
    return success();
  }

  StringRef callee;
  bool takesProgram;
};

/// nn.split: each piece is a slice of the input.
struct SplitPattern : StatePattern<nn::SplitOp> {
  using StatePattern::StatePattern;
  LogicalResult
  matchAndRewrite(nn::SplitOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    int64_t dim = frontDim(static_cast<int64_t>(op.getDim()),
                           op.getInput().getType().getRank());
    int64_t start = 0;
    SmallVector<Value> pieces;
    for (auto [result, size] : llvm::zip(op.getResults(), op.getSizes())) {
      pieces.push_back(
          call("fsdp_op_slice", op)
              .literal(typeLiteral(cast<RankedTensorType>(result.getType())))
              .value(adaptor.getInput())
              .literal(intLiteral(dim))
              .literal(intLiteral(start))
              .emit(rewriter, op.getLoc(), state.tensorType));
      start += size;
    }
    state.finish(rewriter, op, adaptor.getOperands(), pieces, pieces.size());
    return success();
  }
};

/// A runtime call that takes its inputs last, as C variadic arguments,
/// after `literals` and their count: nn.concat and nn.roll.
template <typename OpTy> struct VariadicPattern : StatePattern<OpTy> {
  using StatePattern<OpTy>::StatePattern;
  using StatePattern<OpTy>::call;
  using StatePattern<OpTy>::state;

  /// The runtime function.
  virtual StringRef callee() const = 0;
  /// The call's operands and literals before the inputs.
  virtual void lead(OpTy op, typename OpTy::Adaptor adaptor,
                    Call &call) const = 0;

  LogicalResult
  matchAndRewrite(OpTy op, typename OpTy::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    ValueRange inputs = adaptor.getInputs();
    Call c = call(callee(), op);
    c.literal(typeLiteral(op.getResult().getType()));
    lead(op, adaptor, c);
    c.literal(intLiteral(static_cast<int64_t>(inputs.size())));
    for (Value input : inputs)
      c.value(input);
    Value v = c.emit(rewriter, op.getLoc(), state.tensorType);
    state.finish(rewriter, op, adaptor.getOperands(), v, 1);
    return success();
  }
};

/// nn.concat: fsdp_op_concat(p, type, dim, n, inputs...).
struct ConcatPattern : VariadicPattern<nn::ConcatOp> {
  using VariadicPattern::VariadicPattern;
  StringRef callee() const override { return "fsdp_op_concat"; }
  void lead(nn::ConcatOp op, OpAdaptor, Call &c) const override {
    c.literal(intLiteral(
        frontDim(static_cast<int64_t>(op.getDim()), op.getType().getRank())));
  }
};

/// nn.roll: fsdp_op_roll(p, type, shift, dim, block, scale, offset, count,
/// n, inputs...).
struct RollPattern : VariadicPattern<nn::RollOp> {
  using VariadicPattern::VariadicPattern;
  StringRef callee() const override { return "fsdp_op_roll"; }
  void lead(nn::RollOp op, OpAdaptor adaptor, Call &c) const override {
    c.value(adaptor.getShift())
        .literal(intLiteral(frontDim(static_cast<int64_t>(op.getDim()),
                                     op.getType().getRank())))
        .literal(intLiteral(static_cast<int64_t>(op.getBlock())))
        .literal(intLiteral(static_cast<int64_t>(op.getScale())))
        .literal(intLiteral(static_cast<int64_t>(op.getOffset())))
        .literal(intLiteral(static_cast<int64_t>(op.getCount().value_or(0))));
  }
};

/// A call of a layer function: its inputs and outputs pass in a frame.
struct LayerCallPattern : StatePattern<func::CallOp> {
  using StatePattern::StatePattern;
  LogicalResult
  matchAndRewrite(func::CallOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    ValueRange inputs = adaptor.getOperands();
    Value frame = call("fsdp_frame_new", op)
                      .literal(intLiteral(inputs.size() + op.getNumResults()))
                      .emit(rewriter, loc, state.frameType);
    for (auto [i, input] : llvm::enumerate(inputs))
      Call(state.context, state.frameSetter(input.getType()))
          .value(frame)
          .literal(intLiteral(i))
          .value(input)
          .emit(rewriter, loc);
    call(op.getCallee(), op).value(frame).emit(rewriter, loc);
    SmallVector<Value> outputs;
    for (unsigned i = 0; i < op.getNumResults(); ++i)
      outputs.push_back(
          Call(state.context, state.frameGetter(op.getResult(i).getType()))
              .value(frame)
              .literal(intLiteral(inputs.size() + i))
              .emit(rewriter, loc, state.handleOf(op.getResult(i).getType())));
    Call(state.context, "fsdp_frame_free").value(frame).emit(rewriter, loc);
    ++state.stats.layerCalls;
    rewriter.replaceOp(op, outputs);
    return success();
  }
};

/// The step's results go to the program; a layer function's outputs go
/// back in its frame, after its inputs.
struct ReturnPattern : StatePattern<func::ReturnOp> {
  using StatePattern::StatePattern;
  LogicalResult
  matchAndRewrite(func::ReturnOp op, OpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto func = op->getParentOfType<emitc::FuncOp>();
    auto layer = state.layerInputs.find(func.getSymName());
    ArrayRef<unsigned> dying = state.plan->operandsDyingAt(op);
    for (auto [i, v] : llvm::enumerate(adaptor.getOperands())) {
      if (layer != state.layerInputs.end()) {
        Call(state.context, state.frameSetter(v.getType()))
            .value(func.getArgument(1))
            .literal(intLiteral(layer->second + i))
            .value(v)
            .emit(rewriter, loc);
        continue;
      }
      state.handOverResult(rewriter, loc, state.program(op), int64_t(i), v,
                           llvm::is_contained(dying, i));
    }
    rewriter.replaceOpWithNewOp<emitc::ReturnOp>(op, Value());
    return success();
  }
};

} // namespace

void fsdp::populateNNToRuntimePatterns(const TypeConverter &converter,
                                       RewritePatternSet &patterns,
                                       LoweringState &state) {
  patterns.add<RuntimeCallPattern, SplitPattern, ConcatPattern, RollPattern,
               LayerCallPattern, ReturnPattern>(converter, state);
  patterns.add<OneCallPattern<dist::CopyOp>>(converter, state, "fsdp_retain",
                                             /*takesProgram=*/false);
  patterns.add<OneCallPattern<dist::WaitOp>>(converter, state, "fsdp_wait",
                                             /*takesProgram=*/true);
}

LogicalResult fsdp::prepareLiterals(Block &body, LoweringState &state,
                                    OpBuilder &tablesAt) {
  for (Operation &op : body) {
    auto call = dyn_cast<RuntimeCallOpInterface>(op);
    if (!call) {
      if (isa<dist::CopyOp, dist::WaitOp, nn::SplitOp, nn::ConcatOp, nn::RollOp,
              func::ReturnOp>(op))
        continue;
      return op.emitOpError("cannot be lowered to the runtime");
    }
    LogicalResult result = success();
    forEachLiteral(call.getRuntimeLiterals(), [&](StringRef name,
                                                  StringRef kind) {
      if (failed(result))
        return;
      if (!llvm::is_contained(op.getName().getAttributeNames(),
                              StringAttr::get(state.context, name)) ||
          !llvm::is_contained(kLiteralKinds, kind)) {
        result = op.emitOpError("states a runtime literal '")
                 << name << ":" << kind
                 << "' that names no attribute of the op or no kind";
        return;
      }
      Attribute attr = op.getAttr(name);
      if (kind == "group") {
        FailureOr<uint32_t> mask = state.axisMask(&op, cast<ArrayAttr>(attr));
        if (failed(mask)) {
          result = failure();
          return;
        }
        state.groups.insert(*mask);
        state.groupOf[&op] = *mask;
      }
      if (kind == "table" && attr && !state.tables.count(attr)) {
        std::string name = "fsdp_inv_freq_" + intLiteral(state.tables.size());
        std::string text;
        llvm::raw_string_ostream os(text);
        os << "static const double " << name << "[] = {";
        llvm::interleaveComma(cast<DenseF64ArrayAttr>(attr).asArrayRef(), os,
                              [&](double f) { os << doubleLiteral(f); });
        os << "};";
        emitc::VerbatimOp::create(tablesAt, op.getLoc(), text);
        state.tables[attr] = name;
      }
    });
    if (failed(result))
      return failure();
  }
  return success();
}

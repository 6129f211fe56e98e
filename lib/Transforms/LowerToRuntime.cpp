//===- LowerToRuntime.cpp - nn/dist program to runtime calls in EmitC -----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-lower-to-runtime`. The contract with the runtime is
// include/fsdp/Runtime/Program.h: every call gets the program handle first
// and, for ops, the static result type, so the runtime never re-derives a
// shape. Attributes become C++ literals in the calls.
//
//===----------------------------------------------------------------------===//

#include "LayerSegments.h"
#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"

#include <cstdio>

namespace fsdp {
#define GEN_PASS_DEF_LOWERTORUNTIMEPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

/// Argument attribute: the block of a parameter this rank holds.
constexpr llvm::StringLiteral kShardingAttrName = "dist.sharding";

//===----------------------------------------------------------------------===//
// C++ literals
//===----------------------------------------------------------------------===//

std::string dtypeLiteral(Type type) {
  if (type.isF32())
    return "FSDP_RT_F32";
  if (type.isBF16())
    return "FSDP_RT_BF16";
  if (type.isF16())
    return "FSDP_RT_F16";
  if (type.isInteger(32))
    return "FSDP_RT_I32";
  assert(type.isInteger(64) && "nn types are f32, bf16, f16, i32 or i64");
  return "FSDP_RT_I64";
}

/// `fsdp_type{FSDP_RT_F32, 3, {2, 16, 64}}`.
std::string typeLiteral(RankedTensorType type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "fsdp_type{" << dtypeLiteral(type.getElementType()) << ", "
     << type.getRank() << ", {";
  llvm::interleaveComma(type.getShape(), os);
  os << "}}";
  return s;
}

/// A C string literal of any bytes: quotes, backslashes, control and
/// non-ASCII bytes escaped (octal, so no following digit extends them).
std::string stringLiteral(StringRef value) {
  std::string s = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += char(c);
    } else if (c < 0x20 || c >= 0x7f || c == '?') {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "\\%03o", unsigned(c));
      s += octal;
    } else {
      s += char(c);
    }
  }
  return s + "\"";
}

/// A double literal that reads back to the same value.
std::string doubleLiteral(double value) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.17g", value);
  return s;
}

std::string intLiteral(int64_t value) { return std::to_string(value); }

/// `fsdp_ints{3, {1, 2, 3}}`.
std::string intsLiteral(ArrayRef<int64_t> values) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "fsdp_ints{" << values.size() << ", {";
  llvm::interleaveComma(values, os);
  os << "}}";
  return s;
}
std::string boolLiteral(bool value) { return value ? "true" : "false"; }

//===----------------------------------------------------------------------===//
// Call building
//===----------------------------------------------------------------------===//

/// Collects the arguments of one `emitc.call_opaque`: SSA operands and
/// literals, in call order.
class Call {
public:
  Call(MLIRContext *context, StringRef callee)
      : context(context), callee(callee) {}

  Call &value(Value v) {
    args.push_back(IntegerAttr::get(IndexType::get(context), operands.size()));
    operands.push_back(v);
    return *this;
  }
  Call &literal(StringRef text) {
    args.push_back(emitc::OpaqueAttr::get(context, text));
    return *this;
  }

  /// Emits the call; `resultType` is null for a void call.
  Value emit(OpBuilder &builder, Location loc, Type resultType = {}) {
    SmallVector<Type, 1> results;
    if (resultType)
      results.push_back(resultType);
    auto call = emitc::CallOpaqueOp::create(
        builder, loc, results, callee, operands, builder.getArrayAttr(args));
    return resultType ? call.getResult(0) : Value();
  }

private:
  MLIRContext *context;
  std::string callee;
  SmallVector<Value> operands;
  SmallVector<Attribute> args;
};

//===----------------------------------------------------------------------===//
// The lowering
//===----------------------------------------------------------------------===//

class Lowering {
public:
  Lowering(ModuleOp module, func::FuncOp entry, bool outlineLayers)
      : module(module), entry(entry), outlineLayers(outlineLayers),
        context(module.getContext()), builder(context) {
    programType = emitc::PointerType::get(
        emitc::OpaqueType::get(context, "fsdp_program"));
    tensorType =
        emitc::PointerType::get(emitc::OpaqueType::get(context, "fsdp_tensor"));
    futureType =
        emitc::PointerType::get(emitc::OpaqueType::get(context, "fsdp_future"));
    frameType =
        emitc::PointerType::get(emitc::OpaqueType::get(context, "fsdp_frame"));
  }

  LogicalResult run();

  unsigned numOpCalls = 0, numReleases = 0, numLayerFunctions = 0,
           numLayerCalls = 0;

private:
  LogicalResult collectMesh();
  FailureOr<uint32_t> axisMask(Operation *op, ArrayAttr axes);
  /// For a block of a tensor of `sharding`: per dim, the whole tensor's
  /// size, the splitting axes (major first, as 4-bit fields of axis index +
  /// 1 from the lowest bits up) and the group count.
  void packSharding(dist::ShardingAttr sharding, RankedTensorType type,
                    SmallVectorImpl<int64_t> &global,
                    SmallVectorImpl<int64_t> &packed,
                    SmallVectorImpl<int64_t> &groups) {
    for (int64_t d = 0; d < type.getRank(); ++d) {
      groups.push_back(sharding.getDimGroups(d));
      int64_t parts = 1, bits = 0, shift = 0;
      for (StringRef listed : sharding.getDimAxes(d))
        for (StringRef axis : mesh.expandAxis(listed)) {
          bits |= int64_t(axisIndex[axis] + 1) << shift;
          shift += 4;
          parts *= *mesh.getAxisSize(axis);
        }
      global.push_back(type.getDimSize(d) * parts);
      packed.push_back(bits);
    }
  }
  /// The number of blocks a vocabulary-parallel op's `shard_index` (a
  /// dist.axis_index) counts, or 1.
  int64_t numBlocks(Value shardIndex);
  LogicalResult emitDescribe(Location loc);
  LogicalResult emitArgument(BlockArgument arg, Location loc);
  LogicalResult emitForward(Location loc);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerCollective(dist::CollectiveOpInterface op);
  void emitReleases(Block &body);
  /// Emits the call of `segment`'s function (first emitting the function,
  /// from this instance, if it is the first).
  LogicalResult emitSegmentCall(const Segment &segment);
  LogicalResult emitSegmentFunction(const Segment &segment);

  /// Starts a call to `callee` with the program handle as first argument.
  Call call(StringRef callee) { return Call(context, callee).value(program); }
  /// Reads slot `index` of `frame` (a layer function's handles).
  Value frameGet(Value frame, int64_t index, Location loc) {
    return Call(context, "fsdp_frame_get")
        .value(frame)
        .literal(intLiteral(index))
        .emit(builder, loc, tensorType);
  }
  /// Writes handle `v` into slot `index` of `frame`.
  void frameSet(Value frame, int64_t index, Value v, Location loc) {
    Call(context, "fsdp_frame_set")
        .value(frame)
        .literal(intLiteral(index))
        .value(v)
        .emit(builder, loc);
  }
  /// Starts an op call returning a tensor of `type`.
  Call opCall(StringRef callee, Type type) {
    return call(callee).literal(typeLiteral(cast<RankedTensorType>(type)));
  }
  /// Emits an op call and records its owned result as the lowering of
  /// `original`.
  void define(Value original, Call &c) {
    Value v = c.emit(builder, original.getLoc(), tensorType);
    mapping[original] = v;
    owned.push_back(v);
    ++numOpCalls;
  }
  Value lookup(Value original) { return mapping.lookup(original); }
  /// Lowers `op` in destination-passing style: one fsdp_tensor_new per
  /// result, then `callee(p, results..., operands..., literals...)`.
  void destinationCall(Operation *op, StringRef callee, ValueRange operands,
                       ArrayRef<std::string> literals = {});
  /// Lowers the training-step ops; fails on ops it does not know.
  FailureOr<bool> lowerTrainingOp(Operation *op);
  /// Lowers the dist ops other than collectives (copy, axis_index,
  /// all_slice, wait); false for other ops.
  FailureOr<bool> lowerDistOp(Operation *op);
  /// Lowers reshape, transpose, slice, split, concat and cast; false for
  /// other ops.
  FailureOr<bool> lowerDataMovementOp(Operation *op);
  /// Lowers norms, rotary embedding, attention and softmax; false for other
  /// ops.
  FailureOr<bool> lowerNormAttentionOp(Operation *op);
  /// The name of a file-scope array holding `freq` (emitted once per
  /// distinct table), or `nullptr` when there is none.
  std::string frequencyTable(DenseF64ArrayAttr freq, Location loc);

  ModuleOp module;
  func::FuncOp entry;
  bool outlineLayers;
  MLIRContext *context;
  OpBuilder builder;
  Type programType, tensorType, futureType, frameType;
  Value program;
  /// The step function, and the layer functions emitted before it.
  Operation *forwardFunc = nullptr;
  DenseMap<unsigned, std::string> layerFunctions;
  /// Handles whose reference a layer function takes over (the caller's
  /// inputs that die there) or hands back (its outputs): not released where
  /// they were made.
  DenseSet<Value> transferred;
  dist::MeshOp mesh;
  llvm::StringMap<unsigned> axisIndex;
  llvm::SetVector<uint32_t> groups;
  DenseMap<Value, Value> mapping;
  SmallVector<Value> owned;
  /// Where file-scope tables go (after the include), and those emitted.
  OpBuilder::InsertPoint tablesAt;
  DenseMap<Attribute, std::string> tables;
};

std::string Lowering::frequencyTable(DenseF64ArrayAttr freq, Location loc) {
  if (!freq)
    return "nullptr";
  std::string &name = tables[freq];
  if (!name.empty())
    return name;
  name = "fsdp_inv_freq_" + std::to_string(tables.size() - 1);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "static const double " << name << "[] = {";
  llvm::interleaveComma(freq.asArrayRef(), os,
                        [&](double f) { os << doubleLiteral(f); });
  os << "};";
  OpBuilder::InsertionGuard guard(builder);
  builder.restoreInsertionPoint(tablesAt);
  emitc::VerbatimOp::create(builder, loc, text);
  tablesAt = builder.saveInsertionPoint();
  return name;
}

LogicalResult Lowering::collectMesh() {
  for (auto meshOp : module.getOps<dist::MeshOp>()) {
    if (mesh)
      return meshOp.emitOpError("is a second mesh; the runtime lowering "
                                "supports one mesh per program");
    mesh = meshOp;
    for (auto [i, axis] : llvm::enumerate(mesh.getAxes()))
      axisIndex[cast<StringAttr>(axis).getValue()] = i;
  }
  return success();
}

int64_t Lowering::numBlocks(Value shardIndex) {
  auto index =
      shardIndex ? shardIndex.getDefiningOp<dist::AxisIndexOp>() : nullptr;
  if (!index || !mesh)
    return 1;
  int64_t n = 1;
  for (Attribute axis : index.getMeshAxes())
    n *= mesh.getAxisSize(cast<StringAttr>(axis).getValue()).value_or(1);
  return n;
}

FailureOr<uint32_t> Lowering::axisMask(Operation *op, ArrayAttr axes) {
  uint32_t mask = 0;
  int64_t previous = -1;
  if (!mesh)
    return op->emitOpError("names an axis of no mesh in this module");
  for (Attribute listed : axes)
    for (StringRef axis :
         mesh.expandAxis(cast<StringAttr>(listed).getValue())) {
      auto it = axisIndex.find(axis);
      if (it == axisIndex.end())
        return op->emitOpError("names an axis of no mesh in this module");
      if (static_cast<int64_t>(it->second) <= previous) {
        InFlightDiagnostic diag = op->emitOpError(
            "lists its mesh axes out of the mesh's order; the runtime "
            "orders a group's ranks by the mesh");
        diag.attachNote(mesh.getLoc()) << "the mesh's order is here";
        return diag;
      }
      previous = it->second;
      mask |= 1u << it->second;
    }
  return mask;
}

/// Declares argument `arg` of the step: an input (with its split and id
/// range), optimizer state, or a parameter (with its initializer and the
/// block this rank holds).
LogicalResult Lowering::emitArgument(BlockArgument arg, Location loc) {
  unsigned i = arg.getArgNumber();
  auto type = cast<RankedTensorType>(arg.getType());
  if (auto name = entry.getArgAttrOfType<StringAttr>(
          i, nn::NNDialect::kInputAttrName)) {
    call("fsdp_prog_input")
        .literal(stringLiteral(name.getValue()))
        .literal(typeLiteral(type))
        .emit(builder, loc);
    // A data-parallel input: its batch dim is split over mesh axes.
    if (auto sharding =
            entry.getArgAttrOfType<dist::ShardingAttr>(i, kShardingAttrName)) {
      if (!mesh || type.getRank() == 0 || !sharding.getPartial().empty() ||
          llvm::any_of(llvm::seq<int64_t>(1, type.getRank()), [&](int64_t d) {
            return !sharding.getDimAxes(d).empty();
          }))
        return entry.emitOpError("input #")
               << i << " may only be split along its batch dim (0)";
      uint32_t mask = 0;
      for (StringRef listed : sharding.getDimAxes(0))
        for (StringRef axis : mesh.expandAxis(listed))
          mask |= 1u << axisIndex[axis];
      call("fsdp_prog_input_split")
          .literal(stringLiteral(name.getValue()))
          .literal(intLiteral(mask) + "u")
          .emit(builder, loc);
    }
    // Token ids feed an embedding; labels feed a loss: both ranges are
    // known from the vocabulary, which the data generator needs.
    // Through the slices and reshapes that microbatching adds.
    std::optional<int64_t> high;
    SmallVector<Value> worklist = {arg};
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      for (Operation *user : v.getUsers()) {
        if (isa<nn::SliceOp, nn::ReshapeOp>(user))
          worklist.push_back(user->getResult(0));
        if (auto embedding = dyn_cast<nn::EmbeddingOp>(user);
            embedding && embedding.getIds() == v)
          high = embedding.getTable().getType().getDimSize(0) *
                 numBlocks(embedding.getShardIndex());
        if (auto loss = dyn_cast<nn::CrossEntropyOp>(user);
            loss && loss.getLabels() == v)
          high = loss.getLogits().getType().getShape().back();
        if (auto loss = dyn_cast<nn::CrossEntropyPartialOp>(user);
            loss && loss.getLabels() == v)
          high = loss.getNumClasses()
                     ? int64_t(*loss.getNumClasses())
                     : loss.getLogits().getType().getShape().back() *
                           numBlocks(loss.getShardIndex());
      }
    }
    if (high)
      call("fsdp_prog_input_range")
          .literal(stringLiteral(name.getValue()))
          .literal(intLiteral(*high))
          .emit(builder, loc);
    return success();
  }
  if (auto state = entry.getArgAttrOfType<StringAttr>(
          i, nn::NNDialect::kStateAttrName)) {
    call("fsdp_prog_state")
        .literal(stringLiteral(state.getValue()))
        .literal(typeLiteral(type))
        .emit(builder, loc);
    return success();
  }
  auto name =
      entry.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kParamAttrName);
  if (!name)
    return entry.emitOpError("argument #")
           << i << " has neither nn.input, nn.param nor nn.state";
  auto init =
      entry.getArgAttrOfType<nn::InitAttr>(i, nn::NNDialect::kInitAttrName);
  static const char *kinds[] = {"FSDP_INIT_ZEROS", "FSDP_INIT_ONES",
                                "FSDP_INIT_NORMAL", "FSDP_INIT_UNIFORM"};
  auto sharding =
      entry.getArgAttrOfType<dist::ShardingAttr>(i, kShardingAttrName);
  Call c =
      call(sharding ? "fsdp_prog_param_shard" : "fsdp_prog_param")
          .literal(stringLiteral(name.getValue()))
          .literal(typeLiteral(type))
          .literal(kinds[init ? static_cast<unsigned>(init.getKind()) : 0])
          .literal(doubleLiteral(init ? init.getA().convertToDouble() : 0.0))
          .literal(doubleLiteral(init ? init.getB().convertToDouble() : 0.0));
  if (sharding) {
    // This rank holds one block: the whole tensor's dims and the axes
    // that split each dim let the runtime fill exactly that block.
    if (!mesh || sharding.getMesh().getValue() != mesh.getSymName())
      return entry.emitOpError("argument #")
             << i << " is sharded over a mesh this module does not have";
    if (!sharding.getPartial().empty() ||
        static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
      return entry.emitOpError("argument #")
             << i << " has a sharding that does not fit a parameter";
    SmallVector<int64_t> global, masks, groups;
    packSharding(sharding, type, global, masks, groups);
    // FSDP's padded blocks: the whole tensor is smaller than the blocks.
    // (The fsdp dialect verified both attributes: one integer per dim.)
    if (auto whole =
            entry.getArgAttrOfType<DenseI64ArrayAttr>(i, "fsdp.global_shape"))
      global.assign(whole.asArrayRef().begin(), whole.asArrayRef().end());
    // Per dim, how many of the trailing axes split the block the others
    // leave (FSDP within tensor parallelism), padded at its end.
    SmallVector<int64_t> inner(type.getRank(), 0);
    if (auto axes =
            entry.getArgAttrOfType<DenseI64ArrayAttr>(i, "fsdp.inner_axes"))
      inner.assign(axes.asArrayRef().begin(), axes.asArrayRef().end());
    c.literal(intsLiteral(global))
        .literal(intsLiteral(masks))
        .literal(intsLiteral(groups))
        .literal(intsLiteral(inner));
  }
  c.emit(builder, loc);
  return success();
}

LogicalResult Lowering::emitDescribe(Location loc) {
  auto func =
      emitc::FuncOp::create(builder, loc, "fsdp_program_describe",
                            FunctionType::get(context, {programType}, {}));
  Block *body = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(body);
  program = body->getArgument(0);

  if (mesh)
    for (auto [axis, size] : llvm::zip(mesh.getAxes(), mesh.getShape()))
      call("fsdp_prog_mesh_axis")
          .literal(stringLiteral(cast<StringAttr>(axis).getValue()))
          .literal(intLiteral(size))
          .emit(builder, loc);

  for (BlockArgument arg : entry.getArguments())
    if (failed(emitArgument(arg, loc)))
      return failure();

  for (unsigned i = 0; i < entry.getNumResults(); ++i) {
    auto name = entry.getResultAttrOfType<StringAttr>(
        i, nn::NNDialect::kOutputAttrName);
    call("fsdp_prog_output_name")
        .literal(stringLiteral(name ? name.getValue().str()
                                    : "output" + std::to_string(i)))
        .emit(builder, loc);
  }
  // How outputs are split over ranks, for tools that join the blocks.
  for (unsigned i = 0; i < entry.getNumResults(); ++i)
    if (auto sharding = entry.getResultAttrOfType<dist::ShardingAttr>(
            i, kShardingAttrName)) {
      auto type = cast<RankedTensorType>(entry.getResultTypes()[i]);
      if (!mesh ||
          static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
        return entry.emitOpError("result #")
               << i << " has a sharding that does not fit it";
      SmallVector<int64_t> global, packed, groups;
      packSharding(sharding, type, global, packed, groups);
      call("fsdp_prog_output_shard")
          .literal(intLiteral(i))
          .literal(intsLiteral(packed))
          .literal(intsLiteral(groups))
          .emit(builder, loc);
    }
  for (unsigned i = 0; i < entry.getNumResults(); ++i)
    if (auto arg = entry.getResultAttrOfType<IntegerAttr>(
            i, nn::NNDialect::kUpdatesAttrName))
      call("fsdp_prog_output_update")
          .literal(intLiteral(i))
          .literal(intLiteral(arg.getInt()))
          .emit(builder, loc);
  for (uint32_t mask : groups)
    call("fsdp_prog_group").literal(intLiteral(mask) + "u").emit(builder, loc);
  emitc::ReturnOp::create(builder, loc, Value());
  return success();
}

LogicalResult Lowering::lowerCollective(dist::CollectiveOpInterface op) {
  FailureOr<uint32_t> mask = axisMask(op, op.getMeshAxes());
  if (failed(mask))
    return failure();
  std::string callee = ("fsdp_op_" + op->getName().stripDialect()).str();
  if (op.isAsync())
    callee += "_start";
  Call c = call(callee)
               .literal(typeLiteral(op.getResultTensorType()))
               .value(lookup(op.getInput()))
               .literal(intLiteral(*mask) + "u");
  static const char *reductions[] = {"FSDP_REDUCE_SUM", "FSDP_REDUCE_AVG",
                                     "FSDP_REDUCE_MAX"};
  auto reduction = [&](dist::ReductionKind kind) {
    c.literal(reductions[static_cast<unsigned>(kind)]);
  };
  TypeSwitch<Operation *>(op)
      .Case(
          [&](dist::AllGatherOp o) { c.literal(intLiteral(o.getGatherDim())); })
      .Case([&](dist::ReduceScatterOp o) {
        reduction(o.getReduction());
        c.literal(intLiteral(o.getScatterDim()));
      })
      .Case([&](dist::AllReduceOp o) { reduction(o.getReduction()); })
      .Case([&](dist::AllToAllOp o) {
        c.literal(intLiteral(o.getSplitDim()))
            .literal(intLiteral(o.getConcatDim()));
      })
      .Case([&](dist::PermuteOp o) {
        c.literal(intLiteral(static_cast<int64_t>(o.getOffset())));
      })
      .Case([&](dist::BroadcastOp o) { c.literal(intLiteral(o.getRoot())); });
  groups.insert(*mask);
  Value result = op->getResult(0);
  if (op.isAsync()) {
    // A future is consumed by its dist.wait, never released.
    mapping[result] = c.emit(builder, op->getLoc(), futureType);
    ++numOpCalls;
  } else {
    define(result, c);
  }
  return success();
}

void Lowering::destinationCall(Operation *op, StringRef callee,
                               ValueRange operands,
                               ArrayRef<std::string> literals) {
  Call c = call(callee);
  for (Value result : op->getResults()) {
    Call alloc =
        call("fsdp_tensor_new")
            .literal(typeLiteral(cast<RankedTensorType>(result.getType())));
    define(result, alloc);
    c.value(lookup(result));
  }
  for (Value operand : operands)
    c.value(lookup(operand));
  for (const std::string &literal : literals)
    c.literal(literal);
  c.emit(builder, op->getLoc());
}

/// The runtime's name of a loss reduction.
std::string lossReduction(StringRef reduction) {
  return reduction == "sum"    ? "FSDP_LOSS_SUM"
         : reduction == "none" ? "FSDP_LOSS_NONE"
                               : "FSDP_LOSS_MEAN";
}

/// The dim `dim` of a rank-`rank` tensor, counted from the front.
int64_t frontDim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}

FailureOr<bool> Lowering::lowerDistOp(Operation *op) {
  if (auto copy = dyn_cast<dist::CopyOp>(op)) {
    // The identity: another reference to the same tensor.
    Call c = Call(context, "fsdp_retain").value(lookup(copy.getInput()));
    define(copy.getResult(), c);
    return true;
  }
  if (isa<dist::AxisIndexOp, dist::AllSliceOp>(op)) {
    auto axes = op->getAttrOfType<ArrayAttr>("mesh_axes");
    FailureOr<uint32_t> mask = axisMask(op, axes);
    if (failed(mask))
      return failure();
    groups.insert(*mask);
    Call c = opCall(isa<dist::AxisIndexOp>(op) ? "fsdp_op_axis_index"
                                               : "fsdp_op_all_slice",
                    op->getResult(0).getType());
    if (auto slice = dyn_cast<dist::AllSliceOp>(op))
      c.value(lookup(slice.getInput()));
    c.literal(intLiteral(*mask) + "u");
    if (auto slice = dyn_cast<dist::AllSliceOp>(op))
      c.literal(intLiteral(static_cast<int64_t>(slice.getSliceDim())));
    define(op->getResult(0), c);
    return true;
  }
  if (auto wait = dyn_cast<dist::WaitOp>(op)) {
    Call c = call("fsdp_wait").value(lookup(wait.getFuture()));
    define(wait.getResult(), c);
    return true;
  }
  return false;
}

FailureOr<bool> Lowering::lowerDataMovementOp(Operation *op) {
  if (!isa<nn::ReshapeOp, nn::TransposeOp, nn::SliceOp, nn::SplitOp,
           nn::ConcatOp, nn::CastOp>(op))
    return false;
  auto value = [&](Value v) { return lookup(v); };
  Type resultType = op->getResult(0).getType();
  auto simple = [&](StringRef callee, ValueRange operands) {
    Call c = opCall(callee, resultType);
    for (Value v : operands)
      c.value(value(v));
    define(op->getResult(0), c);
  };
  TypeSwitch<Operation *>(op)
      .Case([&](nn::ReshapeOp o) { simple("fsdp_op_reshape", {o.getInput()}); })
      .Case([&](nn::TransposeOp o) {
        Call c = opCall("fsdp_op_transpose", resultType);
        c.value(value(o.getInput())).literal(intsLiteral(o.getPerm()));
        define(o.getResult(), c);
      })
      .Case([&](nn::SliceOp o) {
        Call c = opCall("fsdp_op_slice", resultType);
        c.value(value(o.getInput()))
            .literal(intLiteral(frontDim(static_cast<int64_t>(o.getDim()),
                                         o.getInput().getType().getRank())))
            .literal(intLiteral(static_cast<int64_t>(o.getStart())));
        define(o.getResult(), c);
      })
      .Case([&](nn::SplitOp o) {
        // Each piece is a slice of the input.
        int64_t dim = frontDim(static_cast<int64_t>(o.getDim()),
                               o.getInput().getType().getRank());
        int64_t start = 0;
        for (auto [result, size] : llvm::zip(o.getResults(), o.getSizes())) {
          Call c = opCall("fsdp_op_slice", result.getType());
          c.value(value(o.getInput()))
              .literal(intLiteral(dim))
              .literal(intLiteral(start));
          define(result, c);
          start += size;
        }
      })
      .Case([&](nn::ConcatOp o) {
        // An n-ary concat is a chain of binary ones over growing prefixes.
        auto first = cast<RankedTensorType>(o.getInputs().front().getType());
        int64_t dim =
            frontDim(static_cast<int64_t>(o.getDim()), first.getRank());
        if (o.getInputs().size() == 1) {
          simple("fsdp_op_reshape", {o.getInputs().front()});
          return;
        }
        Value acc = o.getInputs().front();
        SmallVector<int64_t> shape(first.getShape());
        for (Value input : o.getInputs().drop_front()) {
          shape[dim] += cast<RankedTensorType>(input.getType()).getDimSize(dim);
          bool last = input == o.getInputs().back();
          Type type =
              last ? o.getResult().getType()
                   : RankedTensorType::get(shape, first.getElementType());
          Call c = opCall("fsdp_op_concat", type);
          c.value(value(acc)).value(value(input)).literal(intLiteral(dim));
          if (last) {
            define(o.getResult(), c);
          } else {
            // A partial result has no original value; give it a fresh key.
            Value v = c.emit(builder, o.getLoc(), tensorType);
            owned.push_back(v);
            ++numOpCalls;
            acc = v;
            mapping[v] = v;
          }
        }
      })
      .Case([&](nn::CastOp o) { simple("fsdp_op_cast", {o.getInput()}); });
  return true;
}

FailureOr<bool> Lowering::lowerNormAttentionOp(Operation *op) {
  if (!isa<nn::RMSNormOp, nn::LayerNormOp, nn::RotaryOp, nn::AttentionOp,
           nn::SoftmaxOp>(op))
    return false;
  auto value = [&](Value v) { return lookup(v); };
  Type resultType = op->getResult(0).getType();
  auto optional = [&](Call &c, Value v) -> Call & {
    return v ? c.value(value(v)) : c.literal("nullptr");
  };
  TypeSwitch<Operation *>(op)
      .Case([&](nn::RMSNormOp o) {
        Call c = opCall("fsdp_op_rms_norm", resultType);
        c.value(value(o.getInput()))
            .value(value(o.getWeight()))
            .literal(doubleLiteral(o.getEps().convertToDouble()));
        define(o.getResult(), c);
      })
      .Case([&](nn::LayerNormOp o) {
        Call c = opCall("fsdp_op_layer_norm", resultType);
        c.value(value(o.getInput())).value(value(o.getWeight()));
        optional(c, o.getBias())
            .literal(doubleLiteral(o.getEps().convertToDouble()));
        define(o.getResult(), c);
      })
      .Case([&](nn::RotaryOp o) {
        SmallVector<std::string> rope = {
            doubleLiteral(o.getTheta().convertToDouble()),
            frequencyTable(o.getInvFreqAttr(), o.getLoc()),
            doubleLiteral(o.getAttentionScaling().convertToDouble())};
        if (o.getInverse()) {
          destinationCall(op, "fsdp_op_rotary_inverse",
                          {o.getInput(), o.getPositions()}, rope);
          return;
        }
        Call c = opCall("fsdp_op_rotary", resultType);
        c.value(value(o.getInput())).value(value(o.getPositions()));
        for (const std::string &literal : rope)
          c.literal(literal);
        define(o.getResult(), c);
      })
      .Case([&](nn::AttentionOp o) {
        Call c = opCall("fsdp_op_attention", resultType);
        c.value(value(o.getQuery()))
            .value(value(o.getKey()))
            .value(value(o.getValue()))
            .literal(boolLiteral(o.getCausal()))
            .literal(intLiteral(
                static_cast<int64_t>(o.getSlidingWindow().value_or(0))))
            .literal(doubleLiteral(
                o.getScale() ? o.getScale()->convertToDouble() : 0.0));
        define(o.getResult(), c);
      })
      .Case([&](nn::SoftmaxOp o) {
        Call c = opCall("fsdp_op_softmax", resultType);
        c.value(value(o.getInput()))
            .literal(intLiteral(frontDim(static_cast<int64_t>(o.getDim()),
                                         o.getInput().getType().getRank())));
        define(o.getResult(), c);
      });
  return true;
}

LogicalResult Lowering::lowerOp(Operation *op) {
  if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op))
    return lowerCollective(collective);
  FailureOr<bool> training = lowerTrainingOp(op);
  if (failed(training))
    return failure();
  if (*training)
    return success();
  for (auto lower : {&Lowering::lowerDistOp, &Lowering::lowerDataMovementOp,
                     &Lowering::lowerNormAttentionOp}) {
    FailureOr<bool> lowered = (this->*lower)(op);
    if (failed(lowered))
      return failure();
    if (*lowered)
      return success();
  }
  if (isa<func::ReturnOp>(op))
    return success();
  if (!isa<nn::NNDialect>(op->getDialect()))
    return op->emitOpError("cannot be lowered to the runtime");

  auto value = [&](Value v) { return lookup(v); };
  Type resultType = op->getNumResults() ? op->getResult(0).getType() : Type();
  auto simple = [&](StringRef callee, ValueRange operands) {
    Call c = opCall(callee, resultType);
    for (Value v : operands)
      c.value(value(v));
    define(op->getResult(0), c);
  };
  auto optional = [&](Call &c, Value v) -> Call & {
    return v ? c.value(value(v)) : c.literal("nullptr");
  };

  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](nn::EmbeddingOp o) {
        Call c = opCall("fsdp_op_embedding", resultType);
        c.value(value(o.getTable())).value(value(o.getIds()));
        optional(c, o.getShardIndex());
        define(o.getResult(), c);
        return success();
      })
      .Case([&](nn::ReduceMaxOp o) {
        simple("fsdp_op_reduce_max", {o.getInput()});
        return success();
      })
      .Case([&](nn::CrossEntropyPartialOp o) {
        destinationCall(
            op, "fsdp_op_cross_entropy_partial",
            {o.getLogits(), o.getLabels(), o.getShift(), o.getShardIndex()},
            {intLiteral(static_cast<int64_t>(o.getIgnoreIndex())),
             intLiteral(int64_t(o.getNumClasses().value_or(0)))});
        return success();
      })
      .Case([&](nn::CrossEntropyCombineOp o) {
        Call c = opCall("fsdp_op_cross_entropy_combine", resultType);
        c.value(value(o.getSumExp()))
            .value(value(o.getTarget()))
            .value(value(o.getLabels()))
            .literal(intLiteral(static_cast<int64_t>(o.getIgnoreIndex())))
            .literal(lossReduction(o.getReduction()));
        define(o.getResult(), c);
        return success();
      })
      .Case([&](nn::LinearOp o) {
        Call c = opCall("fsdp_op_linear", resultType);
        c.value(value(o.getInput())).value(value(o.getWeight()));
        optional(c, o.getBias());
        define(o.getResult(), c);
        return success();
      })
      .Case<nn::MatmulOp, nn::BatchMatmulOp>([&](auto o) {
        Call c = opCall(isa<nn::MatmulOp>(op) ? "fsdp_op_matmul"
                                              : "fsdp_op_batch_matmul",
                        resultType);
        c.value(value(o.getLhs()))
            .value(value(o.getRhs()))
            .literal(boolLiteral(o.getTransposeA()))
            .literal(boolLiteral(o.getTransposeB()));
        define(o.getResult(), c);
        return success();
      })
      .Case([&](nn::AddOp o) {
        simple("fsdp_op_add", {o.getLhs(), o.getRhs()});
        return success();
      })
      .Case([&](nn::SubOp o) {
        simple("fsdp_op_sub", {o.getLhs(), o.getRhs()});
        return success();
      })
      .Case([&](nn::MulOp o) {
        simple("fsdp_op_mul", {o.getLhs(), o.getRhs()});
        return success();
      })
      .Case([&](nn::NegOp o) {
        simple("fsdp_op_neg", {o.getInput()});
        return success();
      })
      .Case([&](nn::SiluOp o) {
        simple("fsdp_op_silu", {o.getInput()});
        return success();
      })
      .Case([&](nn::ScaleOp o) {
        Call c = opCall("fsdp_op_scale", resultType);
        c.value(value(o.getInput()))
            .literal(doubleLiteral(o.getFactor().convertToDouble()));
        define(o.getResult(), c);
        return success();
      })
      .Case([&](nn::GeluOp o) {
        Call c = opCall("fsdp_op_gelu", resultType);
        c.value(value(o.getInput()))
            .literal(boolLiteral(o.getApproximate() == "tanh"));
        define(o.getResult(), c);
        return success();
      })
      .Case([&](nn::CrossEntropyOp o) {
        Call c = opCall("fsdp_op_cross_entropy", resultType);
        c.value(value(o.getLogits()))
            .value(value(o.getLabels()))
            .literal(intLiteral(static_cast<int64_t>(o.getIgnoreIndex())))
            .literal(lossReduction(o.getReduction()));
        define(o.getResult(), c);
        return success();
      })
      .Default([&](Operation *) {
        return op->emitOpError("has no runtime lowering");
      });
}

FailureOr<bool> Lowering::lowerTrainingOp(Operation *op) {
  auto f64 = [](APFloat v) { return doubleLiteral(v.convertToDouble()); };
  auto dim = [](int64_t d, Value v) {
    return intLiteral(
        frontDim(d, cast<RankedTensorType>(v.getType()).getRank()));
  };
  bool handled = true;
  TypeSwitch<Operation *>(op)
      .Case([&](nn::SiluGradOp o) {
        destinationCall(op, "fsdp_op_silu_grad", {o.getInput(), o.getGrad()});
      })
      .Case([&](nn::GeluGradOp o) {
        destinationCall(op, "fsdp_op_gelu_grad", {o.getInput(), o.getGrad()},
                        {boolLiteral(o.getApproximate() == "tanh")});
      })
      .Case([&](nn::RMSNormGradOp o) {
        destinationCall(op, "fsdp_op_rms_norm_grad",
                        {o.getInput(), o.getWeight(), o.getGrad()},
                        {f64(o.getEps())});
      })
      .Case([&](nn::LayerNormGradOp o) {
        destinationCall(op, "fsdp_op_layer_norm_grad",
                        {o.getInput(), o.getWeight(), o.getGrad()},
                        {f64(o.getEps())});
      })
      .Case([&](nn::AttentionGradOp o) {
        destinationCall(
            op, "fsdp_op_attention_grad",
            {o.getQuery(), o.getKey(), o.getValue(), o.getGrad()},
            {boolLiteral(o.getCausal()),
             intLiteral(static_cast<int64_t>(o.getSlidingWindow().value_or(0))),
             doubleLiteral(o.getScale() ? o.getScale()->convertToDouble()
                                        : 0.0)});
      })
      .Case([&](nn::SoftmaxGradOp o) {
        destinationCall(op, "fsdp_op_softmax_grad",
                        {o.getOutput(), o.getGrad()},
                        {dim(static_cast<int64_t>(o.getDim()), o.getOutput())});
      })
      .Case([&](nn::EmbeddingGradOp o) {
        if (Value index = o.getShardIndex())
          destinationCall(op, "fsdp_op_embedding_grad",
                          {o.getIds(), o.getGrad(), index});
        else
          destinationCall(op, "fsdp_op_embedding_grad",
                          {o.getIds(), o.getGrad()}, {"nullptr"});
      })
      .Case([&](nn::CrossEntropyPartialGradOp o) {
        destinationCall(op, "fsdp_op_cross_entropy_partial_grad",
                        {o.getLogits(), o.getLabels(), o.getShift(),
                         o.getShardIndex(), o.getGradSumExp(),
                         o.getGradTarget()},
                        {intLiteral(static_cast<int64_t>(o.getIgnoreIndex())),
                         intLiteral(int64_t(o.getNumClasses().value_or(0)))});
      })
      .Case([&](nn::CrossEntropyCombineGradOp o) {
        destinationCall(op, "fsdp_op_cross_entropy_combine_grad",
                        {o.getSumExp(), o.getLabels(), o.getGrad()},
                        {intLiteral(static_cast<int64_t>(o.getIgnoreIndex())),
                         lossReduction(o.getReduction())});
      })
      .Case([&](nn::CrossEntropyGradOp o) {
        destinationCall(op, "fsdp_op_cross_entropy_grad",
                        {o.getLogits(), o.getLabels(), o.getGrad()},
                        {intLiteral(static_cast<int64_t>(o.getIgnoreIndex())),
                         lossReduction(o.getReduction())});
      })
      .Case([&](nn::ReduceSumToOp o) {
        destinationCall(op, "fsdp_op_reduce_sum_to", {o.getInput()});
      })
      .Case([&](nn::PadOp o) {
        destinationCall(op, "fsdp_op_pad", {o.getInput()},
                        {dim(static_cast<int64_t>(o.getDim()), o.getInput()),
                         intLiteral(static_cast<int64_t>(o.getBefore())),
                         intLiteral(static_cast<int64_t>(o.getAfter()))});
      })
      .Case([&](nn::SumSquaresOp o) {
        destinationCall(op, "fsdp_op_sum_squares", {o.getInput()});
      })
      .Case([&](nn::DivOp o) {
        destinationCall(op, "fsdp_op_div", {o.getLhs(), o.getRhs()});
      })
      .Case([&](nn::FillOp o) {
        destinationCall(op, "fsdp_op_fill", {}, {f64(o.getValue())});
      })
      .Case([&](nn::TokenCountOp o) {
        destinationCall(op, "fsdp_op_token_count", {o.getLabels()},
                        {intLiteral(static_cast<int64_t>(o.getIgnoreIndex()))});
      })
      .Case([&](nn::ClipCoefficientOp o) {
        destinationCall(op, "fsdp_op_clip_coefficient", {o.getSumOfSquares()},
                        {f64(o.getMaxNorm())});
      })
      .Case([&](nn::AdamWOp o) {
        destinationCall(op, "fsdp_op_adamw",
                        {o.getParam(), o.getGrad(), o.getExpAvg(),
                         o.getExpAvgSq(), o.getStep(), o.getGradScale()},
                        {f64(o.getLr()), f64(o.getBeta1()), f64(o.getBeta2()),
                         f64(o.getEps()), f64(o.getWeightDecay())});
      })
      .Case([&](nn::SGDOp o) {
        destinationCall(
            op, "fsdp_op_sgd",
            {o.getParam(), o.getGrad(), o.getMomentumBuffer(), o.getStep(),
             o.getGradScale()},
            {f64(o.getLr()), f64(o.getMomentum()), f64(o.getWeightDecay())});
      })
      .Default([&](Operation *) { handled = false; });
  return handled;
}

void Lowering::emitReleases(Block &body) {
  // The last op that uses each owned handle; unused ones die at birth.
  DenseMap<Value, Operation *> lastUse;
  for (Value v : owned)
    lastUse[v] = v.getDefiningOp();
  for (Operation &op : body)
    for (Value operand : op.getOperands())
      if (auto it = lastUse.find(operand); it != lastUse.end())
        it->second = &op;
  for (Value v : owned) {
    if (transferred.contains(v))
      continue;
    builder.setInsertionPointAfter(lastUse[v]);
    Call(context, "fsdp_release").value(v).emit(builder, v.getLoc());
    ++numReleases;
  }
}

LogicalResult Lowering::emitForward(Location loc) {
  auto func =
      emitc::FuncOp::create(builder, loc, "fsdp_program_forward",
                            FunctionType::get(context, {programType}, {}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);
  program = body->getArgument(0);

  forwardFunc = func;
  for (BlockArgument arg : entry.getArguments())
    mapping[arg] = call("fsdp_prog_arg")
                       .literal(intLiteral(arg.getArgNumber()))
                       .emit(builder, arg.getLoc(), tensorType);
  SmallVector<Segment> segments;
  if (outlineLayers)
    segments = findLayerSegments(entry.getBody().front());
  const Segment *next = segments.begin();
  unsigned index = 0;
  for (Operation &op : entry.getBody().front()) {
    unsigned i = index++;
    if (next != segments.end() && i >= next->begin) {
      if (i == next->begin && failed(emitSegmentCall(*next)))
        return failure();
      if (i + 1 == next->end)
        ++next;
      continue;
    }
    if (failed(lowerOp(&op)))
      return failure();
  }
  auto ret = cast<func::ReturnOp>(entry.getBody().front().getTerminator());
  for (auto [i, result] : llvm::enumerate(ret.getOperands()))
    call("fsdp_prog_result")
        .literal(intLiteral(i))
        .value(lookup(result))
        .emit(builder, ret.getLoc());
  auto end = emitc::ReturnOp::create(builder, loc, Value());
  emitReleases(*body);
  // Releases go after their last use, which may be the final result call;
  // keep the return last.
  end->moveBefore(body, body->end());
  return success();
}

LogicalResult Lowering::emitSegmentFunction(const Segment &segment) {
  std::string name =
      "fsdp_layer_function_" + std::to_string(layerFunctions.size());
  Block &step = entry.getBody().front();
  auto first = std::next(step.begin(), segment.begin);
  auto last = std::next(step.begin(), segment.end);
  Location loc = first->getLoc();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(forwardFunc);
  auto func = emitc::FuncOp::create(
      builder, loc, name,
      FunctionType::get(context, {programType, frameType}, {}));
  func.setSpecifiersAttr(builder.getStrArrayAttr({"static"}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  // The function has its own handles: swap the caller's state out.
  Value callerProgram = program;
  DenseMap<Value, Value> callerMapping;
  SmallVector<Value> callerOwned;
  std::swap(mapping, callerMapping);
  std::swap(owned, callerOwned);
  program = body->getArgument(0);
  Value frame = body->getArgument(1);
  for (auto [i, input] : llvm::enumerate(segment.inputs)) {
    Value v = frameGet(frame, i, input.getLoc());
    mapping[input] = v;
    // An input whose last use is here is released here, as inline code
    // would release it.
    if (segment.inputDies[i])
      owned.push_back(v);
  }
  LogicalResult result = success();
  for (Operation &op : llvm::make_range(first, last))
    if (failed(result = lowerOp(&op)))
      break;
  if (succeeded(result)) {
    for (auto [i, output] : llvm::enumerate(segment.outputs)) {
      Value v = lookup(output);
      frameSet(frame, segment.inputs.size() + i, v, output.getLoc());
      transferred.insert(v);
    }
    auto end = emitc::ReturnOp::create(builder, loc, Value());
    emitReleases(*body);
    end->moveBefore(body, body->end());
  }
  std::swap(mapping, callerMapping);
  std::swap(owned, callerOwned);
  program = callerProgram;
  layerFunctions[segment.function] = name;
  ++numLayerFunctions;
  return result;
}

LogicalResult Lowering::emitSegmentCall(const Segment &segment) {
  if (!layerFunctions.count(segment.function) &&
      failed(emitSegmentFunction(segment)))
    return failure();
  Location loc =
      std::next(entry.getBody().front().begin(), segment.begin)->getLoc();
  int64_t slots = segment.inputs.size() + segment.outputs.size();
  Value frame = call("fsdp_frame_new")
                    .literal(intLiteral(slots))
                    .emit(builder, loc, frameType);
  for (auto [i, input] : llvm::enumerate(segment.inputs)) {
    Value v = lookup(input);
    frameSet(frame, i, v, loc);
    if (segment.inputDies[i])
      transferred.insert(v);
  }
  call(layerFunctions[segment.function]).value(frame).emit(builder, loc);
  for (auto [i, output] : llvm::enumerate(segment.outputs)) {
    Value v = frameGet(frame, segment.inputs.size() + i, output.getLoc());
    mapping[output] = v;
    owned.push_back(v);
  }
  Call(context, "fsdp_frame_free").value(frame).emit(builder, loc);
  ++numLayerCalls;
  return success();
}

LogicalResult Lowering::run() {
  if (failed(collectMesh()))
    return failure();
  Location loc = entry.getLoc();
  builder.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(builder, loc, "fsdp/Runtime/Program.h");
  tablesAt = builder.saveInsertionPoint();
  builder.setInsertionPointToEnd(module.getBody());
  // The forward body first: it finds the communicator groups that the
  // description declares.
  OpBuilder::InsertPoint describeAt = builder.saveInsertionPoint();
  if (failed(emitForward(loc)))
    return failure();
  builder.restoreInsertionPoint(describeAt);
  if (failed(emitDescribe(loc)))
    return failure();
  entry.erase();
  if (mesh)
    mesh.erase();
  // The program is plain EmitC now: the passes' annotations are spent.
  for (NamedAttribute attr : llvm::to_vector(module->getDiscardableAttrs()))
    if (attr.getName().getValue().starts_with("fsdp.") ||
        attr.getName().getValue().starts_with("dist."))
      module->removeDiscardableAttr(attr.getName());
  return success();
}

struct LowerToRuntimePass
    : fsdp::impl::LowerToRuntimePassBase<LowerToRuntimePass> {
  using LowerToRuntimePassBase::LowerToRuntimePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp func = lookupEntry(module, entry, "lower");
    if (!func)
      return signalPassFailure();
    Lowering lowering(module, func, outlineLayers);
    if (failed(lowering.run()))
      return signalPassFailure();
    numOpCalls += lowering.numOpCalls;
    numReleases += lowering.numReleases;
    numLayerFunctions += lowering.numLayerFunctions;
    numLayerCalls += lowering.numLayerCalls;
  }
};

} // namespace

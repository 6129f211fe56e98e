//===- LowerProgram.cpp - A per-rank step to the runtime ABI --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The driver of the lowering. It
//   1. checks every op and collects the groups and tables its literals name;
//   2. plans the releases (ReleasePlan.h) on the step as it is;
//   3. writes `fsdp_program_describe` from the step's signature, with the
//      step's memory plan (StepBuffers.h);
//   4. outlines repeated per-layer runs (LayerSegments.h) into functions;
//   5. gives each function its handles (program arguments or a frame's
//      slots), turns each run of calls of one layer function into a loop
//      (LayerLoops.h) and lets the conversion patterns replace every op.
//
//===----------------------------------------------------------------------===//

#include "LayerLoops.h"
#include "LayerSegments.h"
#include "LoweringState.h"

#include "fsdp/Analysis/StepBuffers.h"
#include "fsdp/Analysis/StepFunction.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

using namespace mlir;
using namespace fsdp;

namespace {

/// Argument attribute: the block of a parameter this rank holds.
constexpr llvm::StringLiteral kShardingAttrName = "dist.sharding";

/// Writes `fsdp_program_describe`: the mesh, the step's arguments and
/// results, and the communicator groups.
class Describer {
public:
  Describer(func::FuncOp entry, LoweringState &state, OpBuilder &builder)
      : entry(entry), state(state), builder(builder) {}

  /// `withEval`: the program has an eval step (fsdp_program_eval).
  LogicalResult emitDescribe(Location loc, bool memoryPlan, bool withEval);
  void emitModelFlops(Location loc);
  /// The function emitDescribe wrote.
  emitc::FuncOp function;

private:
  /// Declares argument `arg` of the step: an input (with its split and id
  /// range), optimizer state, or a parameter (with its initializer and the
  /// block this rank holds), and its placement in host memory.
  LogicalResult emitArgument(BlockArgument arg, Location loc);
  /// The declaration of `arg` by its kind (input, state or parameter).
  LogicalResult emitArgumentKind(BlockArgument arg, Location loc);
  /// An input's split over data-parallel and context-parallel ranks.
  LogicalResult emitInputSplit(BlockArgument arg, StringRef name, Location loc);
  /// What the data loader needs of an input: its value range, whether it
  /// holds positions in documents, its ignored label.
  void emitInputRoles(BlockArgument arg, StringRef name, Location loc);
  /// A parameter: its initializer and, sharded, the block this rank holds.
  LogicalResult emitParam(BlockArgument arg, StringRef name, Location loc);
  /// The number of blocks a vocabulary-parallel op's `shard_index` (a
  /// dist.axis_index) counts, or 1.
  int64_t numBlocks(Value shardIndex);
  /// Hands the runtime the step's memory plan (StepBuffers.h): a static
  /// table of (bytes, offset) per device buffer in allocation order.
  void emitMemoryPlan(Location loc);
  /// Starts a call to `callee` with the program handle as first argument.
  Call call(StringRef callee) {
    return Call(state.context, callee).value(program);
  }

  func::FuncOp entry;
  LoweringState &state;
  OpBuilder &builder;
  Value program;
};

int64_t Describer::numBlocks(Value shardIndex) {
  auto index =
      shardIndex ? shardIndex.getDefiningOp<dist::AxisIndexOp>() : nullptr;
  if (!index || !state.mesh)
    return 1;
  int64_t n = 1;
  for (Attribute axis : index.getMeshAxes())
    n *= state.mesh.getAxisSize(cast<StringAttr>(axis).getValue()).value_or(1);
  return n;
}

LogicalResult Describer::emitArgument(BlockArgument arg, Location loc) {
  if (failed(emitArgumentKind(arg, loc)))
    return failure();
  // CPU offload: the argument lives in host memory.
  if (entry.getArgAttr(arg.getArgNumber(), "fsdp.host"))
    call("fsdp_prog_arg_on_host")
        .literal(intLiteral(arg.getArgNumber()))
        .emit(builder, loc);
  return success();
}

LogicalResult Describer::emitArgumentKind(BlockArgument arg, Location loc) {
  unsigned i = arg.getArgNumber();
  auto type = cast<RankedTensorType>(arg.getType());
  // An input or optimizer state: declared by its name and type.
  auto input =
      entry.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kInputAttrName);
  auto state =
      entry.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kStateAttrName);
  if (input || state) {
    StringRef name = (input ? input : state).getValue();
    call(input ? "fsdp_prog_input" : "fsdp_prog_state")
        .literal(stringLiteral(name))
        .literal(typeLiteral(type))
        .emit(builder, loc);
    if (!input)
      return success();
    if (failed(emitInputSplit(arg, name, loc)))
      return failure();
    emitInputRoles(arg, name, loc);
    return success();
  }
  auto name =
      entry.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kParamAttrName);
  if (!name)
    return entry.emitOpError("argument #")
           << i << " has neither nn.input, nn.param nor nn.state";
  return emitParam(arg, name.getValue(), loc);
}

LogicalResult Describer::emitInputSplit(BlockArgument arg, StringRef name,
                                        Location loc) {
  // A data-parallel input: its batch dim is split over mesh axes; a
  // context-parallel one: its sequence dim, in load-balanced chunks.
  unsigned i = arg.getArgNumber();
  auto type = cast<RankedTensorType>(arg.getType());
  auto sharding =
      entry.getArgAttrOfType<dist::ShardingAttr>(i, kShardingAttrName);
  if (!sharding)
    return success();
  auto splitsSequence = [&] {
    return type.getRank() == 2 && !sharding.getDimAxes(1).empty() &&
           dist::ShardingAttr::isLoadBalanced(sharding.getDimGroups(1));
  };
  if (!state.mesh || type.getRank() == 0 || !sharding.getPartial().empty() ||
      sharding.getDimGroups(0) != 1 ||
      llvm::any_of(llvm::seq<int64_t>(1, type.getRank()), [&](int64_t d) {
        return !sharding.getDimAxes(d).empty() && !(d == 1 && splitsSequence());
      }))
    return entry.emitOpError("input #")
           << i
           << " may only be split along its batch dim (0) and, "
              "load-balanced, its sequence dim (1)";
  auto maskOf = [&](int64_t d) {
    uint32_t mask = 0;
    for (StringRef listed : sharding.getDimAxes(d))
      for (StringRef axis : state.mesh.expandAxis(listed))
        mask |= 1u << state.axisIndex.lookup(axis);
    return mask;
  };
  if (uint32_t mask = maskOf(0))
    call("fsdp_prog_input_split")
        .literal(stringLiteral(name))
        .literal(maskLiteral(mask))
        .emit(builder, loc);
  if (!splitsSequence())
    return success();
  call("fsdp_prog_input_sequence_split")
      .literal(stringLiteral(name))
      .literal(maskLiteral(maskOf(1)))
      .emit(builder, loc);
  if (int64_t rounds = -sharding.getDimGroups(1) / 2; rounds > 1)
    call("fsdp_prog_input_sequence_rounds")
        .literal(stringLiteral(name))
        .literal(intLiteral(rounds))
        .emit(builder, loc);
  return success();
}

void Describer::emitInputRoles(BlockArgument arg, StringRef name,
                               Location loc) {
  // Token ids feed an embedding; labels feed a loss: both ranges are
  // known from the vocabulary, which the data generator needs.
  // Through the slices and reshapes that microbatching adds.
  // Position_ids a packed attention reads are positions in documents;
  // the loss's ignored label is what the data loader writes where none
  // counts.
  std::optional<int64_t> high, ignore;
  bool documents = false;
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
      if (auto attention = dyn_cast<nn::AttentionOp>(user))
        documents |= attention.getDocumentPositions() == v;
      if (auto loss = dyn_cast<nn::CrossEntropyOp>(user);
          loss && loss.getLabels() == v) {
        high = loss.getLogits().getType().getShape().back();
        ignore = loss.getIgnoreIndex();
      }
      if (auto loss = dyn_cast<nn::CrossEntropyPartialOp>(user);
          loss && loss.getLabels() == v) {
        high = loss.getNumClasses()
                   ? int64_t(*loss.getNumClasses())
                   : loss.getLogits().getType().getShape().back() *
                         numBlocks(loss.getShardIndex());
        ignore = loss.getIgnoreIndex();
      }
    }
  }
  if (high)
    call("fsdp_prog_input_range")
        .literal(stringLiteral(name))
        .literal(intLiteral(*high))
        .emit(builder, loc);
  if (documents)
    call("fsdp_prog_input_documents")
        .literal(stringLiteral(name))
        .emit(builder, loc);
  if (ignore)
    call("fsdp_prog_input_ignore")
        .literal(stringLiteral(name))
        .literal(intLiteral(*ignore))
        .emit(builder, loc);
}

LogicalResult Describer::emitParam(BlockArgument arg, StringRef name,
                                   Location loc) {
  unsigned i = arg.getArgNumber();
  auto type = cast<RankedTensorType>(arg.getType());
  auto init =
      entry.getArgAttrOfType<nn::InitAttr>(i, nn::NNDialect::kInitAttrName);
  static const char *kinds[] = {"FSDP_INIT_ZEROS", "FSDP_INIT_ONES",
                                "FSDP_INIT_NORMAL", "FSDP_INIT_UNIFORM"};
  auto sharding =
      entry.getArgAttrOfType<dist::ShardingAttr>(i, kShardingAttrName);
  Call c =
      call(sharding ? "fsdp_prog_param_shard" : "fsdp_prog_param")
          .literal(stringLiteral(name))
          .literal(typeLiteral(type))
          .literal(kinds[init ? static_cast<unsigned>(init.getKind()) : 0])
          .literal(doubleLiteral(init ? init.getA().convertToDouble() : 0.0))
          .literal(doubleLiteral(init ? init.getB().convertToDouble() : 0.0));
  if (sharding) {
    // This rank holds one block: the whole tensor's dims and the axes
    // that split each dim let the runtime fill exactly that block.
    if (!state.mesh || sharding.getMesh().getValue() != state.mesh.getSymName())
      return entry.emitOpError("argument #")
             << i << " is sharded over a mesh this module does not have";
    if (!sharding.getPartial().empty() ||
        static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
      return entry.emitOpError("argument #")
             << i << " has a sharding that does not fit a parameter";
    SmallVector<int64_t> global, masks, groups;
    state.packSharding(sharding, type, global, masks, groups);
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

void Describer::emitMemoryPlan(Location loc) {
  StepBuffers buffers(entry);
  MemoryPlan plan = planMemory(buffers);
  SmallVector<int64_t> table;
  for (auto [b, offset] : llvm::zip(buffers.buffers(), plan.offsets))
    if (!b.host)
      table.append({b.bytes, offset});
  if (table.empty())
    return;
  auto type =
      emitc::ArrayType::get({int64_t(table.size())}, builder.getI64Type());
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(function);
    emitc::GlobalOp::create(
        builder, loc, "fsdp_memory_plan", type,
        DenseIntElementsAttr::get(RankedTensorType::get({int64_t(table.size())},
                                                        builder.getI64Type()),
                                  table),
        /*extern_specifier=*/false, /*static_specifier=*/true,
        /*const_specifier=*/true);
  }
  Value array =
      emitc::GetGlobalOp::create(builder, loc, type, "fsdp_memory_plan");
  call("fsdp_prog_memory_plan")
      .literal(intLiteral(plan.arena))
      .literal(intLiteral(int64_t(table.size() / 2)))
      .value(array)
      .emit(builder, loc);
}

/// One step's model FLOPs on this rank, as the simulator counts them (the
/// cost model's, recomputation excluded), and the dtype they run in.
void Describer::emitModelFlops(Location loc) {
  double flops = 0;
  for (Operation &op : entry.getBody().front())
    if (auto cost = dyn_cast<nn::CostOpInterface>(&op);
        cost && !op.hasAttr("fsdp.recompute"))
      flops += cost.getCost().modelFlops;
  if (flops <= 0)
    return;
  StringRef dtype = "f32";
  if (auto module = entry->getParentOfType<ModuleOp>())
    if (auto precision =
            module->getAttrOfType<DictionaryAttr>("fsdp.precision"))
      if (auto param = precision.getAs<StringAttr>("param"))
        dtype = param.getValue();
  call("fsdp_prog_model_flops")
      .literal(doubleLiteral(flops))
      .literal(dtype == "bf16"  ? "FSDP_RT_BF16"
               : dtype == "f16" ? "FSDP_RT_F16"
                                : "FSDP_RT_F32")
      .emit(builder, loc);
}

LogicalResult Describer::emitDescribe(Location loc, bool memoryPlan,
                                      bool withEval) {
  auto func = function = emitc::FuncOp::create(
      builder, loc, "fsdp_program_describe",
      FunctionType::get(state.context, {state.programType}, {}));
  Block *body = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(body);
  program = body->getArgument(0);

  if (state.mesh)
    for (auto [axis, size] :
         llvm::zip(state.mesh.getAxes(), state.mesh.getShape()))
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
      if (!state.mesh ||
          static_cast<int64_t>(sharding.getDims().size()) != type.getRank())
        return entry.emitOpError("result #")
               << i << " has a sharding that does not fit it";
      SmallVector<int64_t> global, packed, groups;
      state.packSharding(sharding, type, global, packed, groups);
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
  if (defersUpdates(entry))
    call("fsdp_prog_defer_updates").emit(builder, loc);
  if (auto module = entry->getParentOfType<ModuleOp>();
      module && optimizerOnHostCores(module))
    call("fsdp_prog_optimizer_on_host_cores").emit(builder, loc);
  if (memoryPlan)
    emitMemoryPlan(loc);
  emitModelFlops(loc);
  if (withEval)
    call("fsdp_prog_eval_step").literal("fsdp_program_eval").emit(builder, loc);
  for (uint32_t mask : state.groups)
    call("fsdp_prog_group").literal(maskLiteral(mask)).emit(builder, loc);
  emitc::ReturnOp::create(builder, loc, Value());
  return success();
}

/// Moves each repeated per-layer run of `entry` into a function and calls
/// it there: the first run of a kind moves, the others are erased.
/// Returns the functions in order of first call.
SmallVector<func::FuncOp> outlineLayers(func::FuncOp entry,
                                        LoweringState &state) {
  Block &body = entry.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : body)
    ops.push_back(&op);
  OpBuilder builder(state.context);
  SmallVector<func::FuncOp> functions;
  DenseMap<unsigned, func::FuncOp> made;
  SmallVector<Segment> segments =
      findLayerSegments(body, *state.plan, *state.inPlace);
  // A run's outputs become its call's results, also where a later run
  // takes them as inputs.
  DenseMap<Value, Value> replaced;
  for (Segment &segment : segments) {
    for (Value &input : segment.inputs)
      if (Value v = replaced.lookup(input))
        input = v;
    ArrayRef<Operation *> run =
        ArrayRef(ops).slice(segment.begin, segment.end - segment.begin);
    Location loc = run.front()->getLoc();
    std::string name =
        "fsdp_layer_function_" + std::to_string(segment.function);
    SmallVector<Type> outputTypes;
    for (Value output : segment.outputs)
      outputTypes.push_back(output.getType());
    builder.setInsertionPoint(run.front());
    auto call =
        func::CallOp::create(builder, loc, name, outputTypes, segment.inputs);
    for (auto [output, result] : llvm::zip(segment.outputs, call.getResults()))
      replaced[output] = result;
    func::FuncOp &func = made[segment.function];
    if (func) {
      for (auto [output, result] :
           llvm::zip(segment.outputs, call.getResults()))
        output.replaceAllUsesWith(result);
      for (Operation *op : llvm::reverse(run))
        op->erase();
      continue;
    }
    SmallVector<Type> inputTypes;
    for (Value input : segment.inputs)
      inputTypes.push_back(input.getType());
    builder.setInsertionPoint(entry);
    func = func::FuncOp::create(
        builder, loc, name,
        FunctionType::get(state.context, inputTypes, outputTypes));
    Block *inner = func.addEntryBlock();
    for (Operation *op : run)
      op->moveBefore(inner, inner->end());
    auto inside = [&](OpOperand &use) {
      return use.getOwner()->getBlock() == inner;
    };
    for (auto [input, arg] : llvm::zip(segment.inputs, inner->getArguments()))
      input.replaceUsesWithIf(arg, inside);
    builder.setInsertionPointToEnd(inner);
    func::ReturnOp::create(builder, loc, segment.outputs);
    for (auto [output, result] : llvm::zip(segment.outputs, call.getResults()))
      output.replaceUsesWithIf(result,
                               [&](OpOperand &use) { return !inside(use); });
    state.layerInputs[name] = segment.inputs.size();
    ++state.stats.layerFunctions;
    functions.push_back(func);
  }
  return functions;
}

/// Replaces `func` by an EmitC function `name` whose arguments are the
/// program handle and, for a layer function, its frame; the old arguments
/// become handles read from the program or the frame.
emitc::FuncOp emitShell(func::FuncOp func, StringRef name, bool layer,
                        LoweringState &state, OpBuilder &builder) {
  SmallVector<Type> argTypes = {state.programType};
  if (layer)
    argTypes.push_back(state.frameType);
  auto shell =
      emitc::FuncOp::create(builder, func.getLoc(), name,
                            FunctionType::get(state.context, argTypes, {}));
  if (layer)
    shell.setSpecifiersAttr(builder.getStrArrayAttr({"static"}));
  Block *body = shell.addEntryBlock();
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(body);
  Block &old = func.getBody().front();
  for (BlockArgument arg : old.getArguments()) {
    Call read =
        layer
            ? Call(state.context, state.frameGetter(arg.getType()))
                  .value(body->getArgument(1))
            : Call(state.context, "fsdp_prog_arg").value(body->getArgument(0));
    Value handle =
        read.literal(intLiteral(arg.getArgNumber()))
            .emit(builder, arg.getLoc(), state.handleOf(arg.getType()));
    arg.replaceAllUsesWith(UnrealizedConversionCastOp::create(
                               builder, arg.getLoc(), arg.getType(), handle)
                               .getResult(0));
  }
  body->getOperations().splice(body->end(), old.getOperations());
  func.erase();
  return shell;
}

} // namespace

/// The eval step reads the train step's arguments as they are: the same
/// types, in the same memory (fsdp-offload places both steps' arguments).
static LogicalResult checkEvalStep(func::FuncOp entry, func::FuncOp eval) {
  if (eval.getArgumentTypes() != entry.getArgumentTypes())
    return eval.emitOpError("has other arguments than the step '")
           << entry.getSymName() << "'";
  if (eval.getNumResults() != 1 || entry.getNumResults() == 0 ||
      eval.getResultTypes()[0] != entry.getResultTypes()[0])
    return eval.emitOpError("must return the step's first result (the loss)");
  for (unsigned i = 0; i < entry.getNumArguments(); ++i)
    if (bool(entry.getArgAttr(i, "fsdp.host")) !=
        bool(eval.getArgAttr(i, "fsdp.host")))
      return eval.emitOpError("argument #")
             << i << " is in "
             << (entry.getArgAttr(i, "fsdp.host") ? "host" : "device")
             << " memory for the step but not for the eval step";
  return success();
}

RuntimeTypeConverter::RuntimeTypeConverter(MLIRContext *context) {
  addConversion([](Type type) { return type; });
  addConversion([tensor = handleType(context, "fsdp_tensor")](
                    RankedTensorType) -> Type { return tensor; });
  addConversion([future = handleType(context, "fsdp_future")](
                    dist::FutureType) -> Type { return future; });
  // Loops read handles of values defined outside them through casts
  // (LayerLoops.h); the casts fold away once every op is converted.
  auto cast = [](OpBuilder &builder, Type type, ValueRange inputs,
                 Location loc) -> Value {
    return UnrealizedConversionCastOp::create(builder, loc, type, inputs)
        .getResult(0);
  };
  addSourceMaterialization(cast);
  addTargetMaterialization(cast);
}

LogicalResult fsdp::lowerToRuntime(ModuleOp module, func::FuncOp entry,
                                   bool outlineLayers, bool memoryPlan,
                                   RuntimeLoweringStats &stats) {
  MLIRContext *context = module.getContext();
  LoweringState state(context);
  for (auto mesh : module.getOps<dist::MeshOp>())
    if (failed(state.addMesh(mesh)))
      return failure();
  Location loc = entry.getLoc();
  OpBuilder builder(context);
  builder.setInsertionPointToStart(module.getBody());
  emitc::IncludeOp::create(builder, loc, "fsdp/Runtime/Program.h");
  Block &step = entry.getBody().front();
  if (failed(prepareLiterals(step, state, builder)))
    return failure();
  state.plan = std::make_unique<ReleasePlan>(step);
  state.inPlace = std::make_unique<InPlaceUpdates>(entry);
  // The eval step (fsdp-build-train-step's eval): the step's arguments,
  // the loss as its one result, lowered as a function of its own.
  func::FuncOp eval = lookupEvalStep(entry);
  if (eval) {
    if (failed(checkEvalStep(entry, eval)) ||
        failed(prepareLiterals(eval.getBody().front(), state, builder)))
      return failure();
    state.plan->add(eval.getBody().front());
  }

  builder.setInsertionPointToEnd(module.getBody());
  Describer describer(entry, state, builder);
  if (failed(describer.emitDescribe(loc, memoryPlan, bool(eval))))
    return failure();
  if (state.mesh)
    state.mesh.erase();
  SmallVector<func::FuncOp> layers;
  if (outlineLayers)
    layers = ::outlineLayers(entry, state);
  for (func::FuncOp layer : layers)
    emitShell(layer, layer.getSymName().str(), /*layer=*/true, state, builder);
  std::optional<LayerLoops> loops;
  if (outlineLayers)
    loops.emplace(entry);
  if (eval)
    emitShell(eval, "fsdp_program_eval", /*layer=*/false, state, builder);
  emitc::FuncOp shell = emitShell(entry, "fsdp_program_forward",
                                  /*layer=*/false, state, builder);
  if (loops)
    loops->emit(shell, state);
  // The description last, as a reader of the program expects it.
  describer.function->moveBefore(module.getBody(), module.getBody()->end());

  ConversionTarget target(*context);
  target.addLegalDialect<emitc::EmitCDialect>();
  target.addLegalOp<UnrealizedConversionCastOp>();
  target
      .addIllegalDialect<nn::NNDialect, dist::DistDialect, func::FuncDialect>();
  RuntimeTypeConverter converter(context);
  RewritePatternSet patterns(context);
  populateNNToRuntimePatterns(converter, patterns, state);
  if (failed(applyPartialConversion(module, target, std::move(patterns))))
    return failure();
  SmallVector<UnrealizedConversionCastOp> casts;
  module.walk([&](UnrealizedConversionCastOp cast) { casts.push_back(cast); });
  reconcileUnrealizedCasts(casts);

  // The program is plain EmitC now: the passes' annotations are spent.
  for (NamedAttribute attr : llvm::to_vector(module->getDiscardableAttrs()))
    if (attr.getName().getValue().starts_with("fsdp.") ||
        attr.getName().getValue().starts_with("dist."))
      module->removeDiscardableAttr(attr.getName());
  stats = state.stats;
  return success();
}

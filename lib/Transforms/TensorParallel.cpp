//===- TensorParallel.cpp - Megatron tensor parallelism (no SP) -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-tensor-parallel`: rebuilds the forward function as the
// per-rank program of a tp-way Megatron split. Every op is rebuilt through
// its shape rule on the per-rank operands, so only the plan's linears and
// the reshapes that split or merge a sharded feature dim need rules here.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace fsdp {
#define GEN_PASS_DEF_TENSORPARALLELPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

enum class Style { Replicated, Colwise, Rowwise };

/// The built-in plan of the Llama family: the projection's last path
/// component decides.
Style planFor(StringRef path) {
  StringRef leaf =
      path.rsplit('.').second.empty() ? path : path.rsplit('.').second;
  if (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj" ||
      leaf == "gate_proj" || leaf == "up_proj")
    return Style::Colwise;
  if (leaf == "o_proj" || leaf == "down_proj")
    return Style::Rowwise;
  return Style::Replicated;
}

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct TensorParallelPass
    : fsdp::impl::TensorParallelPassBase<TensorParallelPass> {
  using TensorParallelPassBase::TensorParallelPassBase;

  void runOnOperation() override;
  LogicalResult partition(func::FuncOp forward, dist::MeshOp mesh);
};

LogicalResult TensorParallelPass::partition(func::FuncOp forward,
                                            dist::MeshOp mesh) {
  MLIRContext *context = &getContext();
  Block &body = forward.getBody().front();
  OpBuilder b(context);
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  ArrayAttr tpAxes = b.getStrArrayAttr({"tp"});

  // Which argument is which linear's weight or bias, and how it splits.
  DenseMap<unsigned, std::pair<Style, int64_t>> argSplit; // arg -> (style, dim)
  for (Operation &op : body) {
    auto linear = dyn_cast<nn::LinearOp>(op);
    if (!linear || !linear.getPath())
      continue;
    Style style = planFor(*linear.getPath());
    if (style == Style::Replicated)
      continue;
    auto weight = dyn_cast<BlockArgument>(linear.getWeight());
    if (!weight || !weight.hasOneUse())
      return linear.emitOpError("is split by the tensor-parallel plan, so "
                                "its weight must be a parameter it alone "
                                "uses");
    RankedTensorType w = tensorOf(weight);
    int64_t dim = style == Style::Colwise ? 0 : 1;
    if (w.getDimSize(dim) % tp != 0)
      return linear.emitOpError("weight ")
             << w << " dim " << dim
             << " does not divide by tp = " << static_cast<int64_t>(tp);
    argSplit[weight.getArgNumber()] = {style, dim};
    if (Value bias = linear.getBias()) {
      auto biasArg = dyn_cast<BlockArgument>(bias);
      if (style == Style::Rowwise)
        return linear.emitOpError("is row-parallel with a bias, which the "
                                  "plan does not split yet");
      if (!biasArg || !biasArg.hasOneUse())
        return linear.emitOpError("bias must be a parameter it alone uses");
      argSplit[biasArg.getArgNumber()] = {style, 0};
    }
  }
  if (argSplit.empty())
    return forward.emitOpError("has no linear layer the tensor-parallel plan "
                               "splits (q/k/v/o, gate/up/down projections)");

  // The new signature: split parameters hold their rank's block.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : forward.getArguments()) {
    RankedTensorType type = tensorOf(arg);
    NamedAttrList attrs(forward.getArgAttrDict(arg.getArgNumber()));
    auto it = argSplit.find(arg.getArgNumber());
    if (it != argSplit.end()) {
      SmallVector<int64_t> shape(type.getShape());
      int64_t dim = it->second.second;
      shape[dim] /= tp;
      type = RankedTensorType::get(shape, type.getElementType());
      SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
      dims[dim] = tpAxes;
      attrs.set("dist.sharding",
                dist::ShardingAttr::get(context, meshRef, b.getArrayAttr(dims),
                                        b.getArrayAttr({})));
    }
    argTypes.push_back(type);
    argAttrs.push_back(attrs.getDictionary(context));
  }

  b.setInsertionPoint(forward);
  auto split = func::FuncOp::create(b, forward.getLoc(), forward.getName(),
                                    b.getFunctionType(argTypes, {}));
  Block *entry = split.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  IRMapping map;
  for (auto [old, now] :
       llvm::zip(forward.getArguments(), entry->getArguments()))
    map.map(old, now);

  // Values each rank holds only its part of: the split parameters, and
  // everything computed from them until a row-parallel all_reduce.
  DenseSet<Value> local;
  for (auto &[arg, split] : argSplit)
    local.insert(entry->getArgument(arg));
  // Megatron's f: a replicated float value entering per-rank computation
  // (a column-parallel input, a norm weight applied to the rank's heads)
  // passes through dist.copy once, so that its gradient sums the ranks'.
  DenseMap<Value, Value> copies;
  for (Operation &op : body.without_terminator()) {
    SmallVector<Value> operands = llvm::map_to_vector(
        op.getOperands(), [&](Value v) { return map.lookup(v); });
    NamedAttrList attrs(op.getAttrDictionary());
    Style style = Style::Replicated;
    if (auto linear = dyn_cast<nn::LinearOp>(op);
        linear && linear.getPath() &&
        argSplit.count(cast<BlockArgument>(linear.getWeight()).getArgNumber()))
      style = planFor(*linear.getPath());
    bool anyLocal =
        llvm::any_of(operands, [&](Value v) { return local.contains(v); });
    if (anyLocal)
      for (Value &operand : operands) {
        if (local.contains(operand) ||
            !isa<FloatType>(tensorOf(operand).getElementType()))
          continue;
        Value &copy = copies[operand];
        if (!copy)
          copy = dist::CopyOp::create(b, op.getLoc(), operand.getType(),
                                      operand, meshRef, tpAxes);
        operand = copy;
      }
    if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
      // A reshape that splits or merges the sharded feature dim: the dim
      // where the per-rank input first differs maps to the output dim with
      // the same prefix product, which is tp times smaller.
      ArrayRef<int64_t> oldIn = reshape.getInput().getType().getShape();
      ArrayRef<int64_t> newIn = tensorOf(operands[0]).getShape();
      if (oldIn != newIn) {
        int64_t prefix = 1;
        size_t i = 0;
        while (i < oldIn.size() && oldIn[i] == newIn[i])
          prefix *= oldIn[i++];
        SmallVector<int64_t> shape(reshape.getShape());
        int64_t product = 1;
        size_t j = 0;
        while (j < shape.size() && product < prefix)
          product *= shape[j++];
        if (product != prefix || j == shape.size())
          return reshape.emitOpError("reshapes a tensor split over tp in a "
                                     "way the plan cannot follow");
        if (shape[j] % tp != 0)
          return reshape.emitOpError("splits a dim of ")
                 << shape[j] << " (heads) that does not divide by tp = "
                 << static_cast<int64_t>(tp);
        shape[j] /= tp;
        attrs.set("shape", b.getDenseI64ArrayAttr(shape));
      }
    }
    if (!op.getName().hasInterface<nn::ShapeRuleOpInterface>())
      return op.emitOpError("cannot be partitioned by the tensor-parallel "
                            "plan");
    Operation *copy = nn::createWithShapeRule(
        b, op.getLoc(), op.getName(), operands, attrs.getDictionary(context));
    if (!copy)
      return failure();
    Value result = copy->getResult(0);
    if (style == Style::Rowwise) {
      // Megatron's g: the partial sums of the rank's columns.
      result =
          dist::AllReduceOp::create(
              b, op.getLoc(), result.getType(), result, meshRef, tpAxes,
              dist::ReductionKindAttr::get(context, dist::ReductionKind::sum))
              .getResult();
    }
    map.map(op.getResult(0), result);
    for (unsigned i = 1; i < op.getNumResults(); ++i)
      map.map(op.getResult(i), copy->getResult(i));
    if (anyLocal && style != Style::Rowwise)
      for (Value r : copy->getResults())
        local.insert(r);
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results = llvm::map_to_vector(
      ret.getOperands(), [&](Value v) { return map.lookup(v); });
  func::ReturnOp::create(b, ret.getLoc(), results);
  split.setFunctionType(
      b.getFunctionType(argTypes, TypeRange(ValueRange(results))));
  split.setAllArgAttrs(argAttrs);
  split.setAllResultAttrs(forward.getAllResultAttrs());
  for (NamedAttribute attr : forward->getDiscardableAttrs())
    split->setAttr(attr.getName(), attr.getValue());
  forward.erase();
  return success();
}

void TensorParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto forward = module.lookupSymbol<func::FuncOp>(entry);
  if (!forward) {
    module.emitError("no function @") << entry << " to partition";
    return signalPassFailure();
  }
  if (tp < 1) {
    forward.emitOpError("tp must be >= 1, got ") << static_cast<int64_t>(tp);
    return signalPassFailure();
  }
  if (tp == 1)
    return;
  // The mesh: the module's, which must have a tp axis of this size, or a
  // new one.
  dist::MeshOp mesh;
  for (auto m : module.getOps<dist::MeshOp>())
    mesh = m;
  if (!mesh) {
    OpBuilder b(module.getBodyRegion());
    mesh = dist::MeshOp::create(b, module.getLoc(), "mesh",
                                b.getStrArrayAttr({"tp"}),
                                b.getDenseI64ArrayAttr({tp}), DictionaryAttr());
  } else if (mesh.getAxisSize("tp") != std::optional<int64_t>(tp)) {
    mesh.emitOpError("needs a 'tp' axis of size ") << static_cast<int64_t>(tp);
    return signalPassFailure();
  }
  if (failed(partition(forward, mesh)))
    signalPassFailure();
}

} // namespace

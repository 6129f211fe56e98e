//===- LayerSegments.cpp - Runs of ops that repeat per layer --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "LayerSegments.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace fsdp;

namespace {

/// The layer an op belongs to: a container (`model.layers`) and an index,
/// packed; -1 for none.
using Layer = int64_t;
constexpr Layer kNone = -1;

class Attribution {
public:
  explicit Attribution(Block &body) : body(body) {}

  /// One layer per op of the body, in order.
  SmallVector<Layer> run();

private:
  /// The layer `name` (`model.layers.5.mlp`) names, or kNone.
  Layer parse(StringRef name);
  Layer named(Operation &op);

  Block &body;
  llvm::StringMap<int64_t> containers;
};

Layer Attribution::parse(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '.');
  for (auto [i, part] : llvm::enumerate(parts)) {
    int64_t index;
    if (i == 0 || part.getAsInteger(10, index) || index < 0)
      continue;
    StringRef container = name.take_front(part.data() - name.data() - 1);
    auto [it, added] = containers.try_emplace(container, containers.size());
    return (it->second << 32) | index;
  }
  return kNone;
}

Layer Attribution::named(Operation &op) {
  for (StringRef attr : {"path", "fsdp.unit"})
    if (auto name = op.getAttrOfType<StringAttr>(attr))
      if (Layer layer = parse(name.getValue()); layer != kNone)
        return layer;
  return kNone;
}

SmallVector<Layer> Attribution::run() {
  auto func = cast<func::FuncOp>(body.getParentOp());
  SmallVector<Operation *> ops;
  for (Operation &op : body.without_terminator())
    ops.push_back(&op);
  SmallVector<Layer> layers(ops.size(), kNone);
  // Named ops, and the locations of their forward ops: the backward of an
  // op is built at its location.
  DenseMap<Location, Layer> byLoc;
  for (auto [i, op] : llvm::enumerate(ops)) {
    layers[i] = named(*op);
    if (layers[i] == kNone)
      continue;
    auto [it, added] = byLoc.try_emplace(op->getLoc(), layers[i]);
    if (!added && it->second != layers[i])
      it->second = kNone - 1; // Two layers at one location: no evidence.
  }
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (layers[i] != kNone)
      continue;
    // The wait of a collective a unit started is the unit's.
    if (auto wait = dyn_cast<dist::WaitOp>(op))
      if (Operation *start = wait.getFuture().getDefiningOp())
        if (Layer layer = named(*start); layer != kNone) {
          layers[i] = layer;
          continue;
        }
    // An op on a layer's parameter (its cast, its optimizer step), which
    // may stand at a location an op of one layer has too.
    for (Value operand : op->getOperands())
      if (auto arg = dyn_cast<BlockArgument>(operand))
        if (auto name = func.getArgAttrOfType<StringAttr>(
                arg.getArgNumber(), nn::NNDialect::kParamAttrName))
          if (Layer layer = parse(name.getValue()); layer != kNone) {
            layers[i] = layer;
            break;
          }
    if (layers[i] != kNone)
      continue;
    // The step's own location (the loss, the optimizer) is no evidence.
    if (op->getLoc() == func.getLoc())
      continue;
    if (Layer at = byLoc.lookup(op->getLoc()); at >= 0)
      layers[i] = at;
  }
  // An op whose results only one layer reads belongs to it (FSDP's packing
  // of a unit before its gather).
  DenseMap<Operation *, Layer> layerOf;
  for (auto [i, op] : llvm::enumerate(ops))
    layerOf[op] = layers[i];
  for (size_t i = ops.size(); i-- > 0;) {
    if (layers[i] != kNone || ops[i]->use_empty())
      continue;
    Layer common = kNone;
    bool one = true;
    for (Operation *user : ops[i]->getUsers()) {
      Layer layer = layerOf.lookup(user);
      if (!layerOf.count(user) || layer == kNone ||
          (common != kNone && layer != common)) {
        one = false;
        break;
      }
      common = layer;
    }
    if (one)
      layerOf[ops[i]] = layers[i] = common;
  }
  // A run of one layer's ops that starts or waits on a collective inside
  // another layer's ops (a prefetch fsdp-schedule started during that
  // layer's compute, a gradient sync it waits there) belongs to the layer
  // it runs in. Unattributed ops in between do not count.
  SmallVector<size_t> attributed;
  for (size_t i = 0; i < ops.size(); ++i)
    if (layers[i] != kNone)
      attributed.push_back(i);
  auto future = [](Type t) { return isa<dist::FutureType>(t); };
  for (size_t a = 0; a < attributed.size();) {
    size_t b = a;
    while (b < attributed.size() &&
           layers[attributed[b]] == layers[attributed[a]])
      ++b;
    bool async =
        llvm::any_of(ArrayRef(attributed).slice(a, b - a), [&](size_t k) {
          return llvm::any_of(ops[k]->getResultTypes(), future) ||
                 llvm::any_of(ops[k]->getOperandTypes(), future);
        });
    if (async && a > 0 && b < attributed.size() &&
        layers[attributed[a - 1]] == layers[attributed[b]])
      for (size_t k = a; k < b; ++k)
        layers[attributed[k]] = layers[attributed[b]];
    a = b;
  }
  // Ops between two ops of one layer belong to it.
  Layer previous = kNone;
  size_t gapStart = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (layers[i] == kNone)
      continue;
    if (layers[i] == previous)
      for (size_t j = gapStart; j < i; ++j)
        layers[j] = previous;
    previous = layers[i];
    gapStart = i + 1;
  }
  return layers;
}

/// The inputs, outputs and signature of the run [begin, end) of `ops`, or
/// failure when it cannot be a function.
FailureOr<std::string>
describe(ArrayRef<Operation *> ops, unsigned begin, unsigned end,
         const DenseMap<Operation *, unsigned> &index, const ReleasePlan &plan,
         const InPlaceUpdates &inPlace, Segment &segment) {
  segment.begin = begin;
  segment.end = end;
  std::string text;
  llvm::raw_string_ostream os(text);
  DenseMap<Value, unsigned> inputIndex;
  auto inRun = [&](Operation *op) {
    auto it = index.find(op);
    return it != index.end() && it->second >= begin && it->second < end;
  };
  for (unsigned i = begin; i < end; ++i) {
    Operation *op = ops[i];
    // Tensors and futures pass through frames; nothing else does.
    auto handle = [](Type t) {
      return isa<RankedTensorType, dist::FutureType>(t);
    };
    if (op->getNumRegions() || !llvm::all_of(op->getOperandTypes(), handle) ||
        !llvm::all_of(op->getResultTypes(), handle))
      return failure();
    // Attributes and types are uniqued in the context: their addresses
    // identify their values, and cost no printing.
    os << op->getName();
    for (NamedAttribute attr : op->getAttrs())
      if (attr.getName() != "path" && attr.getName() != "fsdp.unit")
        os << " " << attr.getName() << "="
           << attr.getValue().getAsOpaquePointer();
    os << " (";
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (def && inRun(def)) {
        os << " %" << index.lookup(def) - begin << "#"
           << cast<OpResult>(operand).getResultNumber();
        continue;
      }
      auto [it, added] = inputIndex.try_emplace(operand, segment.inputs.size());
      if (added) {
        segment.inputs.push_back(operand);
        Operation *last = plan.releasedAfter(operand);
        segment.inputDies.push_back(last && index.lookup(last) < end);
      }
      os << " in" << it->second;
    }
    os << ") ->";
    for (Value result : op->getResults()) {
      os << " " << result.getType().getAsOpaquePointer();
      // The function's body updates in place for every call or none.
      if (int reused = inPlace.reusedOperand(result); reused >= 0)
        os << "=in" << reused;
      if (llvm::any_of(result.getUsers(),
                       [&](Operation *user) { return !inRun(user); })) {
        os << "!out";
        segment.outputs.push_back(result);
      }
    }
    os << "\n";
  }
  for (auto [input, dies] : llvm::zip(segment.inputs, segment.inputDies))
    os << "in " << input.getType().getAsOpaquePointer() << (dies ? " dies" : "")
       << "\n";
  return text;
}

} // namespace

SmallVector<Segment> fsdp::findLayerSegments(Block &body,
                                             const ReleasePlan &plan,
                                             const InPlaceUpdates &inPlace) {
  SmallVector<Layer> layers = Attribution(body).run();
  SmallVector<Operation *> ops;
  DenseMap<Operation *, unsigned> index;
  for (Operation &op : body) {
    index[&op] = ops.size();
    ops.push_back(&op);
  }

  // Maximal runs of one layer, grouped by what they compute.
  std::vector<std::pair<std::string, Segment>> runs;
  for (unsigned i = 0; i < layers.size();) {
    unsigned j = i + 1;
    while (j < layers.size() && layers[j] == layers[i])
      ++j;
    Segment segment;
    if (layers[i] != kNone && j - i > 1)
      if (FailureOr<std::string> text =
              describe(ops, i, j, index, plan, inPlace, segment);
          succeeded(text))
        runs.emplace_back(std::move(*text), std::move(segment));
    i = j;
  }
  llvm::StringMap<SmallVector<unsigned>> groups;
  for (auto [r, run] : llvm::enumerate(runs))
    groups[run.first].push_back(r);
  SmallVector<Segment> segments;
  DenseMap<unsigned, unsigned> functionOf;
  for (auto &[text, segment] : runs) {
    const SmallVector<unsigned> &members = groups[text];
    if (members.size() < 2)
      continue;
    auto [it, added] =
        functionOf.try_emplace(members.front(), functionOf.size());
    segment.function = it->second;
    segments.push_back(std::move(segment));
  }
  return segments;
}

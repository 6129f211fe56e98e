//===- PassUtils.cpp - Pieces the fsdp passes share -----------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <regex>

using namespace mlir;
using fsdp::RebuiltFunction;

void fsdp::replaceFunction(OpBuilder &b, func::FuncOp old, func::FuncOp now,
                           Location loc, ValueRange results,
                           ArrayRef<DictionaryAttr> argAttrs,
                           ArrayRef<DictionaryAttr> resultAttrs) {
  func::ReturnOp::create(b, loc, results);
  now.setFunctionType(b.getFunctionType(now.getArgumentTypes(),
                                        TypeRange(ValueRange(results))));
  now.setAllArgAttrs(argAttrs);
  now.setAllResultAttrs(resultAttrs);
  for (NamedAttribute attr : old->getDiscardableAttrs())
    now->setAttr(attr.getName(), attr.getValue());
  old.erase();
}

fsdp::dist::MeshOp fsdp::meshSplitting(ModuleOp module, StringRef axis,
                                       int64_t &size) {
  dist::MeshOp mesh = dist::findMesh(module);
  size = mesh ? mesh.getAxisSize(axis).value_or(1) : 1;
  return size > 1 ? mesh : dist::MeshOp();
}

LogicalResult fsdp::rebuildOnRanks(OpBuilder &b, Operation &op,
                                   ValueRange operands, DictionaryAttr attrs,
                                   IRMapping &map, StringRef how) {
  if (!op.getName().hasInterface<nn::ShapeRuleOpInterface>())
    return op.emitOpError("cannot be ") << how << " (not an nn op)";
  Operation *copy = nn::rebuildWithShapeRule(b, op, operands, attrs);
  if (!copy)
    return failure();
  map.map(op.getResults(), copy->getResults());
  return success();
}

RebuiltFunction::RebuiltFunction(OpBuilder &b, func::FuncOp old,
                                 TypeRange argTypes)
    : b(b), old(old) {
  b.setInsertionPoint(old);
  now = func::FuncOp::create(b, old.getLoc(), old.getName(),
                             b.getFunctionType(argTypes, {}));
  b.setInsertionPointToEnd(now.addEntryBlock());
}

RebuiltFunction::~RebuiltFunction() {
  if (now)
    now.erase();
}

SmallVector<Value> RebuiltFunction::results(const IRMapping &map) {
  Operation *ret = old.getBody().front().getTerminator();
  return llvm::map_to_vector(ret->getOperands(),
                             [&](Value v) { return map.lookup(v); });
}

SmallVector<DictionaryAttr> RebuiltFunction::resultAttrs(
    function_ref<void(unsigned, NamedAttrList &)> update) {
  SmallVector<DictionaryAttr> attrs;
  for (unsigned i = 0; i < old.getNumResults(); ++i) {
    NamedAttrList list(old.getResultAttrDict(i));
    update(i, list);
    attrs.push_back(list.getDictionary(old.getContext()));
  }
  return attrs;
}

void RebuiltFunction::replace(Location loc, ValueRange results,
                              ArrayRef<DictionaryAttr> argAttrs,
                              ArrayRef<DictionaryAttr> resultAttrs) {
  replaceFunction(b, old, now, loc, results, argAttrs, resultAttrs);
  now = nullptr;
}

std::string fsdp::decoderLayerOf(StringRef name) {
  // The shortest prefix ending in `<identifier>.<index>`: an expert list
  // inside a layer (`model.layers.3.mlp.experts.7`) stays in the layer.
  static const std::regex layer(
      R"(^((?:[A-Za-z_]\w*\.)*?[A-Za-z_]\w*\.[0-9]+)\.)");
  std::smatch match;
  std::string s = name.str() + ".";
  if (std::regex_search(s, match, layer))
    return match[1].str();
  return "";
}

LogicalResult
fsdp::writeReport(Operation *op, StringRef path, StringRef what,
                  llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file)
    return op->emitError(what) << error;
  write(file->os());
  file->keep();
  return success();
}

LogicalResult fsdp::JsonReport::write(Operation *op, StringRef member,
                                      llvm::json::Value value) {
  members[member] = std::move(value);
  return writeReport(
      op, path, "cannot write the JSON report: ", [&](raw_ostream &os) {
        os << llvm::formatv("{0:2}",
                            llvm::json::Value(llvm::json::Object(members)))
           << "\n";
      });
}

LogicalResult
fsdp::writePassReport(Operation *op, JsonReport *report, StringRef member,
                      ReportFormat format, StringRef path,
                      llvm::json::Object json,
                      llvm::function_ref<void(llvm::raw_ostream &)> table) {
  if (report)
    return report->write(op, member, std::move(json));
  return writeReport(op, path, "", [&](raw_ostream &os) {
    if (format == ReportFormat::Table)
      return table(os);
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(json))) << "\n";
  });
}

LogicalResult fsdp::followOperandSplit(Operation *op, Operation *copy) {
  if (op->getNumOperands() == 0)
    return success();
  auto oldIn = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto newIn = dyn_cast<RankedTensorType>(copy->getOperand(0).getType());
  if (!oldIn || !newIn)
    return success();
  for (auto [old, now] : llvm::zip(op->getResults(), copy->getResults())) {
    auto type = dyn_cast<RankedTensorType>(old.getType());
    if (!type || type.getRank() != oldIn.getRank())
      continue;
    SmallVector<int64_t> shape(type.getShape());
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (oldIn.getDimSize(d) == newIn.getDimSize(d))
        continue;
      if ((shape[d] * newIn.getDimSize(d)) % oldIn.getDimSize(d) != 0)
        return op->emitOpError("cannot follow the split of its operand's dim ")
               << d << " (" << oldIn.getDimSize(d) << " to "
               << newIn.getDimSize(d) << ")";
      shape[d] = shape[d] * newIn.getDimSize(d) / oldIn.getDimSize(d);
    }
    now.setType(RankedTensorType::get(shape, type.getElementType()));
  }
  return success();
}

bool fsdp::isRingStep(Operation *op) {
  auto permute = dyn_cast<dist::PermuteOp>(op);
  if (!permute)
    return false;
  ArrayAttr axes = permute.getMeshAxes();
  return axes.size() == 1 && cast<StringAttr>(axes[0]).getValue() == "cp";
}

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
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"

#include <regex>

using namespace mlir;

func::FuncOp fsdp::lookupEntry(ModuleOp module, StringRef entry,
                               StringRef purpose) {
  auto func = module.lookupSymbol<func::FuncOp>(entry);
  if (func && func.getBody().hasOneBlock())
    return func;
  module.emitError("no single-block function @") << entry << " to " << purpose;
  return nullptr;
}

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

FailureOr<fsdp::dist::MeshOp>
fsdp::meshForCollectives(ModuleOp module, func::FuncOp step, StringRef verb) {
  dist::MeshOp mesh = dist::findMesh(module);
  if (!mesh && !step.getOps<dist::CollectiveOpInterface>().empty()) {
    module.emitError("has collectives but no dist.mesh to ") << verb << " them";
    return failure();
  }
  return mesh;
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

fsdp::accounting::Collective
fsdp::collectiveKind(dist::CollectiveOpInterface op) {
  using accounting::Collective;
  return TypeSwitch<Operation *, Collective>(op)
      .Case([](dist::AllGatherOp) { return Collective::AllGather; })
      .Case([](dist::ReduceScatterOp) { return Collective::ReduceScatter; })
      .Case([](dist::AllReduceOp) { return Collective::AllReduce; })
      .Case([](dist::AllToAllOp) { return Collective::AllToAll; })
      .Case([](dist::PermuteOp) { return Collective::Permute; })
      .Default([](Operation *) { return Collective::Broadcast; });
}

uint32_t fsdp::axisMask(dist::CollectiveOpInterface op, dist::MeshOp mesh) {
  uint32_t mask = 0;
  for (Attribute listed : op.getMeshAxes())
    for (StringRef axis : mesh.expandAxis(cast<StringAttr>(listed).getValue()))
      for (auto [i, a] : llvm::enumerate(mesh.getAxes()))
        if (cast<StringAttr>(a).getValue() == axis)
          mask |= 1u << i;
  return mask;
}

std::string fsdp::groupName(uint32_t mask, dist::MeshOp mesh) {
  std::string name;
  for (auto [i, a] : llvm::enumerate(mesh.getAxes()))
    if (mask & (1u << i))
      name += (name.empty() ? "" : ",") + cast<StringAttr>(a).getValue().str();
  return "{" + name + "}";
}

int64_t fsdp::groupSize(dist::CollectiveOpInterface op, dist::MeshOp mesh) {
  int64_t n = 1;
  for (Attribute listed : op.getMeshAxes())
    for (StringRef axis : mesh.expandAxis(cast<StringAttr>(listed).getValue()))
      n *= mesh.getAxisSize(axis).value_or(1);
  return n;
}

fsdp::accounting::Staging fsdp::stagingOf(dist::CollectiveOpInterface op,
                                          int64_t n) {
  RankedTensorType in = op.getInput().getType();
  RankedTensorType out = op.getResultTensorType();
  // The elements before `dim` of `shape`.
  auto outer = [](ArrayRef<int64_t> shape, int64_t dim) {
    int64_t product = 1;
    for (int64_t d = 0; d < dim; ++d)
      product *= shape[d];
    return product;
  };
  Type element = in.getElementType();
  bool half = element.isBF16() || element.isF16();
  return TypeSwitch<Operation *, fsdp::accounting::Staging>(op)
      .Case([&](dist::AllGatherOp o) {
        return accounting::allGatherStaging(
            bytesOf(out), outer(in.getShape(), o.getGatherDim()));
      })
      .Case([&](dist::ReduceScatterOp o) {
        return accounting::reduceScatterStaging(
            in.getNumElements(), out.getNumElements(),
            (in.getElementTypeBitWidth() + 7) / 8, half,
            outer(out.getShape(), o.getScatterDim()));
      })
      .Case([&](dist::AllReduceOp) {
        return accounting::allReduceStaging(in.getNumElements(), half);
      })
      .Case([&](dist::AllToAllOp o) {
        SmallVector<int64_t> block(in.getShape());
        block[o.getSplitDim()] /= n;
        return accounting::allToAllStaging(
            bytesOf(in), n, outer(in.getShape(), o.getSplitDim()),
            outer(block, o.getConcatDim()));
      })
      .Default([](Operation *) { return fsdp::accounting::Staging(); });
}

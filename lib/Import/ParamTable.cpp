//===- ParamTable.cpp - Translations to and from the graph format ---------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// `--import-graph` wraps the importer; `--param-table` prints the parameters
// of an imported function: name, shape, dtype, initializer, element count.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Import/GraphImport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

namespace {
/// `2x16x64` for a shape, `scalar` for rank 0.
std::string shapeString(RankedTensorType type) {
  if (type.getRank() == 0)
    return "scalar";
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(type.getShape(), os, "x");
  return s;
}

std::string initString(Attribute attr) {
  auto init = dyn_cast_or_null<fsdp::nn::InitAttr>(attr);
  if (!init)
    return "-";
  std::string s;
  llvm::raw_string_ostream os(s);
  os << fsdp::nn::stringifyInitKind(init.getKind());
  double a = init.getA().convertToDouble(), b = init.getB().convertToDouble();
  if (init.getKind() == fsdp::nn::InitKind::normal)
    os << llvm::format("(mean=%g, std=%g)", a, b);
  else if (init.getKind() == fsdp::nn::InitKind::uniform)
    os << llvm::format("(%g, %g)", a, b);
  return s;
}

LogicalResult printParamTable(Operation *op, raw_ostream &os) {
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError("expected a module");
  bool any = false;
  for (auto func : module.getOps<func::FuncOp>()) {
    std::vector<std::array<std::string, 5>> rows;
    int64_t total = 0, bytes = 0;
    size_t width = 4, initWidth = 4;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto name = func.getArgAttrOfType<StringAttr>(
          i, fsdp::nn::NNDialect::kParamAttrName);
      if (!name)
        continue;
      auto type = cast<RankedTensorType>(func.getArgument(i).getType());
      total += type.getNumElements();
      bytes += type.getNumElements() *
               (type.getElementType().getIntOrFloatBitWidth() / 8);
      std::string dtype;
      llvm::raw_string_ostream(dtype) << type.getElementType();
      rows.push_back(
          {name.getValue().str(), shapeString(type), dtype,
           initString(func.getArgAttr(i, fsdp::nn::NNDialect::kInitAttrName)),
           std::to_string(type.getNumElements())});
      width = std::max(width, name.getValue().size());
      initWidth = std::max(initWidth, rows.back()[3].size());
    }
    if (rows.empty())
      continue;
    any = true;
    auto model =
        func->getAttrOfType<StringAttr>(fsdp::nn::NNDialect::kModelAttrName);
    os << "parameters of @" << func.getSymName();
    if (model)
      os << " (" << model.getValue() << ")";
    os << "\n";
    os << llvm::left_justify("name", width) << "  "
       << llvm::left_justify("shape", 14) << "  "
       << llvm::left_justify("dtype", 5) << "  "
       << llvm::left_justify("init", initWidth) << "  "
       << llvm::right_justify("numel", 12) << "\n";
    for (const auto &row : rows)
      os << llvm::left_justify(row[0], width) << "  "
         << llvm::left_justify(row[1], 14) << "  "
         << llvm::left_justify(row[2], 5) << "  "
         << llvm::left_justify(row[3], initWidth) << "  "
         << llvm::right_justify(row[4], 12) << "\n";
    os << "total: " << rows.size() << " tensors, " << total << " parameters, "
       << bytes << " bytes\n";
  }
  if (!any)
    return module.emitError("no function has nn.param arguments");
  return success();
}
} // namespace

void fsdp::registerGraphTranslations() {
  TranslateToMLIRRegistration importGraph(
      "import-graph", "import graph.json (docs/graph-format.md) into nn ops",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr->getMemoryBuffer(sourceMgr->getMainFileID());
        OwningOpRef<ModuleOp> module = fsdp::importGraph(
            buffer->getBuffer(), buffer->getBufferIdentifier(), context);
        return OwningOpRef<Operation *>(module.release());
      },
      [](DialectRegistry &registry) {
        registry.insert<fsdp::nn::NNDialect, func::FuncDialect>();
      });
  TranslateFromMLIRRegistration paramTable(
      "param-table", "print the parameter table of each function",
      printParamTable, [](DialectRegistry &registry) {
        registry.insert<fsdp::nn::NNDialect, func::FuncDialect>();
      });
}

//===- DistDialect.cpp - The dist dialect, attributes and types -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistDialect.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace fsdp::dist;

#include "fsdp/Dialect/Dist/IR/DistEnums.cpp.inc"
#include "fsdp/Dialect/Dist/IR/DistOpsDialect.cpp.inc"

/// A tp layout's body: `replicate` or `shard(d)`.
static ParseResult parseTPLayoutBody(AsmParser &parser, bool &sharded,
                                     int64_t &dim) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  sharded = keyword == "shard";
  dim = 0;
  if (sharded)
    return failure(parser.parseLParen() || parser.parseInteger(dim) ||
                   parser.parseRParen());
  if (keyword != "replicate")
    return parser.emitError(loc, "expected a tp layout, 'replicate' or "
                                 "'shard(d)', got '")
           << keyword << "'";
  return success();
}

static void printTPLayoutBody(AsmPrinter &printer, bool sharded, int64_t dim) {
  if (sharded)
    printer << "shard(" << dim << ")";
  else
    printer << "replicate";
}

/// A #dist.layout written bare inside #dist.tp.
static ParseResult parseTPLayout(AsmParser &parser, TPLayoutAttr &layout) {
  bool sharded;
  int64_t dim;
  if (parseTPLayoutBody(parser, sharded, dim))
    return failure();
  layout = TPLayoutAttr::get(parser.getContext(), sharded, dim);
  return success();
}

static void printTPLayout(AsmPrinter &printer, TPLayoutAttr layout) {
  printTPLayoutBody(printer, layout.getSharded(), layout.getDim());
}

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/Dist/IR/DistAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "fsdp/Dialect/Dist/IR/DistOpsTypes.cpp.inc"

void DistDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "fsdp/Dialect/Dist/IR/DistOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "fsdp/Dialect/Dist/IR/DistAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "fsdp/Dialect/Dist/IR/DistOpsTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

namespace {
/// Parses `[a, b, ...]` of bare axis names into an ArrayAttr of strings.
ParseResult parseAxisList(AsmParser &parser, ArrayAttr &result) {
  SmallVector<Attribute> axes;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        axes.push_back(StringAttr::get(parser.getContext(), name));
        return success();
      }))
    return failure();
  result = ArrayAttr::get(parser.getContext(), axes);
  return success();
}

void printAxisList(AsmPrinter &printer, ArrayAttr axes) {
  printer << "[";
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
  });
  printer << "]";
}

SmallVector<StringRef> axisNames(ArrayAttr axes) {
  return llvm::map_to_vector(
      axes, [](Attribute a) { return cast<StringAttr>(a).getValue(); });
}
} // namespace

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FlatSymbolRefAttr mesh;
  SmallVector<Attribute> dims;
  ArrayAttr partial = ArrayAttr::get(parser.getContext(), {});
  if (parser.parseLess() || parser.parseAttribute(mesh) ||
      parser.parseComma() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
        ArrayAttr axes;
        if (parseAxisList(parser, axes))
          return failure();
        dims.push_back(axes);
        return success();
      }))
    return {};
  SmallVector<int64_t> groups;
  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return {};
    if (key == "partial") {
      if (parseAxisList(parser, partial))
        return {};
    } else if (key == "groups") {
      if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&] {
            return parser.parseInteger(groups.emplace_back());
          }))
        return {};
    } else {
      parser.emitError(parser.getCurrentLocation(),
                       "expected 'partial' or 'groups', got '")
          << key << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                    mesh, ArrayAttr::get(parser.getContext(), dims), partial,
                    DenseI64ArrayAttr::get(parser.getContext(), groups));
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << "<" << getMesh() << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute dim) {
    printAxisList(printer, cast<ArrayAttr>(dim));
  });
  printer << "]";
  if (!getPartial().empty()) {
    printer << ", partial = ";
    printAxisList(printer, getPartial());
  }
  if (!getGroups().empty()) {
    printer << ", groups = [";
    llvm::interleaveComma(getGroups().asArrayRef(), printer);
    printer << "]";
  }
  printer << ">";
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   FlatSymbolRefAttr mesh, ArrayAttr dims,
                                   ArrayAttr partial,
                                   DenseI64ArrayAttr groups) {
  if (!mesh)
    return emitError() << "sharding needs a mesh symbol";
  if (groups && !groups.empty()) {
    if (groups.size() != static_cast<int64_t>(dims.size()))
      return emitError() << "groups has " << groups.size() << " counts for "
                         << dims.size() << " dims";
    for (int64_t g : groups.asArrayRef())
      if (g < 1 && !isLoadBalanced(g))
        return emitError() << "group counts must be >= 1 or " << kLoadBalanced
                           << " times k rounds (load-balanced), got " << g;
  }
  llvm::StringSet<> used;
  auto useAxes = [&](Attribute list) -> LogicalResult {
    auto axes = dyn_cast<ArrayAttr>(list);
    if (!axes)
      return emitError() << "expected a list of mesh axes, got " << list;
    for (Attribute axis : axes) {
      auto name = dyn_cast<StringAttr>(axis);
      if (!name)
        return emitError() << "expected a mesh axis name, got " << axis;
      if (!used.insert(name.getValue()).second)
        return emitError() << "mesh axis '" << name.getValue()
                           << "' is used more than once";
    }
    return success();
  };
  for (Attribute dim : dims)
    if (failed(useAxes(dim)))
      return failure();
  return useAxes(partial);
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  return axisNames(cast<ArrayAttr>(getDims()[dim]));
}

int64_t ShardingAttr::getDimGroups(unsigned dim) const {
  return getGroups() && !getGroups().empty() ? getGroups()[dim] : 1;
}

SmallVector<StringRef> ShardingAttr::getPartialAxes() const {
  return axisNames(getPartial());
}

LogicalResult
ShardingAttr::verifyFor(Operation *meshOp, RankedTensorType type,
                        function_ref<InFlightDiagnostic()> emitError) const {
  auto mesh = dyn_cast_or_null<MeshOp>(meshOp);
  if (!mesh)
    return emitError() << "'" << getMesh().getValue()
                       << "' does not name a dist.mesh";
  if (static_cast<int64_t>(getDims().size()) != type.getRank())
    return emitError() << "sharding has " << getDims().size()
                       << " dims but the tensor " << type << " has rank "
                       << type.getRank();
  auto check = [&](ArrayAttr axes) -> LogicalResult {
    for (StringRef axis : axisNames(axes))
      if (!mesh.getAxisSize(axis))
        return emitError() << "mesh '" << mesh.getSymName() << "' has no axis '"
                           << axis << "'";
    return success();
  };
  for (Attribute dim : getDims())
    if (failed(check(cast<ArrayAttr>(dim))))
      return failure();
  return check(getPartial());
}

//===----------------------------------------------------------------------===//
// TPStyleAttr and the dialect's discardable attributes
//===----------------------------------------------------------------------===//

LogicalResult TPLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   bool sharded, int64_t dim) {
  if (!sharded && dim != 0)
    return emitError() << "a replicated layout has no dim";
  return success();
}

LogicalResult TPStyleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  TPStyleKind kind, TPLayoutAttr input,
                                  TPLayoutAttr output, BoolAttr useLocalOutput,
                                  StringAttr entry) {
  if (!input || !output || !useLocalOutput || !entry)
    return emitError()
           << "needs input and output layouts, use_local_output and entry";
  return success();
}

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() == kTPStyleAttrName) {
    if (isa<TPStyleAttr>(attr.getValue()))
      return success();
    return op->emitOpError("has a '")
           << kTPStyleAttrName
           << "' that is not a #dist.tp style: " << attr.getValue();
  }
  return op->emitOpError("has '")
         << attr.getName().getValue()
         << "', which is not a dist attribute of an op";
}

/// Checks a `dist.sharding` on a value of `type` of `op` (a function's
/// argument or result).
static LogicalResult verifyShardingOf(Operation *op, NamedAttribute attr,
                                      Type type, StringRef what,
                                      unsigned index) {
  if (attr.getName() != DistDialect::kShardingAttrName)
    return op->emitOpError("has '")
           << attr.getName().getValue() << "' on " << what << " #" << index
           << ", which is not a dist attribute of a value";
  auto sharding = dyn_cast<ShardingAttr>(attr.getValue());
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!sharding || !tensor)
    return op->emitOpError(what)
           << " #" << index << " has a '" << attr.getName().getValue()
           << "' that is not a #dist.sharding of a ranked tensor";
  return sharding.verifyFor(
      SymbolTable::lookupNearestSymbolFrom(op, sharding.getMesh()), tensor,
      [&] { return op->emitOpError(what) << " #" << index << ": "; });
}

LogicalResult DistDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned region,
                                                    unsigned index,
                                                    NamedAttribute attr) {
  Type type;
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    type = function.getArgumentTypes()[index];
  else
    type = op->getRegion(region).getArgument(index).getType();
  return verifyShardingOf(op, attr, type, "argument", index);
}

LogicalResult DistDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned region,
                                                       unsigned index,
                                                       NamedAttribute attr) {
  auto function = dyn_cast<FunctionOpInterface>(op);
  if (!function)
    return op->emitOpError("has '")
           << attr.getName().getValue()
           << "' on a result of something not a function";
  return verifyShardingOf(op, attr, function.getResultTypes()[index], "result",
                          index);
}

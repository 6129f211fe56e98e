//===- DistOps.cpp - dist dialect operations ------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace fsdp::dist;

#include "fsdp/Dialect/Dist/IR/DistInterfaces.cpp.inc"

int64_t fsdp::dist::bytesOfTensor(RankedTensorType type) {
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

RankedTensorType fsdp::dist::getCollectiveResultTensorType(Type type) {
  if (auto future = dyn_cast<FutureType>(type))
    return future.getValueType();
  return cast<RankedTensorType>(type);
}

//===----------------------------------------------------------------------===//
// Custom assembly: `(dp = 2, tp = 4)` and `@mesh[dp, tp]`
//===----------------------------------------------------------------------===//

static ParseResult parseMeshShape(OpAsmParser &parser, ArrayAttr &axes,
                                  DenseI64ArrayAttr &shape) {
  SmallVector<Attribute> names;
  SmallVector<int64_t> sizes;
  if (parser.parseCommaSeparatedList([&] {
        std::string name;
        int64_t size;
        if (parser.parseKeywordOrString(&name) || parser.parseEqual() ||
            parser.parseInteger(size))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(name));
        sizes.push_back(size);
        return success();
      }))
    return failure();
  axes = parser.getBuilder().getArrayAttr(names);
  shape = parser.getBuilder().getDenseI64ArrayAttr(sizes);
  return success();
}

static void printMeshShape(OpAsmPrinter &printer, MeshOp, ArrayAttr axes,
                           DenseI64ArrayAttr shape) {
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (i)
      printer << ", ";
    printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
    printer << " = " << shape[i];
  }
}

static ParseResult parseMeshAxes(OpAsmParser &parser, FlatSymbolRefAttr &mesh,
                                 ArrayAttr &axes) {
  SmallVector<Attribute> names;
  if (parser.parseAttribute(mesh) ||
      parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&] {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      }))
    return failure();
  axes = parser.getBuilder().getArrayAttr(names);
  return success();
}

static void printMeshAxes(OpAsmPrinter &printer, Operation *,
                          FlatSymbolRefAttr mesh, ArrayAttr axes) {
  printer << mesh << "[";
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
  });
  printer << "]";
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

LogicalResult MeshOp::verify() {
  if (getAxes().empty())
    return emitOpError("needs at least one axis");
  if (getAxes().size() != getShape().size())
    return emitOpError("has ") << getAxes().size() << " axis names but "
                               << getShape().size() << " sizes";
  llvm::StringSet<> seen;
  for (auto [axis, size] : llvm::zip(getAxes(), getShape())) {
    StringRef name = cast<StringAttr>(axis).getValue();
    if (name.empty())
      return emitOpError("has an empty axis name");
    if (!seen.insert(name).second)
      return emitOpError("has axis '") << name << "' more than once";
    if (size < 1)
      return emitOpError("axis '")
             << name << "' has size " << size << ", expected >= 1";
  }
  if (DictionaryAttr views = getViewsAttr())
    for (NamedAttribute view : views) {
      StringRef name = view.getName().getValue();
      if (seen.contains(name))
        return emitOpError("view '") << name << "' has an axis's name";
      auto axes = dyn_cast<ArrayAttr>(view.getValue());
      if (!axes || axes.empty())
        return emitOpError("view '") << name << "' must list at least one axis";
      llvm::StringSet<> inView;
      for (Attribute axis : axes) {
        auto axisName = dyn_cast<StringAttr>(axis);
        if (!axisName || !seen.contains(axisName.getValue()))
          return emitOpError("view '")
                 << name << "' names " << axis << ", which is not an axis";
        if (!inView.insert(axisName.getValue()).second)
          return emitOpError("view '")
                 << name << "' lists '" << axisName.getValue() << "' twice";
      }
    }
  return success();
}

std::optional<int64_t> MeshOp::getAxisSize(StringRef name) {
  SmallVector<StringRef> axes = expandAxis(name);
  if (axes.empty())
    return std::nullopt;
  int64_t product = 1;
  for (StringRef axis : axes)
    for (auto [a, size] : llvm::zip(getAxes(), getShape()))
      if (cast<StringAttr>(a).getValue() == axis)
        product *= size;
  return product;
}

SmallVector<StringRef> MeshOp::expandAxis(StringRef name) {
  for (Attribute axis : getAxes())
    if (cast<StringAttr>(axis).getValue() == name)
      return {name};
  if (DictionaryAttr views = getViewsAttr())
    if (auto view = dyn_cast_or_null<ArrayAttr>(views.get(name)))
      return llvm::map_to_vector(
          view, [](Attribute a) { return cast<StringAttr>(a).getValue(); });
  return {};
}

int64_t MeshOp::getNumRanks() {
  int64_t n = 1;
  for (int64_t size : getShape())
    n *= size;
  return n;
}

//===----------------------------------------------------------------------===//
// CopyOp
//===----------------------------------------------------------------------===//

namespace {
/// Checks that `mesh` names a dist.mesh with each of `axes`, and returns the
/// size of the group they span.
FailureOr<int64_t> groupOf(Operation *op, FlatSymbolRefAttr meshRef,
                           ArrayAttr axes, SymbolTableCollection &symbolTable) {
  auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(op, meshRef);
  if (!mesh)
    return op->emitOpError("'")
           << meshRef.getValue() << "' does not name a dist.mesh";
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  int64_t size = 1;
  for (Attribute axis : axes) {
    std::optional<int64_t> n =
        mesh.getAxisSize(cast<StringAttr>(axis).getValue());
    if (!n)
      return op->emitOpError("mesh '")
             << mesh.getSymName() << "' has no axis '"
             << cast<StringAttr>(axis).getValue() << "'";
    size *= *n;
  }
  return size;
}
} // namespace

LogicalResult CopyOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return failure(
      failed(groupOf(*this, getMeshAttr(), getMeshAxes(), symbolTable)));
}

LogicalResult
AxisIndexOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return failure(
      failed(groupOf(*this, getMeshAttr(), getMeshAxes(), symbolTable)));
}

LogicalResult AllSliceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  FailureOr<int64_t> group =
      groupOf(*this, getMeshAttr(), getMeshAxes(), symbolTable);
  if (failed(group))
    return failure();
  RankedTensorType input = getInput().getType();
  RankedTensorType result = getResult().getType();
  int64_t dim = static_cast<int64_t>(getSliceDim());
  if (dim < 0 || dim >= input.getRank())
    return emitOpError("slice_dim ")
           << dim << " is out of range for rank " << input.getRank();
  if (input.getDimSize(dim) % *group != 0)
    return emitOpError("dim ")
           << dim << " of size " << input.getDimSize(dim)
           << " does not divide by the group size " << *group;
  SmallVector<int64_t> expected(input.getShape());
  expected[dim] /= *group;
  if (result.getShape() != ArrayRef<int64_t>(expected) ||
      result.getElementType() != input.getElementType())
    return emitOpError("result ")
           << result << " does not match the expected "
           << RankedTensorType::get(expected, input.getElementType());
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives: shared checks
//===----------------------------------------------------------------------===//

LogicalResult fsdp::dist::verifyCollective(CollectiveOpInterface op) {
  ArrayAttr axes = op.getMeshAxes();
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  llvm::StringSet<> seen;
  for (Attribute axis : axes)
    if (!seen.insert(cast<StringAttr>(axis).getValue()).second)
      return op->emitOpError("mesh axis '")
             << cast<StringAttr>(axis).getValue() << "' is listed twice";
  RankedTensorType input = op.getInput().getType();
  RankedTensorType result = op.getResultTensorType();
  if (input.getElementType() != result.getElementType())
    return op->emitOpError("result element type ")
           << result.getElementType() << " differs from the input's "
           << input.getElementType();
  if (input.getRank() != result.getRank())
    return op->emitOpError("result rank ")
           << result.getRank() << " differs from the input rank "
           << input.getRank();
  if (op.isAsync()) {
    Value future = op->getResult(0);
    if (!future.hasOneUse() || !isa<WaitOp>(*future.getUsers().begin()))
      return op->emitOpError(
          "future must be consumed by exactly one dist.wait");
  }
  return success();
}

LogicalResult
fsdp::dist::verifyCollectiveSymbolUses(CollectiveOpInterface op,
                                       SymbolTableCollection &symbolTable) {
  auto mesh = symbolTable.lookupNearestSymbolFrom<MeshOp>(op, op.getMeshAttr());
  if (!mesh)
    return op->emitOpError("'")
           << op.getMeshAttr().getValue() << "' does not name a dist.mesh";
  int64_t groupSize = 1;
  llvm::StringSet<> used;
  for (Attribute axis : op.getMeshAxes()) {
    StringRef name = cast<StringAttr>(axis).getValue();
    std::optional<int64_t> size = mesh.getAxisSize(name);
    if (!size)
      return op->emitOpError("mesh '")
             << mesh.getSymName() << "' has no axis '" << name << "'";
    for (StringRef expanded : mesh.expandAxis(name))
      if (!used.insert(expanded).second)
        return op->emitOpError("mesh axis '")
               << expanded << "' is in the group twice (through a view)";
    groupSize *= *size;
  }
  return op.verifyGroupShape(groupSize);
}

namespace {
/// Checks that `dim` indexes a dimension of `type`.
LogicalResult checkDim(Operation *op, StringRef what, int64_t dim,
                       RankedTensorType type) {
  if (dim < 0 || dim >= type.getRank())
    return op->emitOpError() << what << " " << dim
                             << " is out of range for rank " << type.getRank();
  return success();
}

/// Checks that the result equals `expected`.
LogicalResult checkResult(CollectiveOpInterface op,
                          ArrayRef<int64_t> expected) {
  RankedTensorType result = op.getResultTensorType();
  if (result.getShape() == expected)
    return success();
  return op->emitOpError("result shape ")
         << result << " does not match the expected "
         << RankedTensorType::get(expected, result.getElementType())
         << " for a group of the given mesh axes";
}

/// The input shape with `dim` multiplied by `mul` and divided by `div`.
FailureOr<SmallVector<int64_t>>
scaledShape(CollectiveOpInterface op, int64_t dim, int64_t mul, int64_t div) {
  SmallVector<int64_t> shape(op.getInput().getType().getShape());
  if (shape[dim] % div != 0) {
    op->emitOpError("dim ") << dim << " of size " << shape[dim]
                            << " does not divide by the group size " << div;
    return failure();
  }
  shape[dim] = shape[dim] / div * mul;
  return shape;
}
} // namespace

//===----------------------------------------------------------------------===//
// Collectives: per-op shape rules
//===----------------------------------------------------------------------===//

LogicalResult AllGatherOp::verifyGroupShape(int64_t groupSize) {
  if (failed(
          checkDim(*this, "gather_dim", getGatherDim(), getInput().getType())))
    return failure();
  FailureOr<SmallVector<int64_t>> shape =
      scaledShape(*this, getGatherDim(), groupSize, 1);
  return failed(shape) ? failure() : checkResult(*this, *shape);
}

LogicalResult ReduceScatterOp::verifyGroupShape(int64_t groupSize) {
  if (failed(checkDim(*this, "scatter_dim", getScatterDim(),
                      getInput().getType())))
    return failure();
  FailureOr<SmallVector<int64_t>> shape =
      scaledShape(*this, getScatterDim(), 1, groupSize);
  return failed(shape) ? failure() : checkResult(*this, *shape);
}

LogicalResult AllReduceOp::verifyGroupShape(int64_t) {
  return checkResult(*this, getInput().getType().getShape());
}

LogicalResult AllToAllOp::verifyGroupShape(int64_t groupSize) {
  RankedTensorType input = getInput().getType();
  if (failed(checkDim(*this, "split_dim", getSplitDim(), input)) ||
      failed(checkDim(*this, "concat_dim", getConcatDim(), input)))
    return failure();
  FailureOr<SmallVector<int64_t>> shape =
      scaledShape(*this, getSplitDim(), 1, groupSize);
  if (failed(shape))
    return failure();
  (*shape)[getConcatDim()] *= groupSize;
  return checkResult(*this, *shape);
}

LogicalResult PermuteOp::verifyGroupShape(int64_t) {
  return checkResult(*this, getInput().getType().getShape());
}

LogicalResult BroadcastOp::verifyGroupShape(int64_t groupSize) {
  if (static_cast<int64_t>(getRoot()) < 0 ||
      static_cast<int64_t>(getRoot()) >= groupSize)
    return emitOpError("root ") << static_cast<int64_t>(getRoot())
                                << " is outside the group of " << groupSize;
  return checkResult(*this, getInput().getType().getShape());
}

LogicalResult AllToAllVOp::verifyGroupShape(int64_t groupSize) {
  RankedTensorType input = getInput().getType();
  if (input.getRank() < 1)
    return emitOpError("needs rows: its input has rank 0");
  SmallVector<int64_t> shape(input.getShape());
  shape[0] = getResultTensorType().getShape()[0];
  if (getResultTensorType().getRank() != input.getRank() ||
      failed(checkResult(*this, shape)))
    return failure();
  int64_t counts = getSendCounts().getType().getShape()[0];
  if (counts != groupSize)
    return emitOpError("has ")
           << counts << " counts for a group of " << groupSize;
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives: staging, by the runtime's rules (Accounting.h)
//===----------------------------------------------------------------------===//

namespace {
/// The elements before `dim` of `shape`.
int64_t outerOf(ArrayRef<int64_t> shape, int64_t dim) {
  int64_t product = 1;
  for (int64_t d = 0; d < dim; ++d)
    product *= shape[d];
  return product;
}

bool isHalf(Type element) { return element.isBF16() || element.isF16(); }
} // namespace

fsdp::accounting::Staging AllGatherOp::getStaging(int64_t) {
  return accounting::allGatherStaging(
      bytesOfTensor(getResultTensorType()),
      outerOf(getInput().getType().getShape(), getGatherDim()));
}

fsdp::accounting::Staging ReduceScatterOp::getStaging(int64_t) {
  RankedTensorType in = getInput().getType(), out = getResultTensorType();
  return accounting::reduceScatterStaging(
      in.getNumElements(), out.getNumElements(),
      (in.getElementTypeBitWidth() + 7) / 8, isHalf(in.getElementType()),
      outerOf(out.getShape(), getScatterDim()));
}

fsdp::accounting::Staging AllReduceOp::getStaging(int64_t) {
  RankedTensorType in = getInput().getType();
  return accounting::allReduceStaging(in.getNumElements(),
                                      isHalf(in.getElementType()));
}

fsdp::accounting::Staging AllToAllOp::getStaging(int64_t groupSize) {
  RankedTensorType in = getInput().getType();
  SmallVector<int64_t> block(in.getShape());
  block[getSplitDim()] /= groupSize;
  return accounting::allToAllStaging(bytesOfTensor(in), groupSize,
                                     outerOf(in.getShape(), getSplitDim()),
                                     outerOf(block, getConcatDim()));
}

#define GET_OP_CLASSES
#include "fsdp/Dialect/Dist/IR/DistOps.cpp.inc"

MeshOp fsdp::dist::findMesh(ModuleOp module) {
  MeshOp mesh;
  for (auto m : module.getOps<MeshOp>())
    mesh = m;
  return mesh;
}

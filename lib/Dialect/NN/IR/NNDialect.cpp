//===- NNDialect.cpp - The nn dialect and its attributes ------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/NN/IR/NNDialect.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace fsdp::nn;

#include "fsdp/Dialect/NN/IR/NNEnums.cpp.inc"
#include "fsdp/Dialect/NN/IR/NNOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/NN/IR/NNAttrs.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "fsdp/Dialect/NN/IR/NNOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "fsdp/Dialect/NN/IR/NNAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// InitAttr
//===----------------------------------------------------------------------===//

namespace {
/// The names of an initializer's two numeric fields, or none.
std::optional<std::pair<StringRef, StringRef>> initFieldNames(InitKind kind) {
  switch (kind) {
  case InitKind::normal:
    return std::make_pair(StringRef("mean"), StringRef("std"));
  case InitKind::uniform:
    return std::make_pair(StringRef("low"), StringRef("high"));
  case InitKind::zeros:
  case InitKind::ones:
    return std::nullopt;
  }
  llvm_unreachable("unknown init kind");
}
} // namespace

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, APFloat aValue, APFloat bValue) {
  double a = aValue.convertToDouble(), b = bValue.convertToDouble();
  if (kind == InitKind::normal && !(b > 0.0))
    return emitError() << "normal initializer needs std > 0, got " << b;
  if (kind == InitKind::uniform && !(a < b))
    return emitError() << "uniform initializer needs low < high, got [" << a
                       << ", " << b << "]";
  if ((kind == InitKind::zeros || kind == InitKind::ones) &&
      (a != 0.0 || b != 0.0))
    return emitError() << "'" << stringifyInitKind(kind)
                       << "' initializer takes no fields";
  return success();
}

Attribute InitAttr::parse(AsmParser &parser, Type) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown initializer '" << keyword
                          << "', expected zeros, ones, normal or uniform";
    return {};
  }
  double values[2] = {0.0, 0.0};
  if (auto names = initFieldNames(*kind)) {
    StringRef expected[2] = {names->first, names->second};
    for (int i = 0; i < 2; ++i)
      if (parser.parseComma() || parser.parseKeyword(expected[i]) ||
          parser.parseEqual() || parser.parseFloat(values[i]))
        return {};
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                    *kind, APFloat(values[0]), APFloat(values[1]));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (auto names = initFieldNames(getKind()))
    printer << ", " << names->first << " = " << getA().convertToDouble() << ", "
            << names->second << " = " << getB().convertToDouble();
  printer << ">";
}

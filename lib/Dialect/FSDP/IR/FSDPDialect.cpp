//===- FSDPDialect.cpp - FSDP's annotations, verified ---------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Operation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace fsdp;

#include "fsdp/Dialect/FSDP/IR/FSDPDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "fsdp/Dialect/FSDP/IR/FSDPAttrs.cpp.inc"

void FSDPDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "fsdp/Dialect/FSDP/IR/FSDPAttrs.cpp.inc"
      >();
}

LogicalResult
MixedPrecisionPolicyAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 Type param, Type reduce, Type output,
                                 BoolAttr castForwardInputs) {
  for (auto [name, type] : {std::pair<StringRef, Type>{"param", param},
                            {"reduce", reduce},
                            {"output", output}})
    if (!type || !(type.isF32() || type.isBF16() || type.isF16()))
      return emitError() << name << " must be f32, bf16 or f16, got " << type;
  if (!castForwardInputs)
    return emitError() << "needs cast_forward_inputs";
  return success();
}

LogicalResult ParallelConfigAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t dpReplicate,
    int64_t dpShard, int64_t cp, CpCommType, int64_t tp, int64_t ep, BoolAttr,
    BoolAttr, ReshardPolicy, BoolAttr, CheckpointMode,
    FloatAttr activationMemoryBudget, OffloadPolicy, int64_t forwardPrefetch,
    int64_t backwardPrefetch, MixedPrecisionPolicyAttr, ArrayAttr, StringAttr) {
  for (auto [name, size] :
       {std::pair<StringRef, int64_t>{"dp_replicate", dpReplicate},
        {"dp_shard", dpShard},
        {"cp", cp},
        {"tp", tp},
        {"ep", ep}})
    if (size < 1)
      return emitError() << name << " must be >= 1, got " << size;
  if (forwardPrefetch < 0 || backwardPrefetch < 0)
    return emitError() << "prefetch depths must be >= 0";
  if (!activationMemoryBudget || activationMemoryBudget.getValueAsDouble() < 0)
    return emitError() << "activation_memory_budget must be a float >= 0";
  return success();
}

ParallelConfigAttr ParallelConfigAttr::of(Operation *module) {
  return module->getAttrOfType<ParallelConfigAttr>("fsdp.parallel");
}

/// Checks that `value` is a dictionary whose fields are among `keys`, each a
/// dtype name (f32, bf16, f16).
static LogicalResult checkDtypes(Operation *op, StringRef name, Attribute value,
                                 ArrayRef<StringRef> keys) {
  auto dict = dyn_cast<DictionaryAttr>(value);
  if (!dict)
    return op->emitOpError("has '")
           << name << "' that is not a dictionary: " << value;
  for (NamedAttribute field : dict) {
    StringRef key = field.getName().getValue();
    if (!llvm::is_contained(keys, key))
      return op->emitOpError("has '")
             << name << "' with an unknown field '" << key << "'";
    auto dtype = dyn_cast<StringAttr>(field.getValue());
    if (!dtype || !llvm::is_contained({"f32", "bf16", "f16"}, dtype.getValue()))
      return op->emitOpError("has '")
             << name << "' field '" << key
             << "' that is not f32, bf16 or f16: " << field.getValue();
  }
  return success();
}

LogicalResult FSDPDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  Attribute value = attr.getValue();
  auto expect = [&](bool ok, StringRef what) -> LogicalResult {
    if (ok)
      return success();
    return op->emitOpError("has '")
           << name << "' that is not " << what << ": " << value;
  };
  if (name == "fsdp.parallel")
    return expect(isa<ParallelConfigAttr>(value), "a #fsdp.parallel");
  if (name == "fsdp.unit")
    return expect(isa<StringAttr>(value), "a unit name");
  if (name == "fsdp.reshard" || name == "fsdp.regather" ||
      name == "fsdp.recompute" || name == "fsdp.host" ||
      name == "fsdp.context_parallel" || name == "fsdp.expert_parallel")
    return expect(isa<UnitAttr>(value), "a unit attribute");
  if (name == "fsdp.offload_optimizer") {
    auto s = dyn_cast<StringAttr>(value);
    return expect(s && llvm::is_contained({"cpu", "gpu"}, s.getValue()),
                  "\"cpu\" or \"gpu\"");
  }
  if (name == "fsdp.data_parallel") {
    auto axes = dyn_cast<ArrayAttr>(value);
    return expect(
        axes &&
            llvm::all_of(axes, [](Attribute a) { return isa<StringAttr>(a); }),
        "a list of mesh axis names");
  }
  if (name == "fsdp.precision")
    return checkDtypes(op, name, value,
                       {"param", "reduce", "output", "master"});
  return op->emitOpError("has '")
         << name << "', which is not an fsdp attribute of an op";
}

LogicalResult FSDPDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned region,
                                                    unsigned index,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == "fsdp.host") {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("argument #")
             << index << " has 'fsdp.host' that is not a unit attribute";
    return success();
  }
  if (name != "fsdp.inner_axes" && name != "fsdp.global_shape")
    return op->emitOpError("has '")
           << name << "' on argument #" << index
           << ", which is not an fsdp attribute of an argument";
  Type type;
  if (auto function = dyn_cast<FunctionOpInterface>(op))
    type = function.getArgumentTypes()[index];
  else
    type = op->getRegion(region).getArgument(index).getType();
  auto values = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!values || !tensor || values.size() != tensor.getRank())
    return op->emitOpError("argument #")
           << index << " has '" << name
           << "' that is not one integer per dim of " << type << ": "
           << attr.getValue();
  return success();
}

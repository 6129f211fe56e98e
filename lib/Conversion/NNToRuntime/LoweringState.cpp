//===- LoweringState.cpp - Literals, calls and the lowering's state -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "LoweringState.h"

#include "llvm/Support/Format.h"

#include <cstdio>

using namespace mlir;
using namespace fsdp;

//===----------------------------------------------------------------------===//
// C++ literals
//===----------------------------------------------------------------------===//

static std::string dtypeLiteral(Type type) {
  if (type.isF32())
    return "FSDP_RT_F32";
  if (type.isBF16())
    return "FSDP_RT_BF16";
  if (type.isF16())
    return "FSDP_RT_F16";
  if (type.isInteger(32))
    return "FSDP_RT_I32";
  assert(type.isInteger(64) && "nn types are f32, bf16, f16, i32 or i64");
  return "FSDP_RT_I64";
}

std::string fsdp::typeLiteral(RankedTensorType type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "fsdp_type{" << dtypeLiteral(type.getElementType()) << ", "
     << type.getRank() << ", {";
  llvm::interleaveComma(type.getShape(), os);
  os << "}}";
  return s;
}

// Quotes, backslashes, control and non-ASCII bytes are escaped (octal, so
// no following digit extends them).
std::string fsdp::stringLiteral(StringRef value) {
  std::string s = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += char(c);
    } else if (c < 0x20 || c >= 0x7f || c == '?') {
      char octal[8];
      std::snprintf(octal, sizeof(octal), "\\%03o", unsigned(c));
      s += octal;
    } else {
      s += char(c);
    }
  }
  return s + "\"";
}

std::string fsdp::doubleLiteral(double value) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.17g", value);
  return s;
}

std::string fsdp::intsLiteral(ArrayRef<int64_t> values) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "fsdp_ints{" << values.size() << ", {";
  llvm::interleaveComma(values, os);
  os << "}}";
  return s;
}

//===----------------------------------------------------------------------===//
// Call
//===----------------------------------------------------------------------===//

Call &Call::value(Value v) {
  args.push_back(IntegerAttr::get(IndexType::get(context), operands.size()));
  operands.push_back(v);
  return *this;
}

Call &Call::literal(StringRef text) {
  args.push_back(emitc::OpaqueAttr::get(context, text));
  return *this;
}

Value Call::emit(OpBuilder &builder, Location loc, Type resultType) {
  SmallVector<Type, 1> results;
  if (resultType)
    results.push_back(resultType);
  auto call = emitc::CallOpaqueOp::create(builder, loc, results, callee,
                                          operands, builder.getArrayAttr(args));
  return resultType ? call.getResult(0) : Value();
}

//===----------------------------------------------------------------------===//
// LoweringState
//===----------------------------------------------------------------------===//

Type fsdp::handleType(MLIRContext *context, StringRef name) {
  return emitc::PointerType::get(emitc::OpaqueType::get(context, name));
}

LoweringState::LoweringState(MLIRContext *context)
    : context(context), programType(handleType(context, "fsdp_program")),
      tensorType(handleType(context, "fsdp_tensor")),
      futureType(handleType(context, "fsdp_future")),
      frameType(handleType(context, "fsdp_frame")) {}

LogicalResult LoweringState::addMesh(dist::MeshOp meshOp) {
  if (mesh)
    return meshOp.emitOpError("is a second mesh; the runtime lowering "
                              "supports one mesh per program");
  mesh = meshOp;
  for (auto [i, axis] : llvm::enumerate(mesh.getAxes()))
    axisIndex[cast<StringAttr>(axis).getValue()] = i;
  return success();
}

FailureOr<uint32_t> LoweringState::axisMask(Operation *op, ArrayAttr axes) {
  uint32_t mask = 0;
  int64_t previous = -1;
  if (!mesh)
    return op->emitOpError("names an axis of no mesh in this module");
  for (Attribute listed : axes)
    for (StringRef axis :
         mesh.expandAxis(cast<StringAttr>(listed).getValue())) {
      auto it = axisIndex.find(axis);
      if (it == axisIndex.end())
        return op->emitOpError("names an axis of no mesh in this module");
      if (static_cast<int64_t>(it->second) <= previous) {
        InFlightDiagnostic diag = op->emitOpError(
            "lists its mesh axes out of the mesh's order; the runtime "
            "orders a group's ranks by the mesh");
        diag.attachNote(mesh.getLoc()) << "the mesh's order is here";
        return diag;
      }
      previous = it->second;
      mask |= 1u << it->second;
    }
  return mask;
}

void LoweringState::packSharding(dist::ShardingAttr sharding,
                                 RankedTensorType type,
                                 SmallVectorImpl<int64_t> &global,
                                 SmallVectorImpl<int64_t> &packed,
                                 SmallVectorImpl<int64_t> &groupCounts) {
  for (int64_t d = 0; d < type.getRank(); ++d) {
    groupCounts.push_back(sharding.getDimGroups(d));
    int64_t parts = 1, bits = 0, shift = 0;
    for (StringRef listed : sharding.getDimAxes(d))
      for (StringRef axis : mesh.expandAxis(listed)) {
        bits |= int64_t(axisIndex.lookup(axis) + 1) << shift;
        shift += 4;
        parts *= *mesh.getAxisSize(axis);
      }
    global.push_back(type.getDimSize(d) * parts);
    packed.push_back(bits);
  }
}

Value LoweringState::program(Operation *op) const {
  return op->getParentOfType<emitc::FuncOp>().getArgument(0);
}

void LoweringState::release(OpBuilder &builder, Location loc, Value v) {
  Call(context, "fsdp_release").value(v).emit(builder, loc);
  ++stats.releases;
}

void LoweringState::handOverResult(OpBuilder &builder, Location loc,
                                   Value program,
                                   std::variant<int64_t, Value> index,
                                   Value handle, bool dies) {
  Call call(context, "fsdp_prog_result");
  call.value(program);
  if (auto *number = std::get_if<int64_t>(&index))
    call.literal(intLiteral(*number));
  else
    call.value(std::get<Value>(index));
  call.value(handle).emit(builder, loc);
  if (dies)
    release(builder, loc, handle);
}

void LoweringState::releaseDead(OpBuilder &builder, Operation *op,
                                ValueRange operands, ValueRange results) {
  for (unsigned i : plan->operandsDyingAt(op))
    release(builder, op->getLoc(), operands[i]);
  for (unsigned i : plan->unusedResults(op))
    release(builder, op->getLoc(), results[i]);
}

void LoweringState::finish(ConversionPatternRewriter &rewriter, Operation *op,
                           ValueRange operands, ValueRange results,
                           unsigned calls) {
  stats.opCalls += calls;
  releaseDead(rewriter, op, operands, results);
  rewriter.replaceOp(op, results);
}

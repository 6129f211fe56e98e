//===- LoweringState.h - What the runtime lowering's parts share -*- C++
//-*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The C++ literals of the runtime ABI, a builder for one call, and the state
// the conversion patterns read: the mesh's communicator groups, the file-
// scope tables and the release plan.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_CONVERSION_NNTORUNTIME_LOWERINGSTATE_H
#define LIB_CONVERSION_NNTORUNTIME_LOWERINGSTATE_H

#include "fsdp/Analysis/InPlaceUpdates.h"
#include "fsdp/Analysis/ReleasePlan.h"
#include "fsdp/Conversion/NNToRuntime/NNToRuntime.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

#include <variant>

namespace fsdp {

//===----------------------------------------------------------------------===//
// C++ literals
//===----------------------------------------------------------------------===//

/// `fsdp_type{FSDP_RT_F32, 3, {2, 16, 64}}`.
std::string typeLiteral(mlir::RankedTensorType type);
/// A C string literal of any bytes.
std::string stringLiteral(llvm::StringRef value);
/// A double literal that reads back to the same value.
std::string doubleLiteral(double value);
inline std::string intLiteral(int64_t value) { return std::to_string(value); }
/// `fsdp_ints{3, {1, 2, 3}}`.
std::string intsLiteral(llvm::ArrayRef<int64_t> values);
/// `dim` of a rank-`rank` tensor, counted from the front.
inline int64_t frontDim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + rank : dim;
}
/// A communicator group's mask: `5u`.
inline std::string maskLiteral(uint32_t mask) {
  return std::to_string(mask) + "u";
}

/// The arguments of one `emitc.call_opaque`: SSA operands and literals, in
/// call order.
class Call {
public:
  Call(mlir::MLIRContext *context, llvm::StringRef callee)
      : context(context), callee(callee) {}

  Call &value(mlir::Value v);
  Call &literal(llvm::StringRef text);
  /// Emits the call; `resultType` is null for a void call.
  mlir::Value emit(mlir::OpBuilder &builder, mlir::Location loc,
                   mlir::Type resultType = {});

private:
  mlir::MLIRContext *context;
  std::string callee;
  llvm::SmallVector<mlir::Value> operands;
  llvm::SmallVector<mlir::Attribute> args;
};

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

/// The runtime's handle type `name *` (fsdp_program, fsdp_tensor, ...).
mlir::Type handleType(mlir::MLIRContext *context, llvm::StringRef name);

struct LoweringState {
  explicit LoweringState(mlir::MLIRContext *context);

  /// Records the program's mesh; a second one is an error.
  llvm::LogicalResult addMesh(dist::MeshOp mesh);
  /// The group mask of `axes` (in the mesh's order), as bits of axis
  /// indices; an error at `op` for an unknown axis or another order.
  mlir::FailureOr<uint32_t> axisMask(mlir::Operation *op, mlir::ArrayAttr axes);
  /// Per dim of a block of `type` split by `sharding`: the whole tensor's
  /// size, the splitting axes (major first, as 4-bit fields of axis index +
  /// 1 from the lowest bits up) and the group count.
  void packSharding(dist::ShardingAttr sharding, mlir::RankedTensorType type,
                    llvm::SmallVectorImpl<int64_t> &global,
                    llvm::SmallVectorImpl<int64_t> &packed,
                    llvm::SmallVectorImpl<int64_t> &groups);
  /// The program handle: the first argument of `op`'s function.
  mlir::Value program(mlir::Operation *op) const;
  /// Emits `fsdp_release(v)`.
  void release(mlir::OpBuilder &builder, mlir::Location loc, mlir::Value v);
  /// Hands `handle` to `program` as step result `index` (a number, or a
  /// value a loop computes); the program keeps its own reference, so the
  /// handle is released there when it `dies` there.
  void handOverResult(mlir::OpBuilder &builder, mlir::Location loc,
                      mlir::Value program,
                      std::variant<int64_t, mlir::Value> index,
                      mlir::Value handle, bool dies);
  /// Emits the releases the plan puts after `op`, whose operands and results
  /// are now `operands` and `results`.
  void releaseDead(mlir::OpBuilder &builder, mlir::Operation *op,
                   mlir::ValueRange operands, mlir::ValueRange results);
  /// The end of every op's lowering: counts its `calls` runtime calls,
  /// emits the plan's releases and replaces `op` by `results`.
  void finish(mlir::ConversionPatternRewriter &rewriter, mlir::Operation *op,
              mlir::ValueRange operands, mlir::ValueRange results,
              unsigned calls);

  /// The runtime handle of a value of `type`: a future's or a tensor's.
  mlir::Type handleOf(mlir::Type type) const {
    return llvm::isa<dist::FutureType>(type) || type == futureType ? futureType
                                                                   : tensorType;
  }
  /// The frame accessors for a handle of `type` (tensor or future).
  llvm::StringRef frameGetter(mlir::Type type) const {
    return handleOf(type) == futureType ? "fsdp_frame_get_future"
                                        : "fsdp_frame_get";
  }
  llvm::StringRef frameSetter(mlir::Type type) const {
    return handleOf(type) == futureType ? "fsdp_frame_set_future"
                                        : "fsdp_frame_set";
  }

  mlir::MLIRContext *context;
  mlir::Type programType, tensorType, futureType, frameType;
  dist::MeshOp mesh;
  llvm::StringMap<unsigned> axisIndex;
  /// The communicator groups, in order of first use, and each op's.
  llvm::SetVector<uint32_t> groups;
  llvm::DenseMap<mlir::Operation *, uint32_t> groupOf;
  /// The file-scope arrays of `table` literals, by attribute.
  llvm::DenseMap<mlir::Attribute, std::string> tables;
  /// Per layer function: how many frame slots its inputs take.
  llvm::StringMap<unsigned> layerInputs;
  std::unique_ptr<ReleasePlan> plan;
  /// The optimizer results that take their operand's buffer.
  std::unique_ptr<InPlaceUpdates> inPlace;
  RuntimeLoweringStats stats;
};

/// The patterns that turn nn and dist ops, `func.call` of a layer function
/// and `func.return` into runtime calls.
void populateNNToRuntimePatterns(const mlir::TypeConverter &converter,
                                 mlir::RewritePatternSet &patterns,
                                 LoweringState &state);

/// Checks that every op of `body` can be lowered, and collects the groups
/// and tables its literals name (emitting tables at `tablesAt`).
llvm::LogicalResult prepareLiterals(mlir::Block &body, LoweringState &state,
                                    mlir::OpBuilder &tablesAt);

} // namespace fsdp

#endif // LIB_CONVERSION_NNTORUNTIME_LOWERINGSTATE_H

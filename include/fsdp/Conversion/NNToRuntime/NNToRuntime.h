//===- NNToRuntime.h - nn/dist program to runtime calls ---------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The lowering of a per-rank step to the runtime ABI
// (include/fsdp/Runtime/Program.h) in EmitC. Each op states its runtime
// call in ODS (RuntimeCallInterface.td); one conversion pattern turns every
// such op into its call.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_CONVERSION_NNTORUNTIME_NNTORUNTIME_H
#define FSDP_CONVERSION_NNTORUNTIME_NNTORUNTIME_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"

namespace fsdp {

/// What the lowering emitted.
struct RuntimeLoweringStats {
  unsigned opCalls = 0, releases = 0, layerFunctions = 0, layerCalls = 0,
           layerLoops = 0;
};

/// The runtime's handle types: a tensor becomes `fsdp_tensor *`, a
/// `!dist.future` `fsdp_future *`.
class RuntimeTypeConverter : public mlir::TypeConverter {
public:
  explicit RuntimeTypeConverter(mlir::MLIRContext *context);
};

/// Lowers `entry` of `module`, a per-rank step of nn and dist ops, into the
/// functions every compiled program defines: `fsdp_program_describe` and
/// `fsdp_program_forward`. With `outlineLayers`, runs of ops that repeat
/// per layer become one static function each, called per layer. With
/// `memoryPlan`, the description carries the step's memory plan
/// (StepBuffers.h, `fsdp_prog_memory_plan`).
llvm::LogicalResult lowerToRuntime(mlir::ModuleOp module,
                                   mlir::func::FuncOp entry, bool outlineLayers,
                                   bool memoryPlan,
                                   RuntimeLoweringStats &stats);

} // namespace fsdp

#endif // FSDP_CONVERSION_NNTORUNTIME_NNTORUNTIME_H

//===- InPlaceUpdates.h - Optimizer updates that reuse buffers -*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The runtime lowering's two decisions about a step's optimizer updates,
// shared with the memory report so that its replay stays the runtime's:
// which results take their operand's buffer (the lowering hands the
// operand's handle back as the result, the report counts no bytes for it),
// what PyTorch's optimizers do by updating parameters in place, so that a
// step holds one copy of the parameters and optimizer state, not two; and
// whether the step's AdamW calls may wait for the step's end and run as one
// multi-tensor update (their operands then live until the end).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_INPLACEUPDATES_H
#define FSDP_ANALYSIS_INPLACEUPDATES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace fsdp {

/// The operand whose buffer the runtime hands out again as `op`'s result:
/// dist.copy, dist.wait (the started collective's), nn.reshape, and an
/// nn.slice or dist.all_slice whose dims before the sliced one are all 1
/// (Ops.cpp's views).
/// Null for an op whose results are new buffers.
mlir::Value sharedBufferOperand(mlir::Operation *op);

/// Per step: the nn.adamw and nn.sgd results (UpdateOpInterface) that
/// update their own operand in place. A result qualifies when the step
/// returns it as the update (nn.updates) of the step argument it is the new
/// value of, and nothing reads that argument's buffer after the op: no
/// later use of the argument or of a view of it, and no async collective
/// on it still in flight.
class InPlaceUpdates {
public:
  explicit InPlaceUpdates(mlir::func::FuncOp step);

  /// The operand number of `result`'s op whose buffer `result` takes, or
  /// -1 when it gets a buffer of its own.
  int reusedOperand(mlir::Value result) const {
    return reused.lookup(result) - 1;
  }

private:
  /// Operand number + 1 per in-place result (0: none).
  llvm::DenseMap<mlir::Value, int> reused;
};

/// Whether `step`'s nn.adamw calls may be queued until the step returns
/// (fsdp_prog_defer_updates): it has some, and nothing in the step reads
/// their results (the return hands them back).
bool defersUpdates(mlir::func::FuncOp step);

} // namespace fsdp

#endif // FSDP_ANALYSIS_INPLACEUPDATES_H

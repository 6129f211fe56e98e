//===- ReleasePlan.h - Where a step releases its tensor handles -*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The one definition of liveness that the runtime lowering and the memory
// report share: the lowering emits an `fsdp_release` where the plan says,
// and the report replays the same plan with the runtime's reference counts,
// so its estimate is the runtime's peak by construction.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_RELEASEPLAN_H
#define FSDP_ANALYSIS_RELEASEPLAN_H

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace fsdp {

/// Per op of a step's block: the tensor handles that die there. A handle is
/// an op's tensor result; it dies right after its last use, or right after
/// its op when nothing uses it. The step's arguments belong to the program
/// and futures are consumed by their `dist.wait`: neither is released.
class ReleasePlan {
public:
  explicit ReleasePlan(mlir::Block &body) { add(body); }

  /// Plans the handles of one more function's body (the eval step's).
  void add(mlir::Block &body);

  /// Whether `v` is a handle the step releases.
  static bool isReleased(mlir::Value v);
  /// The operand numbers of `op` whose handles die at `op` (a value used
  /// twice is listed once).
  llvm::ArrayRef<unsigned> operandsDyingAt(mlir::Operation *op) const;
  /// The results of `op` that nothing uses: released right after it.
  llvm::ArrayRef<unsigned> unusedResults(mlir::Operation *op) const;
  /// The op after which handle `v` is released, or null when it is not.
  mlir::Operation *releasedAfter(mlir::Value v) const;

private:
  struct Deaths {
    llvm::SmallVector<unsigned, 2> operands, results;
  };
  llvm::DenseMap<mlir::Operation *, Deaths> deaths;
  llvm::DenseMap<mlir::Value, mlir::Operation *> lastUse;
};

} // namespace fsdp

#endif // FSDP_ANALYSIS_RELEASEPLAN_H

//===- StepBuffers.h - A step's buffers and its memory plan -----*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The one account of which buffers a lowered step allocates, in which order,
// and after which op each is freed. The memory report replays it (so its
// estimate is the runtime's peak) and the lowering plans it: every device
// buffer that dies inside the step gets an offset in one arena, chosen from
// these lifetimes, and the runtime hands the buffers out at those offsets
// instead of asking an allocator (`fsdp_prog_memory_plan`).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_STEPBUFFERS_H
#define FSDP_ANALYSIS_STEPBUFFERS_H

#include "fsdp/Runtime/Accounting.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"

namespace fsdp {

/// Whether `op`'s results are host buffers under CPU offload: a host copy,
/// or an op fsdp-offload placed on the host (`fsdp.host`). The lowering,
/// the memory replay and the runtime follow this one rule.
bool resultsOnHost(mlir::Operation *op);

/// The module attribute where fsdp-offload records where its optimizer
/// runs: "cpu" (the host's cores) or "gpu" (kernels reading host memory).
constexpr llvm::StringLiteral kOffloadOptimizerAttr = "fsdp.offload_optimizer";
/// Whether the optimizer ops and squared sums `module` places on the host
/// run on the host's cores (kOffloadOptimizerAttr is "cpu"). The lowering
/// (fsdp_prog_optimizer_on_host_cores) and the simulator follow this rule.
bool optimizerOnHostCores(mlir::ModuleOp module);

/// The bytes of a ranked tensor, or of the one a future holds (0 for any
/// other type).
int64_t bytesOf(mlir::Type type);

/// A buffer the runtime allocates for an op result of the step: not a view,
/// not a collective's future handed on by its wait, not an in-place update.
struct StepBuffer {
  static constexpr unsigned kKept = ~0u;
  mlir::Value value;
  int64_t bytes = 0;
  /// In host memory (CPU offload).
  bool host = false;
  /// The op (its index in the step's block) that allocates the buffer, and
  /// the op after which its last handle goes: the step's end (the number of
  /// ops) for a deferred AdamW's tensors, kKept for a buffer the step
  /// returns.
  unsigned allocated = 0, freed = kKept;
  bool kept() const { return freed == kKept; }
  /// Whether it is live while op `i` runs.
  bool liveAt(unsigned i) const { return allocated <= i && i <= freed; }
};

/// A step's buffers in the order the runtime allocates them: by op, then by
/// result. A buffer is freed when its last handle is released: handles die
/// where the lowering releases them (ReleasePlan.h), a view holds its base
/// (sharedBufferOperand), an async collective holds its input until its
/// wait, and deferred AdamW calls (defersUpdates) hold their tensors until
/// the step's end.
class StepBuffers {
public:
  explicit StepBuffers(mlir::func::FuncOp step);

  llvm::ArrayRef<StepBuffer> buffers() const { return list; }
  /// The ops of the step's block, its terminator excluded.
  unsigned numOps() const { return ops; }

private:
  llvm::SmallVector<StepBuffer> list;
  unsigned ops = 0;
};

/// The step's memory plan: one device arena, and in it an offset for each
/// device buffer that the step frees. A buffer the step returns, and a host
/// buffer, stay with the allocator.
struct MemoryPlan {
  /// Per buffer of StepBuffers::buffers(): its offset, or -1 outside the
  /// arena.
  llvm::SmallVector<int64_t> offsets;
  int64_t arena = 0;
  /// Buffers in the arena, and the most bytes (aligned) they hold at once:
  /// the arena can be no smaller.
  int64_t planned = 0, livePeak = 0;

  /// The bytes a planned buffer of `bytes` takes (Accounting.h).
  static int64_t slot(int64_t bytes) {
    return accounting::planSlotBytes(bytes);
  }
};

/// Plans `buffers`: largest first, each at the lowest offset of the
/// smallest gap left by the buffers already placed whose lifetimes overlap
/// its own (best fit), or above them all.
MemoryPlan planMemory(const StepBuffers &buffers);

} // namespace fsdp

#endif // FSDP_ANALYSIS_STEPBUFFERS_H

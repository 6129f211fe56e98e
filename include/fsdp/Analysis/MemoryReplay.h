//===- MemoryReplay.h - The runtime's allocations of one step ---*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_MEMORYREPLAY_H
#define FSDP_ANALYSIS_MEMORYREPLAY_H

#include "fsdp/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <optional>

namespace fsdp {

/// The bytes one rank holds in a step, as the runtime allocates them.
struct MemoryReplay {
  /// The arguments, held for the whole step, on the device.
  int64_t params = 0, state = 0, inputs = 0;
  /// Gradient blocks at the update, the largest gathered FSDP unit.
  int64_t grads = 0, gathered = 0;
  /// The peak of everything else on the device: activations,
  /// temporaries, staging (wherever the memory plan puts them).
  int64_t peak = 0;
  /// Host memory under CPU offload (fsdp-offload's fsdp.host): the
  /// arguments placed there and the peak of the host ops' results.
  struct Host {
    int64_t params = 0, state = 0, inputs = 0, peak = 0;
    int64_t estimate() const { return params + state + inputs + peak; }
  } host;
  bool offloaded() const { return host.estimate() > 0; }
  /// The bytes live when the backward starts (at the loss's gradient):
  /// what the forward saved for it.
  std::optional<int64_t> saved;
  /// FLOPs of the ops activation checkpointing recomputed, and of the
  /// forward (ops with a module path).
  double recomputedFlops = 0, forwardFlops = 0;
  /// Optimizer results (nn.adamw, nn.sgd) and those that take their
  /// operand's buffer (InPlaceUpdates.h); whether AdamW waits for the
  /// step's end (defersUpdates).
  int64_t updates = 0, updatesInPlace = 0;
  bool deferred = false;
  /// The memory plan (StepBuffers.h): its arena, the buffers in it, the
  /// most bytes they hold at once, and the peak of the device buffers and
  /// staging outside it. The step holds the arena throughout.
  struct Plan {
    int64_t arena = 0, buffers = 0, livePeak = 0, outside = 0;
  };
  std::optional<Plan> plan;
  /// The estimated peak of the step on the device.
  int64_t estimate() const {
    return params + state + inputs +
           (plan ? plan->arena + plan->outside : peak);
  }
};

/// Replays `step`'s allocations the way the runtime makes them: the buffers
/// of StepBuffers.h, and the temporary buffers a collective stages through,
/// an async one holding them to its wait. With `planned`, the buffers the
/// memory plan places live in its arena, which the step holds throughout.
/// `mesh` sizes the collectives (null when there are none).
MemoryReplay replayMemory(mlir::func::FuncOp step, dist::MeshOp mesh,
                          bool planned);

} // namespace fsdp

#endif // FSDP_ANALYSIS_MEMORYREPLAY_H

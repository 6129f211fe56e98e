//===- FSDPGradients.h - FSDP's part of the backward ------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What fsdp-build-train-step asks of FSDP when it differentiates a step that
// fsdp-shard split into units: the deferred gradient sync over microbatches
// and the backward re-gather of resharded units.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_TRANSFORMS_FSDPGRADIENTS_H
#define LIB_TRANSFORMS_FSDPGRADIENTS_H

#include "fsdp/Dialect/NN/IR/Gradient.h"

#include "llvm/ADT/StringMap.h"

namespace fsdp {

/// FSDP2's deferred gradient sync (defer_fsdp_grad_sync): the gradients of
/// each unit's gathered parameters are summed over the microbatches, whole,
/// and reduce-scattered once, in the last microbatch's backward.
class DeferredGradSync {
public:
  /// The all_gather hook for one microbatch's backward (`grads`'s): holds
  /// a unit's gradient, or hands the sum on in the last microbatch.
  nn::GradientBuilder::GatherHook forMicrobatch(nn::GradientBuilder &grads,
                                                bool last);

private:
  /// Per unit, the sum of the earlier microbatches' gathered gradients.
  llvm::StringMap<mlir::Value> pending;
};

/// FSDP2's reshard_after_forward: a unit's gathered parameters (an
/// all_gather marked `fsdp.reshard` and the split and reshapes that unpack
/// it) are gathered again right before the backward first reads them, so
/// the forward's copy dies after its last forward use. `forward` are the
/// forward ops, all before `backwardStart`.
void regatherForBackward(mlir::OpBuilder &b,
                         llvm::ArrayRef<mlir::Operation *> forward,
                         mlir::Operation *backwardStart);

} // namespace fsdp

#endif // LIB_TRANSFORMS_FSDPGRADIENTS_H

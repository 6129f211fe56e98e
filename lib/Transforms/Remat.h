//===- Remat.h - Activation checkpointing as rematerialization --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_TRANSFORMS_REMAT_H
#define FSDP_LIB_TRANSFORMS_REMAT_H

#include "fsdp/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace fsdp {

/// What rematerialize did.
struct RematStats {
  /// Layers that recompute, ops cloned into the backward, and of them the
  /// collectives re-issued.
  int64_t layers = 0, ops = 0, collectives = 0;
  /// Layers without checkpointing whose ring-attention K/V blocks go round
  /// again before their backward, and those permutes.
  int64_t ringLayers = 0, ringCollectives = 0;

  RematStats &operator+=(const RematStats &other) {
    layers += other.layers;
    ops += other.ops;
    collectives += other.collectives;
    ringLayers += other.ringLayers;
    ringCollectives += other.ringCollectives;
    return *this;
  }
};

/// Which decoder layers (numbered in forward order) recompute, and how:
/// layers [0, full) fully, [full, selective) selectively, the others as
/// `rest`.
struct RematPlan {
  int64_t full = 0, selective = 0;
  Checkpointing rest = Checkpointing::None;

  static RematPlan uniform(Checkpointing mode) {
    RematPlan plan;
    plan.rest = mode;
    return plan;
  }
  Checkpointing modeOf(int64_t layer) const {
    return layer < full        ? Checkpointing::Full
           : layer < selective ? Checkpointing::Selective
                               : rest;
  }
  /// Whether any layer recomputes.
  bool any() const {
    return full > 0 || selective > 0 || rest == Checkpointing::Full ||
           rest == Checkpointing::Selective;
  }
};

/// The decoder layers among `forward` ops, in order (see rematerialize).
llvm::SmallVector<std::string>
decoderLayers(llvm::ArrayRef<mlir::Operation *> forward);

/// Activation checkpointing of the decoder layers among `forward` (one
/// microbatch's forward ops, in order), after its backward was built after
/// `backwardStart`. A layer's ops are those whose `path` lies in it and the
/// pathless ops between two of them. Every value of a layer that a backward
/// op reads and the layer does not keep is recomputed: its ops are cloned
/// (marked `fsdp.recompute`) before the first backward op that reads one,
/// from the kept values, and the backward reads the clones. A layer keeps
/// its inputs and its outputs (values other forward ops read); `Selective`
/// also keeps every other matmul's result (the first, third, ...),
/// attention's and every collective's. `plan` says which mode each layer
/// gets. Whatever the mode, ring attention's K/V blocks (context
/// parallelism's permutes) are not kept: a layer without checkpointing
/// keeps everything else and passes the blocks round the ring again before
/// its backward. Runs before fsdp's backward re-gather, which then serves
/// the recompute too.
RematStats rematerialize(mlir::OpBuilder &b,
                         llvm::ArrayRef<mlir::Operation *> forward,
                         mlir::Operation *backwardStart, const RematPlan &plan);

} // namespace fsdp

#endif // FSDP_LIB_TRANSFORMS_REMAT_H

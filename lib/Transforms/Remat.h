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
};

/// Activation checkpointing of the decoder layers among `forward` (one
/// microbatch's forward ops, in order), after its backward was built after
/// `backwardStart`. A layer's ops are those whose `path` lies in it and the
/// pathless ops between two of them. Every value of a layer that a backward
/// op reads and the layer does not keep is recomputed: its ops are cloned
/// (marked `fsdp.recompute`) before the first backward op that reads one,
/// from the kept values, and the backward reads the clones. A layer keeps
/// its inputs and its outputs (values other forward ops read); `Selective`
/// also keeps every other matmul's result (the first, third, ...),
/// attention's and every collective's. Runs before fsdp's backward
/// re-gather, which then serves the recompute too.
RematStats rematerialize(mlir::OpBuilder &b,
                         llvm::ArrayRef<mlir::Operation *> forward,
                         mlir::Operation *backwardStart, Checkpointing mode);

} // namespace fsdp

#endif // FSDP_LIB_TRANSFORMS_REMAT_H

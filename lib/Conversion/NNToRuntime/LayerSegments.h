//===- LayerSegments.h - Runs of ops that repeat per layer ------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A decoder stack gives every layer the same per-rank program: the forward
// of layer 5 is the forward of layer 6 on other parameters. The lowering
// emits such a run of ops once, as a function, and calls it per layer, so
// the generated C++ does not grow with the depth of the model.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_CONVERSION_NNTORUNTIME_LAYERSEGMENTS_H
#define LIB_CONVERSION_NNTORUNTIME_LAYERSEGMENTS_H

#include "fsdp/Analysis/InPlaceUpdates.h"
#include "fsdp/Analysis/ReleasePlan.h"
#include "mlir/IR/Block.h"
#include "llvm/ADT/SmallVector.h"

namespace fsdp {

/// One run of ops [begin, end) of a block, lowered as a call of function
/// `function`.
struct Segment {
  unsigned begin = 0, end = 0;
  unsigned function = 0;
  /// The values the run reads from outside, in order of first use.
  llvm::SmallVector<mlir::Value> inputs;
  /// Per input: its last use is in the run, so the run releases it.
  llvm::SmallVector<bool> inputDies;
  /// The values the run defines and something after it uses.
  llvm::SmallVector<mlir::Value> outputs;
};

/// The runs of `body` that repeat: ops are attributed to a layer (by a
/// `path` or `fsdp.unit` naming `<container>.<index>`, by the location of
/// the forward op a backward op was built for, by a layer's parameter, or
/// by lying between two ops of one layer); maximal runs of one layer whose
/// ops, attributes (but for names), types, dataflow and in-place updates
/// are the same form one function. Only functions called at least twice
/// are returned, in block order. Futures of async collectives pass in and
/// out like tensors.
llvm::SmallVector<Segment> findLayerSegments(mlir::Block &body,
                                             const ReleasePlan &plan,
                                             const InPlaceUpdates &inPlace);

} // namespace fsdp

#endif // LIB_CONVERSION_NNTORUNTIME_LAYERSEGMENTS_H

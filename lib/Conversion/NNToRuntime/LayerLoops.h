//===- LayerLoops.h - Calls of a layer function as a loop -------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// After outlining, a decoder stack's step calls each layer function once
// per layer, one call after the other. The calls of a run differ only in
// which handles they pass, and those follow the layer index: a parameter is
// the program argument `base + stride · i`, the hidden state is what the
// previous call returned, a saved activation is what call `a + b · i` of an
// earlier run returned. A run becomes one `for` loop whose values pass
// through tables (runtime frames) indexed by the layer, so the emitted
// source does not grow with the depth of the model.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_CONVERSION_NNTORUNTIME_LAYERLOOPS_H
#define LIB_CONVERSION_NNTORUNTIME_LAYERLOOPS_H

#include "LoweringState.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <memory>

namespace fsdp {

class LayerLoops {
public:
  /// Finds the runs of `entry` (still a func.func) and where each input of
  /// their calls comes from.
  explicit LayerLoops(mlir::func::FuncOp entry);
  ~LayerLoops();

  /// Replaces every run by a loop in `shell`, the EmitC function `entry`'s
  /// body moved to (whose arguments are now read by `fsdp_prog_arg`), and
  /// drops the argument reads nothing uses any more.
  void emit(mlir::emitc::FuncOp shell, LoweringState &state);

  struct Analysis;

private:
  std::unique_ptr<Analysis> analysis;
};

} // namespace fsdp

#endif // LIB_CONVERSION_NNTORUNTIME_LAYERLOOPS_H

//===- TPAnnotation.h - The dist.tp annotation of a plan's ops --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What fsdp-tp-plan writes on the ops of a matched module and
// fsdp-partition reads: the style as a `#dist.tp` attribute, which the dist
// dialect verifies.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_TRANSFORMS_TPANNOTATION_H
#define FSDP_LIB_TRANSFORMS_TPANNOTATION_H

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Parallel/ParallelConfig.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace fsdp::tp {

constexpr llvm::StringLiteral kStyleAttrName =
    dist::DistDialect::kTPStyleAttrName;

/// The annotation of `style`, from plan key `entry`.
inline dist::TPStyleAttr encode(mlir::Builder &b, const TPStyle &style,
                                llvm::StringRef entry) {
  dist::TPStyleKind kind =
      style.kind == TPStyle::Colwise   ? dist::TPStyleKind::colwise
      : style.kind == TPStyle::Rowwise ? dist::TPStyleKind::rowwise
                                       : dist::TPStyleKind::sequence_parallel;
  auto layout = [&](TPLayout l) {
    return dist::TPLayoutAttr::get(b.getContext(), l.shard,
                                   l.shard ? l.dim : 0);
  };
  return dist::TPStyleAttr::get(
      b.getContext(), kind, layout(style.input), layout(style.output),
      b.getBoolAttr(style.useLocalOutput), b.getStringAttr(entry));
}

/// The style `attr` annotates. The dist dialect verified the annotation,
/// which is typed, so decoding cannot fail.
inline TPStyle decode(dist::TPStyleAttr attr) {
  TPStyle style;
  switch (attr.getKind()) {
  case dist::TPStyleKind::colwise:
    style = TPStyle::colwise();
    break;
  case dist::TPStyleKind::rowwise:
    style = TPStyle::rowwise();
    break;
  case dist::TPStyleKind::sequence_parallel:
    style = TPStyle::sequenceParallel();
    break;
  }
  auto layout = [](dist::TPLayoutAttr l) {
    return l.getSharded() ? TPLayout::sharded(l.getDim())
                          : TPLayout::replicate();
  };
  style.input = layout(attr.getInput());
  style.output = layout(attr.getOutput());
  style.useLocalOutput = attr.getUseLocalOutput().getValue();
  return style;
}

/// The style an op was annotated with, if any.
inline std::optional<TPStyle> decode(mlir::Operation *op) {
  if (auto attr = op->getAttrOfType<dist::TPStyleAttr>(kStyleAttrName))
    return decode(attr);
  return std::nullopt;
}

/// The operands a style splits over tp and the dim of each, as the op's
/// TPStyleOpInterface says. fsdp-tp-plan reports them and fsdp-partition
/// splits them.
inline llvm::SmallVector<std::pair<mlir::Value, int64_t>>
splitOperands(mlir::Operation *op, const TPStyle &style) {
  auto styled = llvm::dyn_cast<nn::TPStyleOpInterface>(op);
  if (!styled || style.kind == TPStyle::SequenceParallel)
    return {};
  llvm::SmallVector<std::pair<mlir::Value, int64_t>> split;
  for (auto [index, dim] :
       styled.getTPSplitOperands(style.kind == TPStyle::Colwise))
    split.push_back({op->getOperand(index), dim});
  return split;
}

/// The plan key an annotation came from, for messages.
inline std::string entryOf(mlir::Operation *op) {
  auto attr = op->getAttrOfType<dist::TPStyleAttr>(kStyleAttrName);
  return attr ? attr.getEntry().str() : std::string("?");
}

} // namespace fsdp::tp

#endif // FSDP_LIB_TRANSFORMS_TPANNOTATION_H

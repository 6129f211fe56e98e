//===- TPAnnotation.h - The dist.tp annotation of a plan's ops --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What fsdp-tp-plan writes on the ops of a matched module and
// fsdp-partition reads: the style as a dictionary
// `{style, input, output, use_local_output, entry}`.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_TRANSFORMS_TPANNOTATION_H
#define FSDP_LIB_TRANSFORMS_TPANNOTATION_H

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Parallel/ParallelConfig.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace fsdp::tp {

constexpr llvm::StringLiteral kStyleAttrName = "dist.tp";
constexpr llvm::StringLiteral kMixedPrecisionAttrName = "fsdp.mp_policy";

/// The annotation of `style`, from plan key `entry`.
inline mlir::DictionaryAttr encode(mlir::Builder &b, const TPStyle &style,
                                   llvm::StringRef entry) {
  return b.getDictionaryAttr(
      {b.getNamedAttr("style", b.getStringAttr(style.kindName())),
       b.getNamedAttr("input", b.getStringAttr(style.input.str())),
       b.getNamedAttr("output", b.getStringAttr(style.output.str())),
       b.getNamedAttr("use_local_output", b.getBoolAttr(style.useLocalOutput)),
       b.getNamedAttr("entry", b.getStringAttr(entry))});
}

/// The style an op was annotated with, if any; emits an error on `op` and
/// sets `failed` for a malformed annotation.
inline std::optional<TPStyle> decode(mlir::Operation *op, bool &failed) {
  auto dict = op->getAttrOfType<mlir::DictionaryAttr>(kStyleAttrName);
  if (!dict)
    return std::nullopt;
  auto text = [&](llvm::StringRef key) {
    auto s = dict.getAs<mlir::StringAttr>(key);
    return s ? s.getValue().str() : std::string();
  };
  TPStyle style;
  std::string kind = text("style");
  if (kind == "colwise")
    style = TPStyle::colwise();
  else if (kind == "rowwise")
    style = TPStyle::rowwise();
  else if (kind == "sequence_parallel")
    style = TPStyle::sequenceParallel();
  std::optional<TPLayout> in = TPLayout::parse(text("input"));
  std::optional<TPLayout> out = TPLayout::parse(text("output"));
  auto local = dict.getAs<mlir::BoolAttr>("use_local_output");
  if ((kind != "colwise" && kind != "rowwise" && kind != "sequence_parallel") ||
      !in || !out || !local) {
    op->emitOpError("has a malformed ")
        << kStyleAttrName << " annotation " << dict
        << " (expected style = colwise|rowwise|sequence_parallel, input and "
           "output = replicate|shard(d), use_local_output = true|false)";
    failed = true;
    return std::nullopt;
  }
  style.input = *in;
  style.output = *out;
  style.useLocalOutput = local.getValue();
  return style;
}

/// The operands a style splits over tp and the dim of each: the weight (a
/// linear's [out, in] rows for column-parallel, columns for row-parallel; a
/// Conv1D matmul's [in, out] the other way; an embedding table's columns or
/// rows) and a column-parallel bias. fsdp-tp-plan reports them and
/// fsdp-partition splits them.
inline llvm::SmallVector<std::pair<mlir::Value, int64_t>>
splitOperands(mlir::Operation *op, const TPStyle &style) {
  if (style.kind == TPStyle::SequenceParallel)
    return {};
  bool col = style.kind == TPStyle::Colwise;
  if (auto linear = llvm::dyn_cast<nn::LinearOp>(op)) {
    llvm::SmallVector<std::pair<mlir::Value, int64_t>> split = {
        {linear.getWeight(), col ? 0 : 1}};
    if (col && linear.getBias())
      split.push_back({linear.getBias(), 0});
    return split;
  }
  if (auto matmul = llvm::dyn_cast<nn::MatmulOp>(op))
    return {{matmul.getRhs(), col ? 1 : 0}};
  if (auto embedding = llvm::dyn_cast<nn::EmbeddingOp>(op))
    return {{embedding.getTable(), col ? 1 : 0}};
  if (auto add = llvm::dyn_cast<nn::AddOp>(op); add && col)
    return {{add.getRhs(), 0}}; // A Conv1D's bias.
  return {};
}

/// The plan key an annotation came from, for messages.
inline std::string entryOf(mlir::Operation *op) {
  auto dict = op->getAttrOfType<mlir::DictionaryAttr>(kStyleAttrName);
  auto entry = dict ? dict.getAs<mlir::StringAttr>("entry") : nullptr;
  return entry ? entry.getValue().str() : std::string("?");
}

} // namespace fsdp::tp

#endif // FSDP_LIB_TRANSFORMS_TPANNOTATION_H

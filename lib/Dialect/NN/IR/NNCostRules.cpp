//===- NNCostRules.cpp - The work nn ops do, for the step-time simulator --===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// CostOpInterface: the FLOPs and memory traffic of the ops that do more (or
// less) than stream their operands once. fsdp-simulate turns them into time
// with a hardware model.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"

using namespace mlir;
using namespace fsdp::nn;

/// Bytes of a ranked tensor value (0 for anything else).
static double bytesOf(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return 0;
  return static_cast<double>(type.getNumElements()) *
         llvm::divideCeil(type.getElementTypeBitWidth(), 8);
}

OpCost fsdp::nn::streamingCost(Operation *op) {
  OpCost cost;
  for (Value v : op->getOperands())
    cost.bytes += bytesOf(v);
  for (Value v : op->getResults())
    cost.bytes += bytesOf(v);
  return cost;
}

/// A matmul-bound op of `flops`, streaming its operands.
static OpCost matmulCost(Operation *op, double flops) {
  OpCost cost = streamingCost(op);
  cost.unit = CostUnit::Matmul;
  cost.flops = cost.modelFlops = flops;
  cost.dtype = tensorOf(op->getResult(0)).getElementType();
  return cost;
}

OpCost EmbeddingOp::getCost() {
  // A gather: the ids, the rows it reads and the result it writes.
  OpCost cost;
  cost.bytes = bytesOf(getIds()) + 2 * bytesOf(getResult());
  return cost;
}

OpCost ReshapeOp::getCost() {
  // Row-major data keeps its order: a GPU target makes it a view, no kernel
  // (the CPU runtime copies, which the simulator does not model).
  return OpCost();
}

OpCost LinearOp::getCost() {
  RankedTensorType w = tensorOf(getWeight());
  double rows = static_cast<double>(tensorOf(getResult()).getNumElements()) /
                w.getDimSize(0);
  return matmulCost(*this, 2 * rows * w.getDimSize(0) * w.getDimSize(1));
}

/// 2·M·N·K for `C = op(A) · op(B)`: the result's elements times twice the
/// contracted length.
template <typename OpTy> static OpCost productCost(OpTy op) {
  RankedTensorType lhs = tensorOf(op.getLhs());
  int64_t k = lhs.getDimSize(lhs.getRank() - (op.getTransposeA() ? 2 : 1));
  return matmulCost(op, 2.0 * tensorOf(op.getResult()).getNumElements() * k);
}

OpCost MatmulOp::getCost() { return productCost(*this); }
OpCost BatchMatmulOp::getCost() { return productCost(*this); }

/// The (query, key) pairs one head of one sample computes: all of them, or
/// under a causal mask (and a window) query `i` of `s` sees min(i+1, w, skv).
static double attendedPairs(int64_t s, int64_t skv, bool causal,
                            std::optional<uint64_t> window) {
  if (!causal)
    return static_cast<double>(s) * skv;
  double l = static_cast<double>(
      std::min(skv, static_cast<int64_t>(window.value_or(skv))));
  double n = static_cast<double>(s);
  if (n <= l)
    return n * (n + 1) / 2;
  return l * (l + 1) / 2 + (n - l) * l;
}

/// Attention's cost: `forwardProducts` and `modelProducts` count matmuls of
/// head size (D for scores, Dv for values) per attended pair; model FLOPs
/// credit no mask. With positions (context parallelism's load-balanced
/// chunks) the queries are spread evenly over the sequence: a rank's share
/// of the whole sequence's pairs, 1/n of them for the n = S/s ranks; with
/// the keys' positions too, the keys are one rank's block of a ring, and a
/// step attends (on average over the ring) 1/n of the rank's pairs. A
/// packed attention (document positions) attends within documents of the
/// stated length only.
/// The causal pairs of a packed row of `whole` tokens: documents of the
/// module's `fsdp.document_length` tokens (a stated length; the whole row,
/// one document, when the module states none) back to back.
static double packedPairs(Operation *op, int64_t whole,
                          std::optional<uint64_t> window) {
  auto module = op->getParentOfType<ModuleOp>();
  auto stated = module ? module->getAttrOfType<IntegerAttr>(
                             fsdp::nn::NNDialect::kDocumentLengthAttrName)
                       : IntegerAttr();
  int64_t length =
      stated ? std::clamp<int64_t>(stated.getInt(), 1, whole) : whole;
  int64_t docs = whole / length, rest = whole % length;
  return static_cast<double>(docs) *
             attendedPairs(length, length, /*causal=*/true, window) +
         (rest ? attendedPairs(rest, rest, /*causal=*/true, window) : 0.0);
}

static OpCost attentionCost(Operation *op, Value query, Value key, Value value,
                            Value positions, Value keyPositions,
                            Value documents, bool causal,
                            std::optional<uint64_t> window, bool backward) {
  RankedTensorType q = tensorOf(query);
  int64_t b = q.getDimSize(0), s = q.getDimSize(1), heads = q.getDimSize(2),
          d = q.getDimSize(3);
  int64_t skv = tensorOf(key).getDimSize(1);
  int64_t dv = tensorOf(value).getDimSize(3);
  double perPair = 2.0 * b * heads;
  double pairs = attendedPairs(s, skv, causal, window);
  if (positions) {
    // The n ranks of the sequence: S / s for gathered keys, else the ring's
    // length, the mesh's cp.
    int64_t ranks = skv / s;
    if (keyPositions) {
      auto module = op->getParentOfType<ModuleOp>();
      fsdp::dist::MeshOp mesh =
          module ? fsdp::dist::findMesh(module) : fsdp::dist::MeshOp();
      ranks = mesh ? mesh.getAxisSize("cp").value_or(1) : 1;
    }
    int64_t whole = s * ranks;
    pairs = (documents ? packedPairs(op, whole, window)
                       : attendedPairs(whole, whole, causal, window)) /
            static_cast<double>(keyPositions ? ranks * ranks : ranks);
  } else if (documents) {
    pairs = packedPairs(op, s, window);
  }
  double full = static_cast<double>(s) * skv;
  OpCost cost = streamingCost(op);
  cost.dtype = q.getElementType();
  if (!backward) {
    // Scores (D) and the weighted sum of values (Dv).
    cost.unit = CostUnit::AttentionForward;
    cost.flops = perPair * pairs * (d + dv);
    cost.modelFlops = perPair * full * (d + dv);
    return cost;
  }
  // Flash-style: the scores again (D), dV and dP (Dv each), dQ and dK (D
  // each). Model FLOPs count the backward as twice the forward.
  cost.unit = CostUnit::AttentionBackward;
  cost.flops = perPair * pairs * (3 * d + 2 * dv);
  cost.modelFlops = 2 * perPair * full * (d + dv);
  return cost;
}

OpCost AttentionOp::getCost() {
  return attentionCost(*this, getQuery(), getKey(), getValue(),
                       getQueryPositions(), getKeyPositions(),
                       getDocumentPositions(), getCausal(), getSlidingWindow(),
                       /*backward=*/false);
}

OpCost AttentionGradOp::getCost() {
  return attentionCost(*this, getQuery(), getKey(), getValue(), getPositions(),
                       getKeyPositions(), getDocumentPositions(), getCausal(),
                       getSlidingWindow(), /*backward=*/true);
}

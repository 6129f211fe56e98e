//===- AsyncTP.cpp - Collective matmuls as overlapped ring steps ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-async-tp`: a tensor-parallel all_gather feeding matmuls,
// and a reduce_scatter of matmul results, become tp ring steps of an async
// dist.permute that moves the next block while the rank multiplies the one
// it holds (Wang et al., ASPLOS'23; XLA's windowed einsum). It runs on the
// training step, so the backward's collectives decompose as the forward's.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace fsdp {
#define GEN_PASS_DEF_ASYNCTPPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

/// The matmul operand that holds rows: a linear's input, a matmul's lhs
/// unless transposed; null for anything else.
Value rowOperand(Operation *op) {
  if (auto linear = dyn_cast<nn::LinearOp>(op))
    return linear.getInput();
  if (auto matmul = dyn_cast<nn::MatmulOp>(op);
      matmul && !matmul.getTransposeA())
    return matmul.getLhs();
  return {};
}

class Decomposer {
public:
  /// Decomposes collectives of `step`.
  Decomposer(dist::MeshOp mesh, int64_t tp, func::FuncOp step)
      : mesh(mesh), tp(tp), step(step), b(step.getContext()) {}

  /// all_gather(x) along a row dim, read by matmuls as their rows: ring
  /// step i multiplies the block the rank holds, (rank + i) mod tp, while a
  /// permute brings the next; the partial products, in ring order, are
  /// rotated back to rank order. Other readers get the blocks, rotated the
  /// same way. Fails (changing nothing) when no matmul qualifies.
  LogicalResult gather(dist::AllGatherOp op);

  /// reduce_scatter(z) where z is computed row by row from matmuls (adds,
  /// subs and casts of them, each used once): step k computes the rows of
  /// block (rank - 1 - k) mod tp and adds them to the running sum that a
  /// permute brings from the previous rank, so the rank's own block arrives
  /// summed. Fails (changing nothing) when z is not such a tree.
  LogicalResult scatter(dist::ReduceScatterOp op);

  int64_t permutes = 0;

private:
  /// An async permute of `v` by `offset` and its wait, the wait placed by
  /// the caller (`wait` returns it at the builder's point).
  Value startPermute(Location loc, Value v, int64_t offset) {
    ++permutes;
    auto type = cast<RankedTensorType>(v.getType());
    return dist::PermuteOp::create(
               b, loc, dist::FutureType::get(b.getContext(), type), v,
               FlatSymbolRefAttr::get(b.getContext(), mesh.getSymName()),
               b.getStrArrayAttr({"tp"}), b.getI64IntegerAttr(offset))
        .getResult();
  }
  Value wait(Location loc, Value future) {
    auto type = cast<dist::FutureType>(future.getType()).getValueType();
    return dist::WaitOp::create(b, loc, type, future).getResult();
  }
  /// The ring's blocks `parts` (block i from rank (r + i) mod tp) joined
  /// along `dim` in rank order, in one copy.
  Value inRankOrder(Location loc, ArrayRef<Value> parts, int64_t dim) {
    int64_t block = nn::tensorOf(parts.front()).getDimSize(dim);
    return roll(loc, parts, dim, block, /*scale=*/1, /*offset=*/0);
  }
  /// nn.roll of the blocks of `inputs` joined along `dim`, by scale * rank
  /// + offset; with `count`, only the first `count` blocks of the rotation.
  Value roll(Location loc, ValueRange inputs, int64_t dim, int64_t block,
             int64_t scale, int64_t offset, int64_t count = 0) {
    return nn::RollOp::create(
               b, loc, inputs, rank(), b.getI64IntegerAttr(dim),
               b.getI64IntegerAttr(block), b.getI64IntegerAttr(scale),
               b.getI64IntegerAttr(offset),
               count ? b.getI64IntegerAttr(count) : IntegerAttr(), nullptr)
        .getResult();
  }

  /// The rank's index along tp: one dist.axis_index at the top of the
  /// step, made on first use.
  Value rank() {
    if (!rankIndex) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&step.getBody().front());
      rankIndex =
          dist::AxisIndexOp::create(
              b, step.getLoc(), RankedTensorType::get({}, b.getI64Type()),
              mesh.getSymName(), b.getStrArrayAttr({"tp"}))
              .getResult();
    }
    return rankIndex;
  }

  dist::MeshOp mesh;
  int64_t tp;
  func::FuncOp step;
  OpBuilder b;
  Value rankIndex;
};

LogicalResult Decomposer::gather(dist::AllGatherOp op) {
  int64_t dim = op.getGatherDim();
  Value gathered = op.getResult();
  auto type = nn::tensorOf(gathered);
  if (dim >= type.getRank() - 1)
    return failure();
  // The matmuls reading the gathered rows, in order; the first is where
  // the ring runs, so every operand of the others must exist there.
  SmallVector<Operation *> users;
  for (Operation *user : gathered.getUsers())
    if (rowOperand(user) == gathered && !llvm::is_contained(users, user))
      users.push_back(user);
  llvm::sort(users,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  if (users.empty())
    return failure();
  Operation *first = users.front();
  auto ready = [&](Operation *user) {
    return llvm::all_of(user->getOperands(), [&](Value v) {
      Operation *def = v.getDefiningOp();
      return v == gathered || !def || def->isBeforeInBlock(first);
    });
  };
  llvm::erase_if(users, [&](Operation *u) { return !ready(u); });
  Location loc = op.getLoc();
  b.setInsertionPoint(first);
  SmallVector<Value> blocks = {op.getInput()};
  SmallVector<SmallVector<Value>> partials(users.size());
  for (int64_t i = 0; i < tp; ++i) {
    // Receive from the next rank while multiplying the block held.
    Value next = i + 1 < tp ? startPermute(loc, blocks.back(), -1) : Value();
    for (auto [k, user] : llvm::enumerate(users)) {
      SmallVector<Value> operands(user->getOperands());
      operands[0] = blocks.back();
      Operation *part = nn::rebuildWithShapeRule(b, *user, operands, nullptr);
      partials[k].push_back(part->getResult(0));
    }
    if (next)
      blocks.push_back(wait(loc, next));
  }
  // Every product in rank order first: the builder stands before `first`.
  SmallVector<Value> products;
  for (auto [k, user] : llvm::enumerate(users))
    products.push_back(inRankOrder(loc, partials[k], dim));
  if (llvm::any_of(gathered.getUsers(), [&](Operation *user) {
        return !llvm::is_contained(users, user);
      }))
    gathered.replaceAllUsesWith(inRankOrder(loc, blocks, dim));
  for (auto [user, product] : llvm::zip(users, products)) {
    user->getResult(0).replaceAllUsesWith(product);
    user->erase();
  }
  op.erase();
  return success();
}

LogicalResult Decomposer::scatter(dist::ReduceScatterOp op) {
  if (op.getReduction() != dist::ReductionKind::sum)
    return failure();
  int64_t dim = op.getScatterDim();
  Value z = op.getInput();
  int64_t rank = nn::tensorOf(z).getRank();
  if (dim >= rank - 1)
    return failure();
  // The tree computing z row by row: its ops (each result read once, by
  // the tree or the reduce_scatter) and its leaves split along `dim`.
  llvm::SetVector<Operation *> tree;
  llvm::SetVector<Value> leaves;
  bool hasMatmul = false;
  SmallVector<Value> work = {z};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    bool rowwise =
        def && v.hasOneUse() && isa<nn::NNDialect>(def->getDialect());
    if (rowwise && rowOperand(def)) {
      hasMatmul = true;
      tree.insert(def);
      work.push_back(rowOperand(def));
    } else if (rowwise && isa<nn::AddOp, nn::SubOp, nn::CastOp>(def) &&
               llvm::all_of(def->getOperands(), [&](Value x) {
                 return nn::tensorOf(x).getShape() ==
                        nn::tensorOf(v).getShape();
               })) {
      tree.insert(def);
      for (Value x : def->getOperands())
        work.push_back(x);
    } else {
      leaves.insert(v);
    }
  }
  if (!hasMatmul)
    return failure();
  Location loc = op.getLoc();
  b.setInsertionPoint(op);
  SmallVector<Operation *> ordered(tree.begin(), tree.end());
  llvm::sort(ordered,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  // Step k's rows of each leaf: block (r - 1 - k) mod tp, the one block of
  // the leaf rotated by 1 + k - r.
  auto stepRows = [&](int64_t k) {
    IRMapping map;
    for (Value leaf : leaves)
      map.map(leaf,
              roll(loc, leaf, dim, nn::tensorOf(leaf).getDimSize(dim) / tp,
                   /*scale=*/-1, /*offset=*/1 + k, /*count=*/1));
    for (Operation *node : ordered) {
      SmallVector<Value> operands;
      for (Value x : node->getOperands())
        operands.push_back(map.lookupOrDefault(x));
      Operation *part = nn::rebuildWithShapeRule(b, *node, operands, nullptr);
      map.map(node->getResult(0), part->getResult(0));
    }
    return map.lookup(z);
  };
  Value sum = stepRows(0);
  for (int64_t k = 1; k < tp; ++k) {
    // Pass the running sum on while computing the next block's rows.
    Value arriving = startPermute(loc, sum, 1);
    Value rows = stepRows(k);
    sum = nn::AddOp::create(b, loc, wait(loc, arriving), rows, nullptr)
              .getResult();
  }
  op.getResult().replaceAllUsesWith(sum);
  op.erase();
  for (Operation *node : llvm::reverse(ordered))
    node->erase();
  return success();
}

struct AsyncTPPass : fsdp::impl::AsyncTPPassBase<AsyncTPPass> {
  using AsyncTPPassBase::AsyncTPPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    ParallelConfigAttr config = ParallelConfigAttr::of(module);
    bool on =
        enable == FromConfig::True || (enable == FromConfig::Config && config &&
                                       config.getAsyncTp().getValue());
    if (!on)
      return markAllAnalysesPreserved();
    func::FuncOp step = lookupEntry(module, entry, "decompose");
    if (!step)
      return signalPassFailure();
    int64_t tp;
    dist::MeshOp mesh = meshSplitting(module, "tp", tp);
    if (!mesh)
      return markAllAnalysesPreserved();
    Decomposer decomposer(mesh, tp, step);
    SmallVector<Operation *> collectives;
    for (Operation &op : step.getBody().front())
      if (auto c = dyn_cast<dist::CollectiveOpInterface>(op);
          c && !c.isAsync() && c.getMeshAxes().size() == 1 &&
          cast<StringAttr>(c.getMeshAxes()[0]).getValue() == "tp")
        collectives.push_back(&op);
    int64_t gathers = 0, scatters = 0, kept = 0;
    for (Operation *op : collectives) {
      if (auto gather = dyn_cast<dist::AllGatherOp>(op))
        succeeded(decomposer.gather(gather)) ? ++gathers : ++kept;
      else if (auto scatter = dyn_cast<dist::ReduceScatterOp>(op))
        succeeded(decomposer.scatter(scatter)) ? ++scatters : ++kept;
    }
    if (remark)
      emitRemark(step.getLoc())
          << "fsdp-async-tp: " << gathers << " all-gathers and " << scatters
          << " reduce-scatters over tp decomposed into " << decomposer.permutes
          << " async permutes overlapping their matmuls; " << kept
          << " left whole (no matmul reads or computes their rows)";
  }
};

} // namespace

//===- ExpertParallel.cpp - Experts spread over the ep ranks --------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// fsdp-expert-parallel: each sparse layer's expert weights keep the rank's
// experts, and the rows between nn.moe_permute and nn.moe_unpermute travel
// to those experts' ranks and back by dist.all_to_all_v (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace fsdp {
#define GEN_PASS_DEF_EXPERTPARALLELPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using nn::tensorOf;

namespace {

struct ExpertParallelPass
    : fsdp::impl::ExpertParallelPassBase<ExpertParallelPass> {
  using ExpertParallelPassBase::ExpertParallelPassBase;
  friend class ExpertSplitter;
  void runOnOperation() override;
};

/// One sparse layer: the permutation, the ops on its rows up to the
/// unpermutation (in block order), and the unpermutation.
struct Dispatch {
  nn::MoePermuteOp permute;
  SmallVector<Operation *> body;
  nn::MoeUnpermuteOp unpermute;
};

class ExpertSplitter {
public:
  ExpertSplitter(ExpertParallelPass &pass, func::FuncOp forward,
                 dist::MeshOp mesh, int64_t ep)
      : pass(pass), forward(forward), b(forward.getContext()), ep(ep),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        epAxes(b.getStrArrayAttr({"ep"})) {}

  LogicalResult run();

private:
  /// The ops between `permute`'s rows and their unpermutation.
  FailureOr<Dispatch> findDispatch(nn::MoePermuteOp permute);
  /// Checks an expert weight and records it to keep the rank's experts.
  LogicalResult claimWeight(nn::GroupedLinearOp op, int64_t experts);
  /// Rewrites one sparse layer around the all-to-alls.
  LogicalResult distribute(Dispatch &dispatch);
  /// The expert weights' new types and shardings.
  void splitWeights();

  ExpertParallelPass &pass;
  func::FuncOp forward;
  OpBuilder b;
  const int64_t ep;
  FlatSymbolRefAttr meshRef;
  ArrayAttr epAxes;
  llvm::SetVector<BlockArgument> weights;
};

FailureOr<Dispatch> ExpertSplitter::findDispatch(nn::MoePermuteOp permute) {
  Dispatch dispatch{permute, {}, nullptr};
  // Forward from the rows, in block order (the body is topologically
  // sorted): every op reading a value derived from them, up to the
  // unpermutation.
  llvm::SmallPtrSet<Value, 16> derived = {permute.getRows()};
  for (Operation *op = permute->getNextNode(); op; op = op->getNextNode()) {
    if (!llvm::any_of(op->getOperands(),
                      [&](Value v) { return derived.contains(v); }))
      continue;
    if (auto unpermute = dyn_cast<nn::MoeUnpermuteOp>(op)) {
      if (dispatch.unpermute || !derived.contains(unpermute.getRows()) ||
          unpermute.getIndices() != permute.getIndices())
        return permute.emitOpError("has rows that reach an nn.moe_unpermute "
                                   "of other routing or more than one");
      dispatch.unpermute = unpermute;
      continue;
    }
    if (isa<func::ReturnOp>(op) ||
        !op->getName().hasInterface<nn::ShapeRuleOpInterface>())
      return op->emitOpError("reads a sparse layer's expert-ordered rows, "
                             "which expert parallelism cannot follow");
    dispatch.body.push_back(op);
    for (Value result : op->getResults())
      derived.insert(result);
  }
  if (!dispatch.unpermute)
    return permute.emitOpError("has rows that never reach an nn.moe_unpermute");
  return dispatch;
}

LogicalResult ExpertSplitter::claimWeight(nn::GroupedLinearOp op,
                                          int64_t experts) {
  // Under sequence parallelism the weight enters the rank's tokens' products
  // through a dist.copy over tp (its gradient sums the ranks').
  Value weight = op.getWeight();
  if (auto copy = weight.getDefiningOp<dist::CopyOp>())
    weight = copy.getInput();
  auto arg = dyn_cast<BlockArgument>(weight);
  auto name = arg ? forward.getArgAttrOfType<StringAttr>(
                        arg.getArgNumber(), nn::NNDialect::kParamAttrName)
                  : StringAttr();
  if (!name)
    return op.emitOpError("has an expert weight that is not a parameter; "
                          "expert parallelism splits parameters");
  int64_t e = tensorOf(arg).getDimSize(0);
  if (e != experts)
    return op.emitOpError("has ") << e << " experts in '" << name.getValue()
                                  << "' but routes to " << experts;
  if (e % ep != 0)
    return op.emitOpError("expert parameter '")
           << name.getValue() << "' has " << e
           << " experts, not divisible by ep_size " << ep;
  if (forward.getArgAttr(arg.getArgNumber(), "dist.sharding"))
    return op.emitOpError("expert parameter '")
           << name.getValue()
           << "' is already split (tensor parallelism); expert parallelism "
              "needs the whole experts";
  auto isProductWeight = [](OpOperand &use) {
    return isa<nn::GroupedLinearOp>(use.getOwner()) &&
           use.getOperandNumber() == 2;
  };
  for (OpOperand &use : arg.getUses())
    if (!isProductWeight(use) &&
        !(isa<dist::CopyOp>(use.getOwner()) &&
          llvm::all_of(use.getOwner()->getResult(0).getUses(),
                       isProductWeight)))
      return use.getOwner()->emitOpError("reads expert parameter '")
             << name.getValue()
             << "' other than as a grouped product's weight; expert "
                "parallelism keeps only the rank's experts";
  weights.insert(arg);
  return success();
}

LogicalResult ExpertSplitter::distribute(Dispatch &dispatch) {
  nn::MoePermuteOp permute = dispatch.permute;
  int64_t experts = static_cast<int64_t>(permute.getNumExperts());
  // The exchange: counts per (source, my expert), rows per rank each way.
  Location loc = permute.getLoc();
  b.setInsertionPointAfter(permute);
  Value counts = permute.getCounts();
  Value segments = dist::AllToAllOp::create(
                       b, loc, counts.getType(), counts, meshRef, epAxes,
                       b.getI64IntegerAttr(0), b.getI64IntegerAttr(0))
                       .getResult();
  Value send = nn::MoeRankCountsOp::create(b, loc, counts, ep, StringAttr());
  Value recv = nn::MoeRankCountsOp::create(b, loc, segments, ep, StringAttr());
  RankedTensorType rows = tensorOf(permute.getRows());
  int64_t slots = rows.getDimSize(0);
  int64_t topK = tensorOf(permute.getIndices()).getShape().back();
  int64_t tokens = topK ? slots / topK : 0;
  int64_t bound = ep * tokens * std::min(topK, experts / ep);
  auto received =
      RankedTensorType::get({bound, rows.getDimSize(1)}, rows.getElementType());
  auto in = dist::AllToAllVOp::create(b, loc, received, permute.getRows(),
                                      meshRef, epAxes, send, recv);
  in->setAttr("fsdp.expert_parallel", b.getUnitAttr());

  IRMapping map;
  map.map(permute.getRows(), in.getResult());
  map.map(counts, segments);
  for (Operation *op : dispatch.body) {
    b.setInsertionPoint(op);
    SmallVector<Value> operands = llvm::map_to_vector(
        op->getOperands(), [&](Value v) { return map.lookupOrDefault(v); });
    NamedAttrList attrs(op->getAttrDictionary());
    if (isa<nn::GroupedLinearOp>(op))
      attrs.set("active_share",
                b.getF64FloatAttr(double(slots) /
                                  double(std::max<int64_t>(bound, 1))));
    if (failed(rebuildOnRanks(b, *op, operands,
                              attrs.getDictionary(b.getContext()), map,
                              "expert-parallel")))
      return failure();
  }
  nn::MoeUnpermuteOp unpermute = dispatch.unpermute;
  b.setInsertionPoint(unpermute);
  auto back = dist::AllToAllVOp::create(b, unpermute.getLoc(), rows,
                                        map.lookup(unpermute.getRows()),
                                        meshRef, epAxes, recv, send);
  back->setAttr("fsdp.expert_parallel", b.getUnitAttr());
  unpermute.getRowsMutable().assign(back.getResult());
  for (Operation *op : llvm::reverse(dispatch.body))
    op->erase();
  ++pass.numDispatches;
  return success();
}

void ExpertSplitter::splitWeights() {
  MLIRContext *context = b.getContext();
  for (BlockArgument arg : weights) {
    RankedTensorType type = tensorOf(arg);
    SmallVector<int64_t> shape(type.getShape());
    shape[0] /= ep;
    auto local = RankedTensorType::get(shape, type.getElementType());
    arg.setType(local);
    for (Operation *user : arg.getUsers())
      if (isa<dist::CopyOp>(user))
        user->getResult(0).setType(local);
    SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
    dims[0] = epAxes;
    forward.setArgAttr(arg.getArgNumber(), "dist.sharding",
                       dist::ShardingAttr::get(
                           context, meshRef, b.getArrayAttr(dims),
                           b.getArrayAttr({}), b.getDenseI64ArrayAttr({})));
  }
  forward.setFunctionType(
      b.getFunctionType(forward.getBody().getArgumentTypes(),
                        forward.getFunctionType().getResults()));
}

LogicalResult ExpertSplitter::run() {
  SmallVector<nn::MoePermuteOp> permutes;
  forward.walk([&](nn::MoePermuteOp op) { permutes.push_back(op); });
  if (permutes.empty())
    return forward.emitOpError("has no sparse layer (nn.moe_permute) for "
                               "ep_size ")
           << ep << " to distribute";
  SmallVector<Dispatch> dispatches;
  for (nn::MoePermuteOp permute : permutes) {
    FailureOr<Dispatch> dispatch = findDispatch(permute);
    if (failed(dispatch))
      return failure();
    dispatches.push_back(*dispatch);
  }
  // The weights shrink first: the rebuilt products infer their shapes from
  // the rank's experts.
  for (Dispatch &dispatch : dispatches)
    for (Operation *op : dispatch.body) {
      auto grouped = dyn_cast<nn::GroupedLinearOp>(op);
      if (!grouped)
        continue;
      if (grouped.getCounts() != dispatch.permute.getCounts())
        return grouped.emitOpError("groups rows by counts other than its "
                                   "nn.moe_permute's");
      if (failed(claimWeight(
              grouped, static_cast<int64_t>(dispatch.permute.getNumExperts()))))
        return failure();
    }
  splitWeights();
  for (Dispatch &dispatch : dispatches)
    if (failed(distribute(dispatch)))
      return failure();
  return success();
}

void ExpertParallelPass::runOnOperation() {
  int64_t ep;
  dist::MeshOp mesh = meshSplitting(getOperation(), "ep", ep);
  if (!mesh)
    return; // No expert parallelism.
  func::FuncOp forward = lookupEntry(getOperation(), entry, "split over ep");
  if (!forward || failed(ExpertSplitter(*this, forward, mesh, ep).run()))
    signalPassFailure();
}

} // namespace

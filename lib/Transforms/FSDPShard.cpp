//===- FSDPShard.cpp - FSDP2 parameter sharding and data parallelism ------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-shard`: the data-parallel half of FSDP2 on the per-rank
// forward. The batch is split over the data-parallel axes; every parameter
// keeps only its dim-0 block over `dp_shard` (after any tensor-parallel
// split); the parameters of a unit (a decoder layer, or the root) are
// gathered by one bucketed all_gather before their first use. Autodiff turns
// that gather into one bucketed reduce_scatter of the unit's gradients, and
// with HSDP the dist.copy over `dp_replicate` before it into the all-reduce
// across replicas.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "TPAnnotation.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

namespace fsdp {
#define GEN_PASS_DEF_FSDPSHARDPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using nn::tensorOf;

namespace {

struct Unit {
  std::string name;
  SmallVector<unsigned> params; // argument numbers
  Operation *firstUse = nullptr;
  bool reshard = false;
};

struct FSDPShardPass : fsdp::impl::FSDPShardPassBase<FSDPShardPass> {
  using FSDPShardPassBase::FSDPShardPassBase;
  friend class Sharder;
  void runOnOperation() override;
};

/// Shards one forward function over the data-parallel mesh axes, a step
/// per method.
class Sharder {
public:
  Sharder(FSDPShardPass &pass, func::FuncOp forward, dist::MeshOp mesh)
      : pass(pass), forward(forward), mesh(mesh), context(forward.getContext()),
        b(context), cp(mesh.getAxisSize("cp").value_or(1)),
        shards(mesh.getAxisSize("dp_shard").value_or(1) * cp),
        replicas(mesh.getAxisSize("dp_replicate").value_or(1)),
        ranks(shards / cp * replicas),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        shardAxes(cp > 1 ? b.getStrArrayAttr({"dp_shard", "cp"})
                         : b.getStrArrayAttr({"dp_shard"})),
        expertShards(mesh.getAxisSize("ep_shard").value_or(1) * cp),
        expertAxes(cp > 1 ? b.getStrArrayAttr({"ep_shard", "cp"})
                          : b.getStrArrayAttr({"ep_shard"})),
        replicaAxes(b.getStrArrayAttr({"dp_replicate"})),
        dataAxes(b.getStrArrayAttr({"dp_replicate", "dp_shard"})),
        body(forward.getBody().front()) {}

  LogicalResult run();

private:
  /// The units, in order of first use, and which reshard after forward.
  void collectUnits();
  /// The batch and parameter blocks' types and attributes.
  LogicalResult shardArguments();
  /// Gathers `unit` before its first use and unpacks its parameters: one
  /// gather of its dense parameters' blocks, one of its experts'.
  void unpack(Unit &unit, Location loc);
  /// Gathers `params` (of `unit`) over `axes` (`shards` ranks).
  void unpackGroup(Unit &unit, ArrayRef<unsigned> params, ArrayAttr axes,
                   int64_t shards, Location loc);
  /// Whether argument `arg` holds the rank's experts (fsdp-expert-parallel:
  /// split over ep), which FSDP shards over ep_shard (× cp) only.
  bool isExperts(unsigned arg);
  /// The sharded function's body.
  LogicalResult rewriteBody();
  /// The outputs' shardings; replaces the forward.
  void finish();

  FSDPShardPass &pass;
  func::FuncOp forward;
  dist::MeshOp mesh;
  MLIRContext *context;
  OpBuilder b;
  /// Context-parallel ranks shard parameters too (Automodel's
  /// dp_shard_cp); the batch splits over the data-parallel ones.
  const int64_t cp, shards, replicas, ranks;
  FlatSymbolRefAttr meshRef;
  ArrayAttr shardAxes;
  /// Expert parameters' FSDP shards and axes.
  const int64_t expertShards;
  ArrayAttr expertAxes, replicaAxes, dataAxes;
  Block &body;

  llvm::MapVector<StringRef, Unit> units;
  DenseMap<unsigned, int64_t> padded; // argument -> its unpadded dim 0
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  std::optional<RebuiltFunction> sharded;
  Block *entry = nullptr;
  IRMapping map;
};

LogicalResult Sharder::run() {
  collectUnits();
  if (failed(shardArguments()) || failed(rewriteBody()))
    return failure();
  finish();
  return success();
}

void Sharder::collectUnits() {
  // Units, in order of first use.
  std::vector<std::string> unitNames(forward.getNumArguments());
  for (Operation &op : body)
    for (Value operand : op.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner() != &body)
        continue;
      auto name = forward.getArgAttrOfType<StringAttr>(
          arg.getArgNumber(), nn::NNDialect::kParamAttrName);
      if (!name)
        continue;
      std::string &unitName = unitNames[arg.getArgNumber()];
      if (unitName.empty()) {
        unitName = decoderLayerOf(name.getValue());
        // A trainable vocabulary table that is not tied (one user: the
        // embedding or the head) may get its own unit, so the root's
        // buffers do not hold both tables at once.
        if (pass.vocabUnits && unitName.empty() && arg.hasOneUse() &&
            tensorOf(arg).getRank() == 2 &&
            (isa<nn::EmbeddingOp>(op) ||
             (isa<nn::LinearOp>(op) &&
              llvm::any_of(op.getResult(0).getUsers(), [](Operation *user) {
                return isa<nn::CrossEntropyOp>(user);
              }))))
          unitName = name.getValue().str();
      }
      auto [it, inserted] = units.try_emplace(
          StringAttr::get(context, unitName).getValue(), Unit{unitName});
      if (inserted)
        it->second.firstUse = &op;
      if (!llvm::is_contained(it->second.params, arg.getArgNumber()))
        it->second.params.push_back(arg.getArgNumber());
    }

  // reshard_after_forward: None reshards every layer but the last, true
  // every layer, false none; the root never does (its gathered parameters
  // are the first the backward needs).
  SmallVector<Unit *> layers;
  for (auto &[name, unit] : units)
    if (!unit.name.empty() && !decoderLayerOf(unit.name).empty())
      layers.push_back(&unit);
  for (auto [i, unit] : llvm::enumerate(layers))
    unit->reshard =
        pass.reshardAfterForward == Reshard::True ||
        (pass.reshardAfterForward == Reshard::None && i + 1 < layers.size());
}

LogicalResult Sharder::shardArguments() {
  // New argument types: the batch and parameter blocks.
  for (BlockArgument arg : forward.getArguments()) {
    unsigned i = arg.getArgNumber();
    RankedTensorType type = tensorOf(arg);
    NamedAttrList attrs(forward.getArgAttrDict(i));
    bool input = bool(forward.getArgAttr(i, nn::NNDialect::kInputAttrName));
    bool param = bool(forward.getArgAttr(i, nn::NNDialect::kParamAttrName));
    bool experts = param && isExperts(i);
    int64_t parts = input ? ranks : experts ? expertShards : param ? shards : 1;
    if (parts > 1) {
      // An uneven dim 0 is padded to the next multiple, as FSDP2 does: the
      // last blocks end in zero rows that the unpacking slices off.
      int64_t rows = type.getRank() ? type.getDimSize(0) : 0;
      if (param && rows % parts != 0) {
        // Inside a tensor-parallel block the padding ends that block, as
        // FSDP2 pads the local tensor it is given: the runtime learns the
        // whole tensor's shape here and which axes are FSDP's from
        // fsdp.inner_axes.
        padded[i] = rows;
        SmallVector<int64_t> whole(type.getShape());
        if (auto old = attrs.get("dist.sharding"))
          for (int64_t d = 0; d < type.getRank(); ++d)
            for (StringRef axis : cast<dist::ShardingAttr>(old).getDimAxes(d))
              whole[d] *= mesh.getAxisSize(axis).value_or(1);
        // A vocabulary padded for tp already states its real size.
        if (!attrs.get("fsdp.global_shape"))
          attrs.set("fsdp.global_shape", b.getDenseI64ArrayAttr(whole));
        SmallVector<int64_t> shape(type.getShape());
        shape[0] = (rows + parts - 1) / parts * parts;
        type = RankedTensorType::get(shape, type.getElementType());
      }
      if (type.getRank() == 0 || type.getDimSize(0) % parts != 0)
        return forward.emitOpError(input ? "input" : "parameter")
               << " '"
               << forward.getArgAttr(i, input ? nn::NNDialect::kInputAttrName
                                              : nn::NNDialect::kParamAttrName)
               << "' " << type << " dim 0 does not divide by " << parts
               << (input ? " data-parallel ranks" : " FSDP shards");
      SmallVector<int64_t> shape(type.getShape());
      shape[0] /= parts;
      // The block sits inside any tensor-parallel block of dim 0.
      SmallVector<Attribute> dims(type.getRank(), b.getArrayAttr({}));
      ArrayAttr partial = b.getArrayAttr({});
      DenseI64ArrayAttr groups = b.getDenseI64ArrayAttr({});
      if (auto old = attrs.get("dist.sharding")) {
        auto sharding = cast<dist::ShardingAttr>(old);
        dims = llvm::to_vector(sharding.getDims());
        groups = sharding.getGroups();
      }
      SmallVector<Attribute> dim0 =
          llvm::to_vector(cast<ArrayAttr>(dims[0]).getValue());
      ArrayAttr added = input ? dataAxes : experts ? expertAxes : shardAxes;
      for (Attribute axis : added)
        dim0.push_back(axis);
      // FSDP's axes split the tensor-parallel block (strided groups and all)
      // as the local tensor it is, padded at its end: a second level, which
      // the runtime places apart from the first.
      if (param) {
        SmallVector<int64_t> inner(type.getRank(), 0);
        // Counted in mesh axes: a view (dp_shard = [ep_shard, ep] under
        // expert parallelism) stands for several.
        for (Attribute axis : added)
          inner[0] += int64_t(
              mesh.expandAxis(cast<StringAttr>(axis).getValue()).size());
        attrs.set("fsdp.inner_axes", b.getDenseI64ArrayAttr(inner));
      }
      dims[0] = b.getArrayAttr(dim0);
      attrs.set("dist.sharding",
                dist::ShardingAttr::get(context, meshRef, b.getArrayAttr(dims),
                                        partial, groups));
      type = RankedTensorType::get(shape, type.getElementType());
    }
    argTypes.push_back(type);
    argAttrs.push_back(attrs.getDictionary(context));
  }

  return success();
}

// One bucketed gather per unit, before its first use: the blocks
// flattened side by side ([1, L]), gathered over dp_shard ([S, L]), split
// per parameter and reshaped: row r of a parameter's [S, n] part is shard
// r, so [S, n] is the parameter row-major.
bool Sharder::isExperts(unsigned arg) {
  auto sharding =
      forward.getArgAttrOfType<dist::ShardingAttr>(arg, "dist.sharding");
  return sharding && !sharding.getDims().empty() &&
         llvm::any_of(sharding.getDimAxes(0),
                      [](StringRef axis) { return axis == "ep"; });
}

void Sharder::unpack(Unit &unit, Location loc) {
  SmallVector<unsigned> dense, experts;
  for (unsigned arg : unit.params)
    (isExperts(arg) ? experts : dense).push_back(arg);
  if (!dense.empty())
    unpackGroup(unit, dense, shardAxes, shards, loc);
  if (experts.empty())
    return;
  if (expertShards > 1) {
    unpackGroup(unit, experts, expertAxes, expertShards, loc);
    return;
  }
  // ep spans every shard rank: the rank's experts are whole, replicated
  // only over HSDP's replicas (whose gradients the copy's sums).
  for (unsigned arg : experts) {
    Value whole = entry->getArgument(arg);
    if (replicas > 1)
      whole = dist::CopyOp::create(b, loc, whole.getType(), whole, meshRef,
                                   replicaAxes)
                  .getResult();
    map.map(forward.getArgument(arg), whole);
  }
}

void Sharder::unpackGroup(Unit &unit, ArrayRef<unsigned> params, ArrayAttr axes,
                          int64_t shards, Location loc) {
  SmallVector<Value> flat;
  SmallVector<int64_t> sizes;
  for (unsigned arg : params) {
    Value block = entry->getArgument(arg);
    int64_t n = tensorOf(block).getNumElements();
    flat.push_back(nn::ReshapeOp::create(b, loc, block, ArrayRef<int64_t>{1, n},
                                         StringAttr()));
    sizes.push_back(n);
  }
  Value bucket = flat.front();
  if (flat.size() > 1)
    bucket = nn::ConcatOp::create(b, loc, flat, 1, StringAttr());
  if (replicas > 1)
    bucket = dist::CopyOp::create(b, loc, bucket.getType(), bucket, meshRef,
                                  replicaAxes)
                 .getResult();
  RankedTensorType type = tensorOf(bucket);
  auto gathered = RankedTensorType::get({shards, type.getDimSize(1)},
                                        type.getElementType());
  auto gather = dist::AllGatherOp::create(b, loc, gathered, bucket, meshRef,
                                          axes, b.getI64IntegerAttr(0));
  gather->setAttr("fsdp.unit",
                  b.getStringAttr(unit.name.empty() ? "<root>" : unit.name));
  if (unit.reshard)
    gather->setAttr("fsdp.reshard", b.getUnitAttr());
  SmallVector<Value> parts = {gather.getResult()};
  if (sizes.size() > 1)
    parts = SmallVector<Value>(
        nn::SplitOp::create(b, loc, gather.getResult(), 1, sizes, StringAttr())
            ->getResults());
  for (auto [arg, part] : llvm::zip(params, parts)) {
    Value old = forward.getArgument(arg);
    SmallVector<int64_t> shape(tensorOf(old).getShape());
    auto pad = padded.find(arg);
    if (pad != padded.end())
      shape[0] = tensorOf(entry->getArgument(arg)).getDimSize(0) * shards;
    Value full = nn::ReshapeOp::create(b, loc, part, shape, StringAttr());
    if (pad != padded.end())
      full = nn::SliceOp::create(b, loc, full, 0, 0, pad->second, StringAttr());
    map.map(old, full);
  }
}

LogicalResult Sharder::rewriteBody() {
  sharded.emplace(b, forward, argTypes);
  entry = sharded->entry();
  for (auto [old, now] :
       llvm::zip(forward.getArguments(), entry->getArguments()))
    if (!forward.getArgAttr(old.getArgNumber(), nn::NNDialect::kParamAttrName))
      map.map(old, now);

  pass.numUnits += units.size();
  for (Operation &op : body.without_terminator()) {
    for (auto &[name, unit] : units)
      if (unit.firstUse == &op)
        unpack(unit, op.getLoc());
    SmallVector<Value> operands = llvm::map_to_vector(
        op.getOperands(), [&](Value v) { return map.lookup(v); });
    NamedAttrList attrs(op.getAttrDictionary());
    if (auto reshape = dyn_cast<nn::ReshapeOp>(op);
        reshape && tensorOf(operands[0]).getShape() !=
                       reshape.getInput().getType().getShape()) {
      // The batch is split: the leading dim of the target shrinks with it.
      SmallVector<int64_t> shape(reshape.getShape());
      if (shape.empty() || shape[0] % ranks != 0) {
        return reshape.emitOpError("reshapes the batch dim in a way the "
                                   "data-parallel split cannot follow");
      }
      shape[0] /= ranks;
      attrs.set("shape", b.getDenseI64ArrayAttr(shape));
    }
    if (isa<dist::DistDialect>(op.getDialect())) {
      // Tensor-parallel ops keep their shapes but the batch dim, which none
      // of them touches.
      for (StringRef dim : {"gather_dim", "scatter_dim", "slice_dim"})
        if (auto attr = op.getAttrOfType<IntegerAttr>(dim);
            attr && attr.getInt() == 0) {
          return op.emitOpError("works on dim 0, which the data-parallel "
                                "split also splits");
        }
      if (failed(followOperandSplit(&op, b.clone(op, map))))
        return failure();
      continue;
    }
    if (failed(rebuildOnRanks(b, op, operands, attrs.getDictionary(context),
                              map, "data-parallel")))
      return failure();
  }
  return success();
}

void Sharder::finish() {
  Operation *ret = body.getTerminator();
  SmallVector<Value> results = sharded->results(map);
  // Outputs with a batch dim are now this rank's samples.
  auto resultAttrs =
      sharded->resultAttrs([&](unsigned i, NamedAttrList &attrs) {
        RankedTensorType now = tensorOf(results[i]);
        if (now.getRank() > 0 &&
            now.getDimSize(0) != tensorOf(ret->getOperand(i)).getDimSize(0)) {
          SmallVector<Attribute> dims(now.getRank(), b.getArrayAttr({}));
          DenseI64ArrayAttr groups = b.getDenseI64ArrayAttr({});
          if (auto old = attrs.get("dist.sharding")) {
            dims = llvm::to_vector(cast<dist::ShardingAttr>(old).getDims());
            groups = cast<dist::ShardingAttr>(old).getGroups();
          }
          dims[0] = dataAxes;
          attrs.set("dist.sharding", dist::ShardingAttr::get(
                                         context, meshRef, b.getArrayAttr(dims),
                                         b.getArrayAttr({}), groups));
        }
      });
  sharded->replace(ret->getLoc(), results, argAttrs, resultAttrs);
  // The loss counts the tokens of every data-parallel and context-parallel
  // rank.
  pass.getOperation()->setAttr(
      "fsdp.data_parallel",
      cp > 1 ? b.getStrArrayAttr({"dp_replicate", "dp_shard", "cp"})
             : dataAxes);
}

void FSDPShardPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp forward = lookupEntry(module, entry, "shard");
  if (!forward)
    return signalPassFailure();
  if (reshardAfterForward == Reshard::Config) {
    // The parallel config's, else FSDP2's default (every layer but the
    // last).
    ParallelConfigAttr config = ParallelConfigAttr::of(module);
    ReshardPolicy policy =
        config ? config.getReshardAfterForward() : ReshardPolicy::AllButLast;
    reshardAfterForward = policy == ReshardPolicy::Always  ? Reshard::True
                          : policy == ReshardPolicy::Never ? Reshard::False
                                                           : Reshard::None;
  }
  dist::MeshOp mesh = dist::findMesh(module);
  if (!mesh || mesh.getAxisSize("dp_shard").value_or(1) *
                       mesh.getAxisSize("dp_replicate").value_or(1) *
                       mesh.getAxisSize("cp").value_or(1) ==
                   1)
    return; // One data-parallel rank: nothing to shard.
  if (failed(Sharder(*this, forward, mesh).run()))
    signalPassFailure();
}

} // namespace

//===- ContextParallel.cpp - The sequence split over the cp mesh axis ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-context-parallel` on the per-rank forward (after
// `fsdp-partition`, before `fsdp-shard`). With `cp > 1` ranks of the `cp`
// axis hold the sequence in 2·cp chunks, rank r chunks r and 2·cp−1−r
// (load-balanced for causal masks); the token inputs and every value along
// the sequence shrink to the rank's 2 chunks, whose global positions the
// runtime writes in `position_ids`. Each attention either goes round a
// ring (p2p: cp steps, each attending to another rank's block of keys,
// values and their positions, combined by log-sum-exp), or gathers its
// keys and values over `cp` once and puts the chunks back in sequence
// order (all_gather). Autodiff runs either backwards: dK and dV return to
// the ranks that own them; the training step passes the ring's blocks round
// again before each layer's backward instead of keeping them (Remat.cpp).
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace fsdp {
#define GEN_PASS_DEF_CONTEXTPARALLELPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using nn::tensorOf;

namespace {

/// The input that holds, for packed rows, each token's index in its row
/// (position_ids hold its position in its document).
constexpr llvm::StringLiteral kTokenIndex = "token_index";
/// The fewest tokens of a packed row's load-balanced chunk.
constexpr int64_t kMinChunk = 64;

struct ContextParallelPass
    : fsdp::impl::ContextParallelPassBase<ContextParallelPass> {
  using ContextParallelPassBase::ContextParallelPassBase;
  friend class SequenceSplitter;
  void runOnOperation() override;
};

/// The dim of `to` that holds `from`'s dim `dim` whole, with whole dims
/// before and after it (`[B, S, H]` to `[B, S, N, D]` or `[B·S, H]`), so
/// that shrinking `dim` shrinks it by the same factor; -1 when none does.
int64_t reshapedDim(ArrayRef<int64_t> from, ArrayRef<int64_t> to, int64_t dim) {
  int64_t before = 1;
  for (int64_t d = 0; d < dim; ++d)
    before *= from[d];
  int64_t product = 1;
  for (size_t j = 0; j < to.size() && product <= before; ++j) {
    int64_t through = product * to[j];
    if (before % product == 0 && through >= before * from[dim] &&
        through % (before * from[dim]) == 0)
      return static_cast<int64_t>(j);
    product = through;
  }
  return -1;
}

/// Splits one forward function's sequence over `cp`.
class SequenceSplitter {
public:
  SequenceSplitter(ContextParallelPass &pass, func::FuncOp forward,
                   dist::MeshOp mesh, int64_t cp, CpCommType commType)
      : pass(pass), forward(forward), context(forward.getContext()), b(context),
        cp(cp), commType(commType),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        cpAxes(b.getStrArrayAttr({"cp"})), body(forward.getBody().front()) {}

  LogicalResult run();

private:
  /// The token inputs' per-rank types; the positions input.
  LogicalResult splitArguments();
  /// The rebuilt body on the rank's chunks.
  LogicalResult rewriteBody();
  /// An op whose results keep their dims but the sequence's.
  LogicalResult rebuild(Operation &op);
  /// Keys or values of this rank's chunks → the whole sequence's, in order.
  Value gatherSequence(Value local, Location loc, StringAttr path);
  /// `attention`'s attrs on these operands.
  nn::AttentionOp attentionOver(nn::AttentionOp attention, Value query,
                                Value key, Value value, Value positions,
                                Value keyPositions);
  /// all_gather: one attention over the gathered keys in sequence order.
  ValueRange gatheredAttention(nn::AttentionOp attention, Value positions);
  /// p2p: cp attentions over the blocks coming round the ring, combined.
  ValueRange ringAttention(nn::AttentionOp attention, Value positions);
  /// The load-balanced split of a sequence dim.
  dist::ShardingAttr sequenceSharding(int64_t rank, int64_t dim, Attribute old);
  void finish();

  ContextParallelPass &pass;
  func::FuncOp forward;
  MLIRContext *context;
  OpBuilder b;
  const int64_t cp;
  const CpCommType commType;
  FlatSymbolRefAttr meshRef;
  ArrayAttr cpAxes;
  Block &body;

  int64_t sequence = 0; // the whole sequence's length
  int64_t rounds = 1;   // of 2·cp chunks each
  int positionsArg = -1;
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  std::optional<RebuiltFunction> split;
  IRMapping map;
  DenseMap<Value, Value> gathered;  // a rank's keys → the whole sequence's
  SmallVector<Value> ringPositions; // per ring step, its block's positions
};

LogicalResult SequenceSplitter::run() {
  if (failed(splitArguments()) || failed(rewriteBody()))
    return failure();
  finish();
  return success();
}

dist::ShardingAttr SequenceSplitter::sequenceSharding(int64_t rank, int64_t dim,
                                                      Attribute old) {
  SmallVector<Attribute> dims(rank, b.getArrayAttr({}));
  SmallVector<int64_t> groups(rank, 1);
  ArrayAttr partial = b.getArrayAttr({});
  if (auto sharding = dyn_cast_or_null<dist::ShardingAttr>(old)) {
    dims = llvm::to_vector(sharding.getDims());
    for (int64_t d = 0; d < rank; ++d)
      groups[d] = sharding.getDimGroups(d);
    partial = sharding.getPartial();
  }
  SmallVector<Attribute> axes =
      llvm::to_vector(cast<ArrayAttr>(dims[dim]).getValue());
  axes.insert(axes.begin(), cpAxes.getValue().front());
  dims[dim] = b.getArrayAttr(axes);
  groups[dim] = dist::ShardingAttr::kLoadBalanced * rounds;
  return dist::ShardingAttr::get(context, meshRef, b.getArrayAttr(dims),
                                 partial, b.getDenseI64ArrayAttr(groups));
}

LogicalResult SequenceSplitter::splitArguments() {
  // Packed rows: position_ids restart at each document, so the masks read
  // the tokens' indices in the row from an input of their own, which the
  // data loader fills as it fills position_ids for unpacked rows.
  bool packed = false;
  forward.walk(
      [&](nn::AttentionOp attention) { packed |= attention.getPacked(); });
  // The rounds, from a token input's length (the loop below checks that
  // they all agree).
  int64_t whole = 0;
  for (BlockArgument arg : forward.getArguments())
    if (forward.getArgAttr(arg.getArgNumber(), nn::NNDialect::kInputAttrName) &&
        tensorOf(arg).getRank() == 2)
      whole = tensorOf(arg).getDimSize(1);
  if (pass.rounds > 0) {
    rounds = pass.rounds;
  } else if (packed) {
    // Chunks of 64 tokens or more: a kernel's query block stays in one.
    while (whole % (2 * cp * rounds * 2) == 0 &&
           whole / (2 * cp * rounds * 2) >= kMinChunk)
      rounds *= 2;
  }
  if (rounds > 1 && whole % (2 * cp * rounds) != 0)
    return forward.emitOpError("the sequence length ")
           << whole
           << " is not divisible by 2 x cp_size x rounds = " << 2 * cp * rounds;
  for (BlockArgument arg : forward.getArguments()) {
    unsigned i = arg.getArgNumber();
    RankedTensorType type = tensorOf(arg);
    NamedAttrList attrs(forward.getArgAttrDict(i));
    auto input =
        forward.getArgAttrOfType<StringAttr>(i, nn::NNDialect::kInputAttrName);
    if (input) {
      if (type.getRank() != 2)
        return forward.emitOpError("input '")
               << input.getValue() << "' " << type
               << " is not a [B, S] token tensor; context parallelism splits "
                  "only those";
      if (sequence && type.getDimSize(1) != sequence)
        return forward.emitOpError("input '")
               << input.getValue() << "' has " << type.getDimSize(1)
               << " positions, another input " << sequence;
      sequence = type.getDimSize(1);
      if (sequence % (2 * cp) != 0)
        return forward.emitOpError("the sequence length ")
               << sequence << " is not divisible by 2 x cp_size = " << 2 * cp
               << " (context parallelism's load-balanced chunks)";
      if (input.getValue() == kTokenIndex)
        return forward.emitOpError("input '")
               << kTokenIndex << "' is context parallelism's own";
      if (input.getValue() == "position_ids") {
        if (!type.getElementType().isInteger(64))
          return forward.emitOpError("input 'position_ids' is ")
                 << type << "; context-parallel attention needs i64";
        positionsArg = static_cast<int>(i);
      }
      type = RankedTensorType::get({type.getDimSize(0), sequence / cp},
                                   type.getElementType());
      attrs.set("dist.sharding",
                sequenceSharding(2, 1, attrs.get("dist.sharding")));
    }
    argTypes.push_back(type);
    argAttrs.push_back(attrs.getDictionary(context));
  }
  if (!sequence)
    return forward.emitOpError("has no [B, S] token input for context "
                               "parallelism to split");
  if (packed) {
    int64_t batch = tensorOf(forward.getArgument(0)).getDimSize(0);
    for (BlockArgument arg : forward.getArguments())
      if (forward.getArgAttr(arg.getArgNumber(), nn::NNDialect::kInputAttrName))
        batch = tensorOf(arg).getDimSize(0);
    positionsArg = static_cast<int>(argTypes.size());
    argTypes.push_back(
        RankedTensorType::get({batch, sequence / cp}, b.getI64Type()));
    NamedAttrList attrs;
    attrs.set(nn::NNDialect::kInputAttrName, b.getStringAttr(kTokenIndex));
    attrs.set("dist.sharding", sequenceSharding(2, 1, Attribute()));
    argAttrs.push_back(attrs.getDictionary(context));
  }
  return success();
}

Value SequenceSplitter::gatherSequence(Value local, Location loc,
                                       StringAttr path) {
  Value &whole = gathered[local];
  if (whole)
    return whole; // keys that are the values too
  RankedTensorType type = tensorOf(local);
  SmallVector<int64_t> shape(type.getShape());
  shape[1] *= cp;
  auto gather = dist::AllGatherOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), local,
      meshRef, cpAxes, b.getI64IntegerAttr(1));
  gather->setAttr("fsdp.context_parallel", b.getUnitAttr());
  // Rank q's block holds chunks q and 2·cp−1−q of each round m: chunk
  // c < cp of round m is piece 2·m of block c, chunk c >= cp piece 2·m + 1
  // of block 2·cp−1−c.
  int64_t chunk = type.getDimSize(1) / (2 * rounds);
  SmallVector<int64_t> sizes(2 * cp * rounds, chunk);
  auto pieces = nn::SplitOp::create(b, loc, gather.getResult(), 1,
                                    b.getDenseI64ArrayAttr(sizes), path);
  SmallVector<Value> ordered;
  for (int64_t m = 0; m < rounds; ++m)
    for (int64_t c = 0; c < 2 * cp; ++c) {
      int64_t owner = c < cp ? c : 2 * cp - 1 - c;
      int64_t piece = owner * 2 * rounds + 2 * m + (c < cp ? 0 : 1);
      ordered.push_back(pieces->getResult(static_cast<unsigned>(piece)));
    }
  whole = nn::ConcatOp::create(b, loc, ordered, 1, path);
  return whole;
}

LogicalResult SequenceSplitter::rebuild(Operation &op) {
  SmallVector<Value> operands = llvm::map_to_vector(
      op.getOperands(), [&](Value v) { return map.lookup(v); });
  NamedAttrList attrs(op.getAttrDictionary());
  if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
    ArrayRef<int64_t> from = reshape.getInput().getType().getShape();
    ArrayRef<int64_t> now = tensorOf(operands[0]).getShape();
    if (from != now) {
      SmallVector<int64_t> shape(reshape.getShape());
      for (int64_t d = 0; d < static_cast<int64_t>(from.size()); ++d) {
        if (from[d] == now[d])
          continue;
        int64_t j = reshapedDim(from, shape, d);
        if (j < 0 || (shape[j] * now[d]) % from[d] != 0)
          return reshape.emitOpError("reshapes the sequence dim in a way the "
                                     "context-parallel split cannot follow");
        shape[j] = shape[j] * now[d] / from[d];
      }
      attrs.set("shape", b.getDenseI64ArrayAttr(shape));
    }
  }
  if (isa<dist::DistDialect>(op.getDialect())) {
    // A tensor-parallel collective: each result dim shrinks with its
    // operand's (the sequence's, by cp).
    return followOperandSplit(&op, b.clone(op, map));
  }
  return rebuildOnRanks(b, op, operands, attrs.getDictionary(context), map,
                        "context-parallel");
}

LogicalResult SequenceSplitter::rewriteBody() {
  split.emplace(b, forward, argTypes);
  Block *entry = split->entry();
  map.map(forward.getArguments(), entry->getArguments());
  for (Operation &op : body.without_terminator()) {
    auto attention = dyn_cast<nn::AttentionOp>(op);
    if (!attention) {
      if (failed(rebuild(op)))
        return failure();
      continue;
    }
    if (attention.getQueryPositions())
      return attention.emitOpError("already has positions");
    if (attention.getCausal() && positionsArg < 0)
      return attention.emitOpError(
          "is causal, and context parallelism needs the position_ids input "
          "(the global positions of the rank's tokens) to mask it");
    Value positions =
        positionsArg >= 0 ? entry->getArgument(positionsArg) : Value();
    ValueRange results = commType == CpCommType::AllGather
                             ? gatheredAttention(attention, positions)
                             : ringAttention(attention, positions);
    map.map(op.getResults(), results);
    ++pass.numAttentions;
  }
  return success();
}

nn::AttentionOp SequenceSplitter::attentionOver(nn::AttentionOp attention,
                                                Value query, Value key,
                                                Value value, Value positions,
                                                Value keyPositions) {
  SmallVector<Value, 3> placed;
  if (Value documents = attention.getDocumentPositions())
    placed.push_back(map.lookup(documents));
  for (Value v : {positions, keyPositions})
    if (v)
      placed.push_back(v);
  return nn::AttentionOp::create(
      b, attention.getLoc(), query, key, value, placed,
      attention.getCausalAttr(), attention.getSlidingWindowAttr(),
      attention.getScaleAttr(), attention.getPackedAttr(),
      attention.getPathAttr());
}

ValueRange SequenceSplitter::gatheredAttention(nn::AttentionOp attention,
                                               Value positions) {
  Location loc = attention.getLoc();
  StringAttr path = attention.getPathAttr();
  Value key = gatherSequence(map.lookup(attention.getKey()), loc, path);
  Value value = gatherSequence(map.lookup(attention.getValue()), loc, path);
  return attentionOver(attention, map.lookup(attention.getQuery()), key, value,
                       positions, Value())
      ->getResults();
}

ValueRange SequenceSplitter::ringAttention(nn::AttentionOp attention,
                                           Value positions) {
  // Step t attends to the block of cp rank r − t: its keys, values and
  // their positions came round the ring t times. Each step's permute is
  // issued before the step's attention, which fsdp-schedule overlaps with
  // it; a block the mask hides costs the kernel nothing.
  Location loc = attention.getLoc();
  Value query = map.lookup(attention.getQuery());
  Value key = map.lookup(attention.getKey());
  Value value = map.lookup(attention.getValue());
  auto next = [&](Value v) -> Value {
    auto permute = dist::PermuteOp::create(b, loc, v.getType(), v, meshRef,
                                           cpAxes, b.getI64IntegerAttr(1));
    permute->setAttr("fsdp.context_parallel", b.getUnitAttr());
    return permute.getResult();
  };
  // The blocks' positions are the same for every layer: they go round the
  // ring once, at the start.
  if (positions && ringPositions.empty()) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(positions.getParentBlock());
    ringPositions.push_back(positions);
    for (int64_t step = 1; step < cp; ++step)
      ringPositions.push_back(next(ringPositions.back()));
  }
  Operation *combined = nullptr;
  for (int64_t step = 0; step < cp; ++step) {
    Value nextKey, nextValue;
    if (step + 1 < cp) {
      nextKey = next(key);
      nextValue = value == key ? nextKey : next(value);
    }
    nn::AttentionOp part = attentionOver(
        attention, query, key, value, positions,
        positions ? ringPositions[static_cast<size_t>(step)] : Value());
    combined = combined ? nn::AttentionCombineOp::create(
                              b, loc, combined->getResult(0),
                              combined->getResult(1), part.getResult(),
                              part.getLogsumexp(), attention.getPathAttr())
                              .getOperation()
                        : part.getOperation();
    key = nextKey;
    value = nextValue;
  }
  return combined->getResults();
}

void SequenceSplitter::finish() {
  Operation *ret = body.getTerminator();
  SmallVector<Value> results = split->results(map);
  // Outputs along the sequence are the rank's chunks.
  auto resultAttrs = split->resultAttrs([&](unsigned i, NamedAttrList &attrs) {
    RankedTensorType now = tensorOf(results[i]),
                     old = tensorOf(ret->getOperand(i));
    for (int64_t d = 0; d < now.getRank(); ++d)
      if (now.getDimSize(d) != old.getDimSize(d))
        attrs.set(
            "dist.sharding",
            sequenceSharding(now.getRank(), d, attrs.get("dist.sharding")));
  });
  split->replace(ret->getLoc(), results, argAttrs, resultAttrs);
}

void ContextParallelPass::runOnOperation() {
  ModuleOp module = getOperation();
  int64_t cp;
  dist::MeshOp mesh = meshSplitting(module, "cp", cp);
  if (!mesh)
    return; // No context parallelism.
  // The option, else the parallel config's cp_comm_type, else p2p.
  CpCommType type = CpCommType::P2P;
  if (commType == "config") {
    if (ParallelConfigAttr config = ParallelConfigAttr::of(module))
      type = config.getCpCommType();
  } else if (std::optional<CpCommType> named =
                 enumNamed<CpCommType>(commType.getValue())) {
    type = *named;
  } else {
    module.emitError("fsdp-context-parallel: comm-type must be p2p, "
                     "all_gather or config, got '")
        << commType << "'";
    return signalPassFailure();
  }
  func::FuncOp forward = lookupEntry(module, entry, "split over cp");
  if (!forward ||
      failed(SequenceSplitter(*this, forward, mesh, cp, type).run()))
    signalPassFailure();
}

} // namespace

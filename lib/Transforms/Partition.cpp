//===- Partition.cpp - Tensor-parallel partitioning to per-rank programs --===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-partition`: rebuilds the forward annotated by
// `fsdp-tp-plan` as the program one rank runs. Every value gets a layout
// over the tp axis; styled ops set it, every other op follows its operands'
// layouts and is rebuilt through its shape rule on per-rank operands.
//
// Gradients follow from the layouts, so the conversions are chosen for both
// directions: a replicated value entering per-rank computation passes
// through dist.copy (its gradient sums the ranks' parts); a sequence block
// gathered for a column-parallel projection is reduce-scattered back; one
// gathered for computation every rank repeats keeps only its block
// (`replicated_grad`); a replicated value cut to the rank's block
// (all_slice) is gathered back.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "TPAnnotation.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Dialect/NN/IR/Partitioning.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace fsdp {
#define GEN_PASS_DEF_PARTITIONPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using nn::tensorOf;

namespace {

bool isFloat(Value v) { return isa<FloatType>(tensorOf(v).getElementType()); }

/// Attaches to `diag` a note where `v` gets its layout (the op producing it,
/// or the argument). Returns the failure.
LogicalResult noteProducer(InFlightDiagnostic &&diag, Value v) {
  diag.attachNote(v.getLoc()) << "the value gets its layout here";
  return diag;
}

/// A value's layout over tp.
struct Layout {
  enum Kind { Replicated, Sharded, Partial };
  Kind kind = Replicated;
  /// Sharded: the dim (from the front) and its strided group count.
  int64_t dim = 0, groups = 1;
  /// Partial: the layout the module's output takes once reduced.
  TPLayout target;

  static Layout replicated() { return {}; }
  static Layout sharded(int64_t dim, int64_t groups = 1) {
    return {Sharded, dim, groups, {}};
  }
  static Layout partial(TPLayout target) { return {Partial, 0, 1, target}; }
  bool isReplicated() const { return kind == Replicated; }
  bool operator==(const Layout &o) const {
    return kind == o.kind &&
           (kind != Sharded || (dim == o.dim && groups == o.groups));
  }
  /// Where the value is split, in the form the ops' rules take.
  nn::OperandShard shard() const {
    return kind == Sharded ? nn::OperandShard{dim, groups} : nn::OperandShard{};
  }
  std::string str() const {
    return kind == Partial ? "a partial sum" : nn::describe(shard());
  }
};

/// How a parameter is split: the dim and its group count.
struct Split {
  int64_t dim = 0, groups = 1;
  Operation *by = nullptr;
};

/// The partitioner; the ops' own rules (NNPartitionRules.cpp) build their
/// per-rank forms through its nn::TPPartitioner side, for the op being
/// partitioned (`current`, styled as `style`).
class Partitioner : public nn::TPPartitioner {
public:
  Partitioner(func::FuncOp forward, dist::MeshOp mesh, int64_t tp)
      : forward(forward), b(forward.getContext()), tp(tp),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        tpAxes(b.getStrArrayAttr({"tp"})) {}

  LogicalResult run();
  /// How many parameters became per-rank blocks.
  unsigned numSplitParams() const { return splits.size(); }

private:
  // nn::TPPartitioner, for the current op.
  OpBuilder &builder() override { return b; }
  int64_t parts() const override { return tp; }
  std::string entry() const override { return tp::entryOf(current); }
  bool inputDeclaredSharded() const override { return style.input.shard; }
  Value lookup(Value old) const override { return map.lookup(old); }
  bool isReplicated(Value now) const override {
    return layoutOf(now).isReplicated();
  }
  nn::OperandShard shardOf(Value now) const override {
    return layoutOf(now).shard();
  }
  std::string describeLayout(Value now) const override {
    return layoutOf(now).str();
  }
  FailureOr<Value> activation(Value x) override;
  Value copyIn(Value v) override;
  FailureOr<Value> reduce(Value partial) override {
    return resolve(current, partial);
  }
  Value allReduce(Value v, bool max) override;
  Value axisIndex() override;
  int64_t fusedGroups() override;
  Operation *rebuild(ValueRange operands) override {
    return rebuild(*current, operands);
  }
  LogicalResult partitionByShardRule() override { return generic(*current); }
  void bind(unsigned result, Value now, nn::OperandShard split) override {
    set(current->getResult(result), now,
        split.isSplit() ? Layout::sharded(split.dim, split.groups)
                        : Layout::replicated());
  }
  void bindPartial(Value now) override {
    set(current->getResult(0), now, Layout::partial(style.output));
  }
  void bindLike(Value now, Value like) override {
    set(current->getResult(0), now, layoutOf(like));
  }
  LogicalResult bindModuleOutput(Value now, int64_t dim,
                                 int64_t groups) override;

  // Parameters.
  LogicalResult decideSplits();
  LogicalResult repeatKeyValueHeads();
  /// The number of equal parts `projection`'s output is split into along
  /// its features (a fused [Q | K | V] projection), or 1.
  int64_t fusedGroupsOf(Operation *projection);

  // Ops.
  LogicalResult partition(Operation &op);
  /// A norm under a SequenceParallel entry: on the rank's sequence block.
  LogicalResult sequenceParallelNorm(Operation &op);
  LogicalResult generic(Operation &op);

  // Conversions of new values.
  FailureOr<Value> resolve(Operation *at, Value v);
  FailureOr<Value> gather(Operation *at, Value v, bool replicatedGrad);
  FailureOr<Value> slice(Operation *at, Value v, int64_t dim);

  /// Rebuilds `op` on `operands` through its shape rule, with `attrs`.
  Operation *rebuild(Operation &op, ValueRange operands,
                     DictionaryAttr attrs = {});
  void set(Value old, Value now, Layout layout) {
    map[old] = now;
    layouts[now] = layout;
  }
  Layout layoutOf(Value now) const { return layouts.lookup(now); }
  std::string entryOf(Operation &op) const { return tp::entryOf(&op); }

  func::FuncOp forward;
  OpBuilder b;
  int64_t tp;
  FlatSymbolRefAttr meshRef;
  ArrayAttr tpAxes;
  DenseMap<unsigned, Split> splits;
  DenseMap<Value, Value> map;
  DenseMap<Value, Layout> layouts;
  DenseMap<Value, Value> copies, localGathers, replicatedGathers, slices,
      resolved;
  Value rankIndex;
  /// The op being partitioned and its style.
  Operation *current = nullptr;
  TPStyle style;
};

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

int64_t Partitioner::fusedGroupsOf(Operation *projection) {
  if (!projection)
    return 1;
  auto path = projection->getAttrOfType<StringAttr>("path");
  Value out = projection->getResult(0);
  // Through the rest of the module (a Conv1D's bias add).
  while (out.hasOneUse()) {
    Operation *user = *out.getUsers().begin();
    auto styled = dyn_cast<nn::TPStyleOpInterface>(user);
    if (user->getAttrOfType<StringAttr>("path") != path || !styled ||
        styled.getTPProjection() != out.getDefiningOp())
      break;
    out = user->getResult(0);
  }
  if (!out.hasOneUse())
    return 1;
  auto split = dyn_cast<nn::SplitOp>(*out.getUsers().begin());
  int64_t rank = tensorOf(out).getRank();
  if (!split ||
      (int64_t(split.getDim()) != rank - 1 && int64_t(split.getDim()) != -1))
    return 1;
  ArrayRef<int64_t> sizes = split.getSizes();
  if (sizes.size() < 2 || !llvm::all_equal(sizes))
    return 1;
  return static_cast<int64_t>(sizes.size());
}

/// Fewer key/value heads than tp (Llama-3.1-70B's 8 at tp 16): each rank
/// needs the KV head of its query heads. In the global program the keys and
/// values are repeated up to tp heads right before the attention (head j is
/// KV head j / (tp / kv), so the grouping of query heads is unchanged), and
/// their projections become column-parallel with a replicated output
/// (colwise_rep): each rank computes its columns, one all_gather gives every
/// rank the whole keys, and the attention's rule cuts the rank's head. The
/// gradients follow: the repeat sums its copies, the gather's transpose
/// keeps the rank's columns.
LogicalResult Partitioner::repeatKeyValueHeads() {
  SmallVector<nn::MultiHeadOpInterface> attentions;
  forward.walk([&](nn::MultiHeadOpInterface op) {
    int64_t kv = op.getNumKeyValueHeads();
    if (kv % tp != 0 && tp % kv == 0)
      attentions.push_back(op);
  });
  for (nn::MultiHeadOpInterface attention : attentions) {
    for (unsigned i : attention.getKeyValueOperands()) {
      Value kv = attention->getOperand(i);
      // The projection: back through the per-head ops (a reshape to heads,
      // a norm, the rotary) to the first styled op.
      Operation *producer = kv.getDefiningOp();
      while (producer && !tp::decode(producer) &&
             producer->getNumOperands() > 0)
        producer = producer->getOperand(0).getDefiningOp();
      std::optional<TPStyle> style =
          producer ? tp::decode(producer) : std::nullopt;
      auto projection = dyn_cast_or_null<nn::TPStyleOpInterface>(producer);
      if (!projection || projection.getTPProjection() != producer || !style ||
          style->kind != TPStyle::Colwise)
        return attention->emitOpError("has ")
               << attention.getNumKeyValueHeads()
               << " key/value heads, fewer than tp = " << tp
               << ", and its keys and values must come from column-parallel "
                  "projections to be repeated per rank";
      style->output = TPLayout::replicate();
      producer->setAttr(tp::kStyleAttrName,
                        tp::encode(b, *style, tp::entryOf(producer)));
      // [B, S, kv, D] -> [B, S, kv, 1, D] -> r copies -> [B, S, tp, D].
      ArrayRef<int64_t> shape = tensorOf(kv).getShape();
      int64_t r = tp / shape[2];
      b.setInsertionPoint(attention);
      Location loc = attention.getLoc();
      Value one = nn::ReshapeOp::create(
          b, loc, kv,
          ArrayRef<int64_t>{shape[0], shape[1], shape[2], 1, shape[3]},
          StringAttr());
      SmallVector<Value> copies(r, one);
      Value all = nn::ConcatOp::create(b, loc, copies, 3, StringAttr());
      Value repeated = nn::ReshapeOp::create(
          b, loc, all, ArrayRef<int64_t>{shape[0], shape[1], tp, shape[3]},
          StringAttr());
      if (auto path = attention->getAttrOfType<StringAttr>("path"))
        for (Value v : {one, all, repeated})
          v.getDefiningOp()->setAttr("path", path);
      attention->setOperand(i, repeated);
    }
  }
  return success();
}

LogicalResult Partitioner::decideSplits() {
  Block &body = forward.getBody().front();
  // The vocabulary: the classes of the loss. A table or head whose rows
  // are the vocabulary may be padded to a multiple of tp, as Megatron pads
  // it; the loss leaves the padded classes out.
  int64_t vocab = 0;
  for (Operation &op : body)
    if (auto loss = dyn_cast<nn::CrossEntropyOp>(op))
      vocab = loss.getLogits().getType().getShape().back();
  for (Operation &op : body) {
    std::optional<TPStyle> style = tp::decode(&op);
    if (!style || style->kind == TPStyle::SequenceParallel)
      continue;
    auto styled = dyn_cast<nn::TPStyleOpInterface>(op);
    if (!styled)
      return op.emitOpError("is matched by tensor-parallel plan entry '")
             << entryOf(op) << "' (" << style->kindName()
             << "), which applies to linear, embedding and Conv1D (matmul "
                "+ add) modules";
    bool col = style->kind == TPStyle::Colwise;
    if (failed(styled.checkTPStyle(col, entryOf(op))))
      return failure();
    // A column-parallel projection (or a Conv1D's bias add after one) whose
    // output is split into equal parts is split per part.
    int64_t groups = col ? fusedGroupsOf(styled.getTPProjection()) : 1;
    for (auto [value, dim] : tp::splitOperands(&op, *style)) {
      auto arg = dyn_cast<BlockArgument>(value);
      if (!arg || !forward.getArgAttr(arg.getArgNumber(),
                                      nn::NNDialect::kParamAttrName))
        return op.emitOpError("is split by tensor-parallel plan entry '")
               << entryOf(op) << "', so its weight must be a parameter";
      RankedTensorType type = tensorOf(arg);
      bool vocabRows = dim == 0 && groups == 1 && vocab > 0 &&
                       type.getDimSize(0) == vocab &&
                       styled.mayPadVocabulary(col);
      if (type.getDimSize(dim) % (tp * groups) != 0 && !vocabRows)
        return op.emitOpError("weight ")
               << type << " dim " << dim << " does not divide by tp = " << tp
               << (groups > 1
                       ? " times " + std::to_string(groups) + " fused parts"
                       : std::string());
      Split want{dim, groups, &op};
      auto [it, inserted] = splits.try_emplace(arg.getArgNumber(), want);
      if (!inserted && (it->second.dim != dim || it->second.groups != groups)) {
        InFlightDiagnostic diag =
            op.emitOpError("splits parameter '")
            << forward.getArgAttr(arg.getArgNumber(),
                                  nn::NNDialect::kParamAttrName)
            << "' on dim " << dim << ", but plan entry '"
            << tp::entryOf(it->second.by) << "' splits it on dim "
            << it->second.dim << " (tied weights need one layout)";
        diag.attachNote(it->second.by->getLoc())
            << "plan entry '" << tp::entryOf(it->second.by)
            << "' splits it here";
        return diag;
      }
    }
  }
  // A split parameter may not be used whole by another op.
  for (auto &[argNumber, split] : splits)
    for (Operation *user : forward.getArgument(argNumber).getUsers()) {
      std::optional<TPStyle> style = tp::decode(user);
      if (!style || style->kind == TPStyle::SequenceParallel) {
        InFlightDiagnostic diag =
            user->emitOpError("uses parameter '")
            << forward.getArgAttr(argNumber, nn::NNDialect::kParamAttrName)
            << "' whole, but plan entry '" << tp::entryOf(split.by)
            << "' splits it over tp; give this module a plan entry too";
        diag.attachNote(split.by->getLoc())
            << "plan entry '" << tp::entryOf(split.by) << "' splits it here";
        return diag;
      }
    }
  return success();
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

FailureOr<Value> Partitioner::resolve(Operation *at, Value v) {
  Layout layout = layoutOf(v);
  if (layout.kind != Layout::Partial)
    return v;
  Value &slot = resolved[v];
  if (slot)
    return slot;
  auto sum =
      dist::ReductionKindAttr::get(b.getContext(), dist::ReductionKind::sum);
  if (!layout.target.shard) {
    slot = dist::AllReduceOp::create(b, at->getLoc(), v.getType(), v, meshRef,
                                     tpAxes, sum)
               .getResult();
    layouts[slot] = Layout::replicated();
    return slot;
  }
  RankedTensorType type = tensorOf(v);
  int64_t dim = layout.target.dim < 0 ? layout.target.dim + type.getRank()
                                      : layout.target.dim;
  if (dim < 0 || dim >= type.getRank() || type.getDimSize(dim) % tp != 0)
    return at->emitOpError("output ")
           << type << " cannot be reduce-scattered on dim " << layout.target.dim
           << " over tp = " << tp;
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= tp;
  slot =
      dist::ReduceScatterOp::create(
          b, at->getLoc(), RankedTensorType::get(shape, type.getElementType()),
          v, meshRef, tpAxes, sum, b.getI64IntegerAttr(dim))
          .getResult();
  layouts[slot] = Layout::sharded(dim);
  return slot;
}

FailureOr<Value> Partitioner::gather(Operation *at, Value v,
                                     bool replicatedGrad) {
  Layout layout = layoutOf(v);
  if (layout.isReplicated())
    return v;
  if (layout.kind != Layout::Sharded || layout.groups != 1)
    return noteProducer(at->emitOpError("needs the whole of a value ")
                            << layout.str()
                            << ", which the partitioner cannot gather",
                        v);
  Value &slot = (replicatedGrad ? replicatedGathers : localGathers)[v];
  if (slot)
    return slot;
  RankedTensorType type = tensorOf(v);
  SmallVector<int64_t> shape(type.getShape());
  shape[layout.dim] *= tp;
  auto ag = dist::AllGatherOp::create(
      b, at->getLoc(), RankedTensorType::get(shape, type.getElementType()), v,
      meshRef, tpAxes, b.getI64IntegerAttr(layout.dim));
  if (replicatedGrad)
    ag.setReplicatedGrad(true);
  slot = ag.getResult();
  layouts[slot] = Layout::replicated();
  return slot;
}

FailureOr<Value> Partitioner::slice(Operation *at, Value v, int64_t dim) {
  Layout layout = layoutOf(v);
  if (layout == Layout::sharded(dim))
    return v;
  if (!layout.isReplicated())
    return noteProducer(
        at->emitOpError("needs a value ")
            << layout.str() << " sharded on dim " << dim
            << " instead, a resharding the partitioner does not support",
        v);
  Value &slot = slices[v];
  if (slot)
    return slot;
  RankedTensorType type = tensorOf(v);
  if (type.getDimSize(dim) % tp != 0)
    return at->emitOpError("operand ")
           << type << " dim " << dim << " does not divide by tp = " << tp;
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] /= tp;
  slot =
      dist::AllSliceOp::create(
          b, at->getLoc(), RankedTensorType::get(shape, type.getElementType()),
          v, meshRef, tpAxes, b.getI64IntegerAttr(dim))
          .getResult();
  layouts[slot] = Layout::sharded(dim);
  return slot;
}

Value Partitioner::copyIn(Value v) {
  if (!isFloat(v) || !layoutOf(v).isReplicated())
    return v;
  Value &slot = copies[v];
  if (!slot) {
    slot = dist::CopyOp::create(b, v.getLoc(), v.getType(), v, meshRef, tpAxes)
               .getResult();
    layouts[slot] = Layout::replicated();
  }
  return slot;
}

Operation *Partitioner::rebuild(Operation &op, ValueRange operands,
                                DictionaryAttr attrs) {
  NamedAttrList list(attrs ? attrs : op.getAttrDictionary());
  list.erase(tp::kStyleAttrName);
  return nn::rebuildWithShapeRule(b, op, operands,
                                  list.getDictionary(b.getContext()));
}

//===----------------------------------------------------------------------===//
// Styled modules
//===----------------------------------------------------------------------===//

/// The module's result: a partial sum waits for its reduction into the
/// style's output layout; a column-parallel output the style wants whole is
/// gathered.
LogicalResult Partitioner::bindModuleOutput(Value result, int64_t dim,
                                            int64_t groups) {
  layouts[result] = Layout::sharded(dim, groups);
  if (!style.output.shard) {
    // colwise_rep: the whole features, for computation every rank repeats.
    FailureOr<Value> whole = gather(current, result, /*replicatedGrad=*/true);
    if (failed(whole))
      return failure();
    result = *whole;
  }
  map[current->getResult(0)] = result;
  return success();
}

int64_t Partitioner::fusedGroups() {
  return fusedGroupsOf(cast<nn::TPStyleOpInterface>(current).getTPProjection());
}

Value Partitioner::axisIndex() {
  if (!rankIndex)
    rankIndex = dist::AxisIndexOp::create(
                    b, current->getLoc(),
                    RankedTensorType::get({}, b.getI64Type()), meshRef, tpAxes)
                    .getResult();
  return rankIndex;
}

Value Partitioner::allReduce(Value v, bool max) {
  auto kind = max ? dist::ReductionKind::max : dist::ReductionKind::sum;
  return dist::AllReduceOp::create(
             b, current->getLoc(), v.getType(), v, meshRef, tpAxes,
             dist::ReductionKindAttr::get(b.getContext(), kind))
      .getResult();
}

LogicalResult Partitioner::sequenceParallelNorm(Operation &op) {
  // A norm on the rank's sequence block; its weights are replicated.
  if (!op.hasTrait<nn::TokenwiseNorm>())
    return op.emitOpError("is matched by sequence-parallel plan entry '")
           << entryOf(op) << "', which applies to norms";
  SmallVector<Value> operands;
  for (auto [i, old] : llvm::enumerate(op.getOperands())) {
    Value v = lookup(old);
    if (i == 0) {
      FailureOr<Value> in = resolve(&op, v);
      if (succeeded(in))
        in = slice(&op, *in, 1);
      if (failed(in))
        return failure();
      v = *in;
    } else {
      v = copyIn(v);
    }
    operands.push_back(v);
  }
  Operation *copy = rebuild(op, operands);
  if (!copy)
    return failure();
  set(op.getResult(0), copy->getResult(0), Layout::sharded(1));
  return success();
}

FailureOr<Value> Partitioner::activation(Value x) {
  Operation &op = *current;
  auto declared = [&](Value v, TPLayout want) -> LogicalResult {
    Layout have = layoutOf(v);
    int64_t rank = tensorOf(v).getRank();
    bool ok = want.shard
                  ? have.kind == Layout::Sharded &&
                        have.dim == (want.dim < 0 ? want.dim + rank : want.dim)
                  : have.isReplicated();
    if (ok)
      return success();
    return noteProducer(
        op.emitOpError("input is ")
            << have.str() << ", but tensor-parallel plan entry '" << entryOf(op)
            << "' declares input_layouts " << want.str(),
        v);
  };
  FailureOr<Value> v = resolve(&op, lookup(x));
  if (failed(v))
    return failure();
  Layout have = layoutOf(*v);
  int64_t rank = tensorOf(*v).getRank();
  if (style.kind == TPStyle::Colwise) {
    // Column-parallel: the whole input on every rank.
    if (have.isReplicated()) {
      if (failed(declared(*v, style.input)))
        return failure();
      return copyIn(*v);
    }
    if (have == Layout::sharded(1) && rank > 2)
      return gather(&op, *v, /*replicatedGrad=*/false);
    return op.emitOpError("input is ")
           << have.str() << "; a column-parallel module needs it "
           << "replicated or sharded on the sequence dim";
  }
  // Row-parallel: the rank's features.
  if (have.isReplicated()) {
    if (failed(declared(*v, style.input)))
      return failure();
    return slice(&op, *v, rank - 1);
  }
  if (failed(declared(*v, style.input)))
    return failure();
  if (have == Layout::sharded(rank - 1))
    return *v;
  return op.emitOpError("input is ")
         << have.str() << "; a row-parallel module needs the features sharded";
}

//===----------------------------------------------------------------------===//
// Everything else
//===----------------------------------------------------------------------===//

LogicalResult Partitioner::generic(Operation &op) {
  SmallVector<Value> operands;
  for (Value old : op.getOperands()) {
    FailureOr<Value> v = resolve(&op, lookup(old));
    if (failed(v))
      return failure();
    operands.push_back(*v);
  }
  if (llvm::all_of(operands,
                   [&](Value v) { return layoutOf(v).isReplicated(); })) {
    Operation *copy = rebuild(op, operands);
    if (!copy)
      return failure();
    for (auto [old, now] : llvm::zip(op.getResults(), copy->getResults()))
      set(old, now, Layout::replicated());
    return success();
  }
  if (auto expansion = dyn_cast<nn::SplitExpansionOpInterface>(op)) {
    current = &op;
    return expansion.partitionSplit(*this);
  }

  // The op's own rule (ShardRuleOpInterface) says where its results are
  // split and what its replicated operands become.
  SmallVector<nn::OperandShard> shards = llvm::map_to_vector(
      operands, [&](Value v) { return layoutOf(v).shard(); });
  auto rules = dyn_cast<nn::ShardRuleOpInterface>(op);
  if (!rules) {
    unsigned i =
        llvm::find_if(shards, [](nn::OperandShard s) { return s.isSplit(); }) -
        shards.begin();
    return op.emitOpError("cannot be partitioned with operand #")
           << i << " " << layoutOf(operands[i]).str();
  }
  FailureOr<nn::ShardRule> rule = rules.getShardRule(shards, tp);
  if (failed(rule))
    return failure();
  for (auto [i, use] : llvm::enumerate(rule->operands)) {
    if (shards[i].isSplit() || use.first == nn::ReplicatedUse::Keep)
      continue;
    if (use.first == nn::ReplicatedUse::Whole) {
      operands[i] = copyIn(operands[i]);
      continue;
    }
    FailureOr<Value> block = slice(&op, operands[i], use.second);
    if (failed(block))
      return failure();
    operands[i] = *block;
  }
  Operation *copy = rebuild(op, operands, rule->attributes);
  if (!copy)
    return failure();
  for (auto [old, now, split] :
       llvm::zip(op.getResults(), copy->getResults(), rule->results))
    set(old, now,
        split.isSplit() ? Layout::sharded(split.dim, split.groups)
                        : Layout::replicated());
  return success();
}

LogicalResult Partitioner::partition(Operation &op) {
  if (!op.getName().hasInterface<nn::ShapeRuleOpInterface>())
    return op.emitOpError("cannot be partitioned over tp (not an nn op)");
  std::optional<TPStyle> styleOf = tp::decode(&op);
  if (!styleOf)
    return generic(op);
  current = &op;
  style = *styleOf;
  if (style.kind == TPStyle::SequenceParallel)
    return sequenceParallelNorm(op);
  return cast<nn::TPStyleOpInterface>(op).partitionStyled(
      *this, style.kind == TPStyle::Colwise);
}

//===----------------------------------------------------------------------===//
// The function
//===----------------------------------------------------------------------===//

LogicalResult Partitioner::run() {
  if (failed(repeatKeyValueHeads()) || failed(decideSplits()))
    return failure();
  Block &body = forward.getBody().front();
  MLIRContext *context = b.getContext();
  // How a rank-`rank` value split as `layout` lies over tp.
  auto shardingOf = [&](int64_t rank, Layout layout) {
    SmallVector<Attribute> dims(rank, b.getArrayAttr({}));
    dims[layout.dim] = tpAxes;
    SmallVector<int64_t> groups;
    if (layout.groups > 1) {
      groups.assign(rank, 1);
      groups[layout.dim] = layout.groups;
    }
    return dist::ShardingAttr::get(context, meshRef, b.getArrayAttr(dims),
                                   b.getArrayAttr({}),
                                   b.getDenseI64ArrayAttr(groups));
  };

  // The new signature: split parameters hold their rank's block.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (BlockArgument arg : forward.getArguments()) {
    RankedTensorType type = tensorOf(arg);
    NamedAttrList attrs(forward.getArgAttrDict(arg.getArgNumber()));
    auto it = splits.find(arg.getArgNumber());
    if (it != splits.end()) {
      SmallVector<int64_t> shape(type.getShape());
      // A padded vocabulary's last blocks end in zero rows; the runtime
      // learns the real size from fsdp.global_shape.
      if (shape[it->second.dim] % tp != 0)
        attrs.set("fsdp.global_shape", b.getDenseI64ArrayAttr(shape));
      shape[it->second.dim] = (shape[it->second.dim] + tp - 1) / tp;
      type = RankedTensorType::get(shape, type.getElementType());
      attrs.set("dist.sharding",
                shardingOf(type.getRank(),
                           Layout::sharded(it->second.dim, it->second.groups)));
    }
    argTypes.push_back(type);
    argAttrs.push_back(attrs.getDictionary(context));
  }

  RebuiltFunction split(b, forward, argTypes);
  for (auto [old, now] :
       llvm::zip(forward.getArguments(), split.entry()->getArguments())) {
    auto it = splits.find(old.getArgNumber());
    set(old, now,
        it == splits.end()
            ? Layout::replicated()
            : Layout::sharded(it->second.dim, it->second.groups));
  }
  for (Operation &op : body.without_terminator())
    if (failed(partition(op)))
      return failure();

  // Results: partial sums reduced; sharded ones described.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  for (Value old : ret.getOperands()) {
    FailureOr<Value> v = resolve(ret, lookup(old));
    if (failed(v))
      return failure();
    results.push_back(*v);
  }
  auto resultAttrs = split.resultAttrs([&](unsigned i, NamedAttrList &attrs) {
    Layout layout = layoutOf(results[i]);
    if (layout.kind == Layout::Sharded)
      attrs.set("dist.sharding",
                shardingOf(tensorOf(results[i]).getRank(), layout));
  });
  split.replace(ret.getLoc(), results, argAttrs, resultAttrs);
  return success();
}

struct PartitionPass
    : EntryFunctionPass<PartitionPass, fsdp::impl::PartitionPassBase> {
  using EntryFunctionPass::EntryFunctionPass;
  static constexpr llvm::StringLiteral kPurpose = "partition";

  void runOnEntry(ModuleOp module, func::FuncOp forward) {
    bool annotated = false;
    forward.walk([&](Operation *op) {
      annotated |= bool(op->getAttr(tp::kStyleAttrName));
    });
    if (!annotated)
      return; // Nothing is split: the program is every rank's.
    dist::MeshOp mesh = dist::findMesh(module);
    std::optional<int64_t> tp = mesh ? mesh.getAxisSize("tp") : std::nullopt;
    if (!tp) {
      forward.emitOpError("is annotated for tensor parallelism, but the "
                          "module has no dist.mesh with a 'tp' axis (run "
                          "fsdp-tp-plan)");
      return signalPassFailure();
    }
    Partitioner partitioner(forward, mesh, *tp);
    if (failed(partitioner.run()))
      return signalPassFailure();
    numSplitParams += partitioner.numSplitParams();
  }
};

} // namespace

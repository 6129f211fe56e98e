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

class Partitioner {
public:
  Partitioner(func::FuncOp forward, dist::MeshOp mesh, int64_t tp)
      : forward(forward), b(forward.getContext()), tp(tp),
        meshRef(FlatSymbolRefAttr::get(mesh.getSymNameAttr())),
        tpAxes(b.getStrArrayAttr({"tp"})) {}

  LogicalResult run();
  /// How many parameters became per-rank blocks.
  unsigned numSplitParams() const { return splits.size(); }

private:
  // Parameters.
  LogicalResult decideSplits();
  LogicalResult repeatKeyValueHeads();
  int64_t fusedGroups(Operation *op);

  // Ops.
  LogicalResult partition(Operation &op);
  LogicalResult styled(Operation &op, const TPStyle &style);
  /// A norm under a SequenceParallel entry: on the rank's sequence block.
  LogicalResult sequenceParallelNorm(Operation &op);
  /// The per-rank form of `x`, the activation operand of `op` under a
  /// column- or row-parallel `style`: whole for column-parallel, the
  /// rank's features for row-parallel.
  FailureOr<Value> styledActivation(Operation &op, const TPStyle &style,
                                    Value x);
  LogicalResult generic(Operation &op);
  LogicalResult crossEntropy(nn::CrossEntropyOp op);
  LogicalResult finishModule(Operation &op, Value result, const TPStyle &style,
                             Layout layout);

  // Conversions of new values.
  FailureOr<Value> resolve(Operation *at, Value v);
  FailureOr<Value> gather(Operation *at, Value v, bool replicatedGrad);
  FailureOr<Value> slice(Operation *at, Value v, int64_t dim);
  Value copyIn(Value v);

  /// Rebuilds `op` on `operands` through its shape rule, with `attrs`.
  Operation *rebuild(Operation &op, ValueRange operands,
                     DictionaryAttr attrs = {});
  void set(Value old, Value now, Layout layout) {
    map[old] = now;
    layouts[now] = layout;
  }
  Layout layoutOf(Value now) const { return layouts.lookup(now); }
  Value lookup(Value old) const { return map.lookup(old); }
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
  Value axisIndex;
};

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

/// The number of equal parts a column-parallel module's output is split
/// into along its features (a fused [Q | K | V] projection), or 1.
int64_t Partitioner::fusedGroups(Operation *op) {
  auto path = op->getAttrOfType<StringAttr>("path");
  Value out = op->getResult(0);
  // Through the rest of the module (a Conv1D's bias add).
  while (out.hasOneUse()) {
    Operation *user = *out.getUsers().begin();
    if (user->getAttrOfType<StringAttr>("path") != path ||
        !isa<nn::AddOp>(user))
      break;
    out = user->getResult(0);
  }
  if (!out.hasOneUse())
    return 1;
  auto split = dyn_cast<nn::SplitOp>(*out.getUsers().begin());
  int64_t rank = tensorOf(out).getRank();
  if (!split || (split.getDim() != rank - 1 && split.getDim() != -1))
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
  SmallVector<nn::AttentionOp> attentions;
  forward.walk([&](nn::AttentionOp op) {
    int64_t kv = op.getKey().getType().getDimSize(2);
    if (kv % tp != 0 && tp % kv == 0)
      attentions.push_back(op);
  });
  for (nn::AttentionOp attention : attentions) {
    for (unsigned i : {1u, 2u}) {
      Value kv = attention->getOperand(i);
      // The projection: back through the per-head ops to the linear.
      Operation *producer = kv.getDefiningOp();
      while (
          isa_and_nonnull<nn::RotaryOp, nn::RMSNormOp, nn::ReshapeOp>(producer))
        producer = producer->getOperand(0).getDefiningOp();
      std::optional<TPStyle> style =
          producer ? tp::decode(producer) : std::nullopt;
      if (!isa_and_nonnull<nn::LinearOp>(producer) || !style ||
          style->kind != TPStyle::Colwise)
        return attention.emitOpError("has ")
               << attention.getKey().getType().getDimSize(2)
               << " key/value heads, fewer than tp = " << tp
               << ", and its keys and values must come from column-parallel "
                  "linear projections to be repeated per rank";
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
      if (auto path = attention.getPathAttr())
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
    if (!isa<nn::LinearOp, nn::MatmulOp, nn::EmbeddingOp, nn::AddOp>(op))
      return op.emitOpError("is matched by tensor-parallel plan entry '")
             << entryOf(op) << "' (" << style->kindName()
             << "), which applies to linear, embedding and Conv1D (matmul "
                "+ add) modules";
    if (auto matmul = dyn_cast<nn::MatmulOp>(op);
        matmul && (matmul.getTransposeA() || matmul.getTransposeB() ||
                   matmul.getRhs().getType().getRank() != 2))
      return op.emitOpError("is matched by tensor-parallel plan entry '")
             << entryOf(op)
             << "', which splits a matmul only as a Conv1D (x · W, W "
                "[in, out])";
    // A column-parallel projection (or a Conv1D's bias add after one) whose
    // output is split into equal parts is split per part.
    int64_t groups = 1;
    if (style->kind == TPStyle::Colwise) {
      Operation *projection =
          isa<nn::AddOp>(op) ? op.getOperand(0).getDefiningOp() : &op;
      if (projection && !isa<nn::EmbeddingOp>(op))
        groups = fusedGroups(projection);
    }
    for (auto [value, dim] : tp::splitOperands(&op, *style)) {
      auto arg = dyn_cast<BlockArgument>(value);
      if (!arg || !forward.getArgAttr(arg.getArgNumber(),
                                      nn::NNDialect::kParamAttrName))
        return op.emitOpError("is split by tensor-parallel plan entry '")
               << entryOf(op) << "', so its weight must be a parameter";
      RankedTensorType type = tensorOf(arg);
      bool vocabRows =
          dim == 0 && groups == 1 && vocab > 0 && type.getDimSize(0) == vocab &&
          (isa<nn::EmbeddingOp>(op) ||
           (isa<nn::LinearOp>(op) && style->kind == TPStyle::Colwise));
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
LogicalResult Partitioner::finishModule(Operation &op, Value result,
                                        const TPStyle &style, Layout layout) {
  layouts[result] = layout;
  if (layout.kind == Layout::Sharded && !style.output.shard) {
    // colwise_rep: the whole features, for computation every rank repeats.
    FailureOr<Value> whole = gather(&op, result, /*replicatedGrad=*/true);
    if (failed(whole))
      return failure();
    result = *whole;
  }
  map[op.getResult(0)] = result;
  return success();
}

LogicalResult Partitioner::sequenceParallelNorm(Operation &op) {
  // A norm on the rank's sequence block; its weights are replicated.
  if (!isa<nn::RMSNormOp, nn::LayerNormOp>(op))
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

FailureOr<Value> Partitioner::styledActivation(Operation &op,
                                               const TPStyle &style, Value x) {
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

LogicalResult Partitioner::styled(Operation &op, const TPStyle &style) {
  if (style.kind == TPStyle::SequenceParallel)
    return sequenceParallelNorm(op);
  bool col = style.kind == TPStyle::Colwise;
  auto activation = [&](Value x) { return styledActivation(op, style, x); };

  if (auto linear = dyn_cast<nn::LinearOp>(op)) {
    FailureOr<Value> x = activation(linear.getInput());
    if (failed(x))
      return failure();
    SmallVector<Value> operands = {*x, lookup(linear.getWeight())};
    Value bias = linear.getBias() ? lookup(linear.getBias()) : Value();
    if (col && bias)
      operands.push_back(bias);
    Operation *copy = rebuild(op, operands);
    if (!copy)
      return failure();
    Value result = copy->getResult(0);
    int64_t last = tensorOf(result).getRank() - 1;
    if (col)
      return finishModule(op, result, style,
                          Layout::sharded(last, fusedGroups(&op)));
    // Row-parallel with a bias: reduce first, then add it once.
    layouts[result] = Layout::partial(style.output);
    if (bias) {
      FailureOr<Value> sum = resolve(&op, result);
      if (failed(sum))
        return failure();
      // Added on every rank to a whole value it needs no copy; to a
      // sequence block it does (its gradient sums the blocks').
      Value b2 = layoutOf(*sum).isReplicated() ? bias : copyIn(bias);
      result = nn::AddOp::create(b, op.getLoc(), *sum, b2, StringAttr());
      layouts[result] = layoutOf(*sum);
    }
    map[op.getResult(0)] = result;
    return success();
  }
  if (auto matmul = dyn_cast<nn::MatmulOp>(op)) {
    FailureOr<Value> x = activation(matmul.getLhs());
    if (failed(x))
      return failure();
    Operation *copy = rebuild(op, {*x, lookup(matmul.getRhs())});
    if (!copy)
      return failure();
    Value result = copy->getResult(0);
    int64_t last = tensorOf(result).getRank() - 1;
    if (col) {
      // The bias add of the same module follows the sharded features.
      set(op.getResult(0), result, Layout::sharded(last, fusedGroups(&op)));
      return success();
    }
    layouts[result] = Layout::partial(style.output);
    map[op.getResult(0)] = result;
    return success();
  }
  if (auto embedding = dyn_cast<nn::EmbeddingOp>(op)) {
    Value ids = lookup(embedding.getIds());
    if (!layoutOf(ids).isReplicated() || style.input.shard)
      return op.emitOpError("is a ")
             << style.kindName()
             << " embedding, whose ids must be replicated "
                "(input_layouts Replicate())";
    Value table = lookup(embedding.getTable());
    if (col) {
      Operation *copy = rebuild(op, {table, ids});
      if (!copy)
        return failure();
      Value result = copy->getResult(0);
      return finishModule(op, result, style,
                          Layout::sharded(tensorOf(result).getRank() - 1));
    }
    // Vocabulary-parallel: the rank's rows; other ids give zero rows.
    if (!axisIndex)
      axisIndex = dist::AxisIndexOp::create(
                      b, op.getLoc(), RankedTensorType::get({}, b.getI64Type()),
                      meshRef, tpAxes)
                      .getResult();
    Operation *copy = rebuild(op, {table, ids, axisIndex});
    if (!copy)
      return failure();
    Value result = copy->getResult(0);
    layouts[result] = Layout::partial(style.output);
    map[op.getResult(0)] = result;
    return success();
  }
  if (isa<nn::AddOp>(op))
    // A Conv1D's bias add: the operands' layouts decide.
    return generic(op);
  return op.emitOpError("cannot be split by tensor-parallel plan entry '")
         << entryOf(op) << "'";
}

//===----------------------------------------------------------------------===//
// Everything else
//===----------------------------------------------------------------------===//

LogicalResult Partitioner::crossEntropy(nn::CrossEntropyOp op) {
  Value logits = lookup(op.getLogits()), labels = lookup(op.getLabels());
  Layout layout = layoutOf(logits);
  int64_t last = tensorOf(logits).getRank() - 1;
  if (layout.kind != Layout::Sharded || layout.dim != last ||
      layout.groups != 1 || !layoutOf(labels).isReplicated())
    return op.emitOpError("takes logits ")
           << layout.str()
           << "; a cross-entropy is partitioned only over the vocabulary "
              "(lm_head column-parallel with output_layouts Shard(-1))";
  // The vocabulary-parallel loss: the global row max, then each rank's
  // Σexp and target logit, summed over the ranks.
  Location loc = op.getLoc();
  MLIRContext *context = b.getContext();
  auto allReduce = [&](Value v, dist::ReductionKind kind) {
    return dist::AllReduceOp::create(
               b, loc, v.getType(), v, meshRef, tpAxes,
               dist::ReductionKindAttr::get(context, kind))
        .getResult();
  };
  if (!axisIndex)
    axisIndex =
        dist::AxisIndexOp::create(
            b, loc, RankedTensorType::get({}, b.getI64Type()), meshRef, tpAxes)
            .getResult();
  StringAttr path = op.getPathAttr();
  auto max = nn::ReduceMaxOp::create(b, loc, logits, path);
  Value shift = allReduce(max, dist::ReductionKind::max);
  // Padded classes (vocabulary not divisible by tp) are left out.
  int64_t classes = op.getLogits().getType().getShape().back();
  IntegerAttr numClasses = tensorOf(logits).getShape().back() * tp != classes
                               ? b.getI64IntegerAttr(classes)
                               : IntegerAttr();
  auto partial = nn::CrossEntropyPartialOp::create(
      b, loc, logits, labels, shift, axisIndex, op.getIgnoreIndexAttr(),
      numClasses, path);
  Value sumExp = allReduce(partial.getSumExp(), dist::ReductionKind::sum);
  Value target = allReduce(partial.getTarget(), dist::ReductionKind::sum);
  auto loss = nn::CrossEntropyCombineOp::create(b, loc, sumExp, target, labels,
                                                op.getIgnoreIndexAttr(),
                                                op.getReductionAttr(), path);
  set(op.getResult(), loss, Layout::replicated());
  return success();
}

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
  if (auto loss = dyn_cast<nn::CrossEntropyOp>(op))
    return crossEntropy(loss);

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
  std::optional<TPStyle> style = tp::decode(&op);
  return style ? styled(op, *style) : generic(op);
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

  b.setInsertionPoint(forward);
  auto split = func::FuncOp::create(b, forward.getLoc(), forward.getName(),
                                    b.getFunctionType(argTypes, {}));
  Block *entry = split.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  for (auto [old, now] :
       llvm::zip(forward.getArguments(), entry->getArguments())) {
    auto it = splits.find(old.getArgNumber());
    set(old, now,
        it == splits.end()
            ? Layout::replicated()
            : Layout::sharded(it->second.dim, it->second.groups));
  }
  for (Operation &op : body.without_terminator())
    if (failed(partition(op))) {
      split.erase();
      return failure();
    }

  // Results: partial sums reduced; sharded ones described.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  for (auto [i, old] : llvm::enumerate(ret.getOperands())) {
    FailureOr<Value> v = resolve(ret, lookup(old));
    if (failed(v)) {
      split.erase();
      return failure();
    }
    results.push_back(*v);
    NamedAttrList attrs(forward.getResultAttrDict(i));
    Layout layout = layoutOf(*v);
    if (layout.kind == Layout::Sharded)
      attrs.set("dist.sharding", shardingOf(tensorOf(*v).getRank(), layout));
    resultAttrs.push_back(attrs.getDictionary(context));
  }
  replaceFunction(b, forward, split, ret.getLoc(), results, argAttrs,
                  resultAttrs);
  return success();
}

struct PartitionPass : fsdp::impl::PartitionPassBase<PartitionPass> {
  using PartitionPassBase::PartitionPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp forward = lookupEntry(module, entry, "partition");
    if (!forward)
      return signalPassFailure();
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

//===- LayerLoops.cpp - Calls of a layer function as a loop ---------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "LayerLoops.h"

#include "llvm/ADT/DenseSet.h"

#include <map>

using namespace mlir;
using namespace fsdp;

namespace {

/// Where one call of a run takes one input from.
struct Source {
  enum Kind { Argument, Result, Other } kind = Other;
  /// Argument: the step's argument number; Result: the result number.
  int64_t number = 0;
  /// Result: slot `slot` of run `run`'s table of that result (call i's
  /// result is in slot i + 1; slot 0 holds the seed of a carried input).
  unsigned run = 0;
  int64_t slot = 0;
  /// Other: the value.
  Value value;

  bool operator==(const Source &o) const {
    return kind == o.kind && number == o.number && run == o.run &&
           slot == o.slot && value == o.value;
  }
};

/// How the loop reads one input of the function in iteration i.
struct Input {
  enum Kind {
    /// The same handle in every iteration: `first`.
    Invariant,
    /// Program argument `base + step · i`.
    Arguments,
    /// Slot `base + step · i` of the table of result `result` of the
    /// earlier run `run`.
    Table,
    /// Result `result` of this run's previous call; `first` in iteration 0.
    Carried,
    /// Anything else: the handles `all`, put in a table before the loop.
    Gathered,
  } kind = Gathered;
  Source first;
  /// Table: a handle the loop reads from slot 0 of the table, which the
  /// run puts there first (the boundary layer a loop left out).
  std::optional<Source> slotZero;
  int64_t base = 0, step = 0;
  unsigned run = 0, result = 0;
  SmallVector<Source> all;
  /// The input's type: a tensor or a future.
  Type type;
};

/// Adjacent calls of one layer function.
struct Run {
  SmallVector<func::CallOp> calls;
  SmallVector<Input> inputs;
  /// Per result of the function: whether the loop keeps it in a table
  /// (slot i + 1 holds call i's result; slot 0 a carried input's seed).
  SmallVector<bool> tabled;
  SmallVector<Value> tables;
};

/// `xs` as `base + step · i`, if it is one.
std::optional<std::pair<int64_t, int64_t>> affine(ArrayRef<int64_t> xs) {
  int64_t step = xs.size() > 1 ? xs[1] - xs[0] : 0;
  for (auto [i, x] : llvm::enumerate(xs))
    if (x != xs[0] + step * static_cast<int64_t>(i))
      return std::nullopt;
  return std::make_pair(xs[0], step);
}

} // namespace

struct LayerLoops::Analysis {
  Block *body = nullptr;
  std::vector<Run> runs;
  /// Each call of a run: (run, index in the run).
  DenseMap<Operation *, std::pair<unsigned, unsigned>> callIndex;
  /// The seeds of carried inputs: (run, result) whose table's slot 0 holds
  /// the value.
  DenseMap<Value, std::pair<unsigned, unsigned>> seeds;
  /// What slot 0 of each table (run, result) holds, where something does.
  std::map<std::pair<unsigned, unsigned>, Source> slotZero;

  Source source(Value v) const;
  /// Decides how run `r` reads each input; false when it cannot loop
  /// (a call reads a result of its run other than the previous call's).
  bool classify(unsigned r);
  /// Whether `input` of run `r` reads a table at `base + step · i` but in
  /// its first or last iteration, where the line reaches slot 0 and the
  /// handle can go there; if so, makes `input` that Table.
  bool tableAndSlotZero(unsigned r, Input &input);
  void markTabled(const Source &s) {
    if (s.kind == Source::Result)
      runs[s.run].tabled[s.number] = true;
  }
};

Source LayerLoops::Analysis::source(Value v) const {
  Source s;
  if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == body) {
    s.kind = Source::Argument;
    s.number = arg.getArgNumber();
    return s;
  }
  if (auto result = dyn_cast<OpResult>(v))
    if (auto it = callIndex.find(result.getOwner()); it != callIndex.end()) {
      s.kind = Source::Result;
      s.number = result.getResultNumber();
      s.run = it->second.first;
      s.slot = it->second.second + 1;
      return s;
    }
  if (auto it = seeds.find(v); it != seeds.end()) {
    s.kind = Source::Result;
    std::tie(s.run, s.number) = it->second;
    return s;
  }
  s.value = v;
  return s;
}

bool LayerLoops::Analysis::classify(unsigned r) {
  Run &run = runs[r];
  unsigned numInputs = run.calls.front().getNumOperands();
  for (unsigned p = 0; p < numInputs; ++p) {
    Input input;
    input.type = run.calls.front().getOperand(p).getType();
    for (func::CallOp call : run.calls)
      input.all.push_back(source(call.getOperand(p)));
    ArrayRef<Source> all = input.all;
    input.first = all.front();
    auto every = [&](auto pred, size_t from = 0) {
      return llvm::all_of(all.drop_front(from), pred);
    };
    auto collect = [&](auto field, size_t from = 0) {
      SmallVector<int64_t> xs;
      for (const Source &s : all.drop_front(from))
        xs.push_back(field(s));
      return xs;
    };
    auto resultOf = [&](unsigned producer, int64_t number) {
      return [=](const Source &s) {
        return s.kind == Source::Result && s.run == producer &&
               s.number == number;
      };
    };
    const Source &second = all[1];
    if (every([&](const Source &s) { return s == all.front(); })) {
      input.kind = Input::Invariant;
    } else if (every([](const Source &s) {
                 return s.kind == Source::Argument;
               })) {
      if (auto line =
              affine(collect([](const Source &s) { return s.number; }))) {
        input.kind = Input::Arguments;
        std::tie(input.base, input.step) = *line;
      }
    } else if (second.kind == Source::Result && second.run == r &&
               every(resultOf(r, second.number), 1) &&
               llvm::all_of(llvm::enumerate(all.drop_front()), [](auto e) {
                 return e.value().slot == int64_t(e.index()) + 1;
               })) {
      input.kind = Input::Carried;
      input.result = second.number;
      run.tabled[second.number] = true;
    } else if (input.first.kind == Source::Result && input.first.run != r &&
               every(resultOf(input.first.run, input.first.number))) {
      if (auto line = affine(collect([](const Source &s) { return s.slot; }))) {
        input.kind = Input::Table;
        input.run = input.first.run;
        input.result = input.first.number;
        std::tie(input.base, input.step) = *line;
      }
    }
    if (input.kind == Input::Gathered && !tableAndSlotZero(r, input) &&
        llvm::any_of(all, [&](const Source &s) {
          return s.kind == Source::Result && s.run == r;
        }))
      return false;
    run.inputs.push_back(std::move(input));
  }
  return true;
}

bool LayerLoops::Analysis::tableAndSlotZero(unsigned r, Input &input) {
  ArrayRef<Source> all = input.all;
  int64_t n = all.size();
  if (n < 3)
    return false;
  for (int64_t odd : {int64_t(0), n - 1}) {
    const Source &ref = all[odd == 0 ? 1 : 0];
    if (ref.kind != Source::Result || ref.run == r)
      continue;
    // The line through the other iterations.
    int64_t j0 = odd == 0 ? 1 : 0, j1 = j0 + 1;
    int64_t step = all[j1].slot - all[j0].slot, base = ref.slot - step * j0;
    bool onLine = llvm::all_of(llvm::enumerate(all), [&](auto e) {
      const Source &s = e.value();
      return int64_t(e.index()) == odd ||
             (s.kind == Source::Result && s.run == ref.run &&
              s.number == ref.number &&
              s.slot == base + step * int64_t(e.index()));
    });
    const Source &extra = all[odd];
    if (!onLine || base + step * odd != 0 ||
        (extra.kind == Source::Result && extra.run == r))
      continue;
    auto [it, added] =
        slotZero.try_emplace({ref.run, unsigned(ref.number)}, extra);
    if (!added && !(it->second == extra))
      continue;
    input.kind = Input::Table;
    input.run = ref.run;
    input.result = ref.number;
    input.base = base;
    input.step = step;
    input.slotZero = extra;
    return true;
  }
  return false;
}

LayerLoops::LayerLoops(func::FuncOp entry)
    : analysis(std::make_unique<Analysis>()) {
  Analysis &a = *analysis;
  a.body = &entry.getBody().front();
  SmallVector<SmallVector<func::CallOp>> candidates;
  func::CallOp previous;
  for (Operation &op : *a.body) {
    auto call = dyn_cast<func::CallOp>(op);
    if (call && previous && previous.getCallee() == call.getCallee())
      candidates.back().push_back(call);
    else if (call)
      candidates.push_back({call});
    previous = call;
  }
  for (SmallVector<func::CallOp> &calls : candidates) {
    if (calls.size() < 2)
      continue;
    unsigned r = a.runs.size();
    Run &run = a.runs.emplace_back();
    run.calls = std::move(calls);
    run.tabled.assign(run.calls.front().getNumResults(), false);
    for (auto [i, call] : llvm::enumerate(run.calls))
      a.callIndex[call] = {r, unsigned(i)};
    if (a.classify(r)) {
      // Later runs find a carried input's seed in slot 0 of its table.
      for (const Input &input : a.runs[r].inputs)
        if (input.kind == Input::Carried && input.first.kind == Source::Other) {
          a.seeds.try_emplace(input.first.value, r, input.result);
          a.slotZero.try_emplace({r, input.result}, input.first);
        }
      continue;
    }
    for (func::CallOp call : run.calls)
      a.callIndex.erase(call);
    a.runs.pop_back();
  }
  // The tables: results a later loop reads by index, and results that
  // other ops (or calls left out of loops) use.
  for (Run &run : a.runs) {
    for (Input &input : run.inputs) {
      if (input.kind == Input::Table)
        a.runs[input.run].tabled[input.result] = true;
      if (input.kind == Input::Invariant || input.kind == Input::Carried)
        a.markTabled(input.first);
      if (input.slotZero)
        a.markTabled(*input.slotZero);
      if (input.kind == Input::Gathered)
        for (const Source &s : input.all)
          a.markTabled(s);
    }
    for (func::CallOp call : run.calls)
      for (OpResult result : call->getResults())
        if (llvm::any_of(result.getUsers(), [&](Operation *user) {
              return !a.callIndex.count(user);
            }))
          run.tabled[result.getResultNumber()] = true;
  }
}

LayerLoops::~LayerLoops() = default;

namespace {

/// Writes the loops into the EmitC step function.
class LoopEmitter {
public:
  LoopEmitter(LayerLoops::Analysis &a, emitc::FuncOp shell,
              LoweringState &state)
      : a(a), state(state), context(state.context), b(context),
        program(shell.getArgument(0)), i64(b.getI64Type()),
        loc(shell.getLoc()) {}

  void emitRun(Run &run);
  /// The step's results: a loop per table whose handles are results
  /// `base + step · i`, one call per other result.
  void emitReturn(func::ReturnOp ret);
  void freeTables(Operation *before);

private:
  Value literal(int64_t value) {
    return emitc::LiteralOp::create(b, loc, i64, intLiteral(value));
  }
  /// base + step · i.
  Value line(int64_t base, int64_t step, Value i) {
    if (step == 0)
      return literal(base);
    Value v = i;
    if (step != 1)
      v = emitc::MulOp::create(b, loc, i64, literal(step), v);
    if (base != 0)
      v = emitc::AddOp::create(b, loc, i64, literal(base), v);
    return v;
  }
  Value newFrame(int64_t size) {
    return Call(context, "fsdp_frame_new")
        .value(program)
        .literal(intLiteral(size))
        .emit(b, loc, state.frameType);
  }
  /// Slot `index` of `frame`, a handle for a value of `type` (a tensor or
  /// a future).
  Value get(Value frame, Value index, Type type) {
    return Call(context, state.frameGetter(type))
        .value(frame)
        .value(index)
        .emit(b, loc, state.handleOf(type));
  }
  void set(Value frame, Value index, Value handle) {
    Call(context, state.frameSetter(handle.getType()))
        .value(frame)
        .value(index)
        .value(handle)
        .emit(b, loc);
  }
  void free(Value frame) {
    Call(context, "fsdp_frame_free").value(frame).emit(b, loc);
  }
  /// The handle `s` names, read before a loop.
  Value materialize(const Source &s);
  /// Fills `table` with the handles of a Gathered `input`: the longest
  /// stretch that reads slots `a + b · i` of one earlier table by a copy
  /// loop, the rest one by one.
  void gather(Value table, const Input &input);
  /// The type of result `result` of run `run`'s function.
  Type resultType(unsigned run, unsigned result) const {
    return a.runs[run].calls.front()->getResult(result).getType();
  }
  /// What iteration `i` passes as `input`; `before` is what was read
  /// before the loop (an invariant handle or a gathered table).
  Value read(const Run &run, const Input &input, Value before, Value i);
  /// Whether `use` is one the loops take care of.
  bool looped(OpOperand &use) const {
    return a.callIndex.count(use.getOwner()) ||
           (use.getOwner() == returnOp &&
            returnLooped.count(use.getOperandNumber()));
  }

  LayerLoops::Analysis &a;
  LoweringState &state;
  MLIRContext *context;
  OpBuilder b;
  Value program;
  Type i64;
  Location loc;
  SmallVector<Value> tables;
  Operation *returnOp = nullptr;
  /// The step's results that a loop hands over.
  DenseSet<unsigned> returnLooped;
  /// Per table (run, result): the loop of results, as `base + step · i`
  /// and whether they die at the return.
  struct ResultLoop {
    unsigned run, result;
    int64_t base, step;
    bool dies;
  };
  SmallVector<ResultLoop> resultLoops;

public:
  bool hasResultLoops() const { return !resultLoops.empty(); }
  /// Finds the results of the step that loops hand over (before any run is
  /// emitted, so that their handles are not read back one by one).
  void planReturn(func::ReturnOp ret);
};

Value LoopEmitter::materialize(const Source &s) {
  switch (s.kind) {
  case Source::Argument:
    return Call(context, "fsdp_prog_arg")
        .value(program)
        .literal(intLiteral(s.number))
        .emit(b, loc, state.tensorType);
  case Source::Result:
    return get(a.runs[s.run].tables[s.number], literal(s.slot),
               resultType(s.run, s.number));
  case Source::Other:
    return UnrealizedConversionCastOp::create(
               b, loc, state.handleOf(s.value.getType()), s.value)
        .getResult(0);
  }
  llvm_unreachable("unknown source");
}

void LoopEmitter::gather(Value table, const Input &input) {
  ArrayRef<Source> all = input.all;
  auto onLine = [&](size_t i, size_t from) {
    const Source &s = all[i], &f = all[from], &g = all[from + 1];
    return s.kind == Source::Result && s.run == f.run && s.number == f.number &&
           s.slot == f.slot + (g.slot - f.slot) * int64_t(i - from);
  };
  size_t bestFrom = 0, bestLength = 0;
  for (size_t from = 0; from + 1 < all.size(); ++from) {
    if (all[from].kind != Source::Result || !onLine(from + 1, from))
      continue;
    size_t to = from + 2;
    while (to < all.size() && onLine(to, from))
      ++to;
    if (to - from > bestLength)
      std::tie(bestFrom, bestLength) = std::make_pair(from, to - from);
  }
  if (bestLength < 3)
    bestLength = 0;
  for (auto [i, s] : llvm::enumerate(all))
    if (i < bestFrom || i >= bestFrom + bestLength)
      set(table, literal(i), materialize(s));
  if (!bestLength)
    return;
  const Source &f = all[bestFrom];
  auto loop =
      emitc::ForOp::create(b, loc, literal(0), literal(bestLength), literal(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value j = loop.getInductionVar();
  set(table, line(bestFrom, 1, j),
      get(a.runs[f.run].tables[f.number],
          line(f.slot, all[bestFrom + 1].slot - f.slot, j), input.type));
}

Value LoopEmitter::read(const Run &run, const Input &input, Value before,
                        Value i) {
  switch (input.kind) {
  case Input::Invariant:
    return before;
  case Input::Arguments:
    return Call(context, "fsdp_prog_arg")
        .value(program)
        .value(line(input.base, input.step, i))
        .emit(b, loc, state.tensorType);
  case Input::Table:
    return get(a.runs[input.run].tables[input.result],
               line(input.base, input.step, i),
               resultType(input.run, input.result));
  case Input::Carried:
    return get(run.tables[input.result], i,
               run.calls.front()->getResult(input.result).getType());
  case Input::Gathered:
    return get(before, i, input.type);
  }
  llvm_unreachable("unknown input");
}

void LoopEmitter::emitRun(Run &run) {
  func::CallOp first = run.calls.front();
  loc = first.getLoc();
  b.setInsertionPoint(first);
  int64_t n = run.calls.size();
  unsigned numInputs = first.getNumOperands();
  run.tables.assign(run.tabled.size(), Value());
  for (auto [q, tabled] : llvm::enumerate(run.tabled))
    if (tabled)
      tables.push_back(run.tables[q] = newFrame(n + 1));
  SmallVector<Value> before(numInputs), gathered;
  for (auto [p, input] : llvm::enumerate(run.inputs)) {
    if (input.kind == Input::Invariant)
      before[p] = materialize(input.first);
    if (input.kind == Input::Carried)
      set(run.tables[input.result], literal(0), materialize(input.first));
    if (input.kind == Input::Table && input.slotZero)
      set(a.runs[input.run].tables[input.result], literal(0),
          materialize(*input.slotZero));
    if (input.kind != Input::Gathered)
      continue;
    gathered.push_back(before[p] = newFrame(n));
    gather(before[p], input);
  }
  Value frame = newFrame(numInputs + first.getNumResults());
  auto loop = emitc::ForOp::create(b, loc, literal(0), literal(n), literal(1));
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  for (auto [p, input] : llvm::enumerate(run.inputs))
    set(frame, literal(p), read(run, input, before[p], i));
  Call(context, first.getCallee()).value(program).value(frame).emit(b, loc);
  for (auto [q, table] : llvm::enumerate(run.tables))
    if (table)
      set(table, line(1, 1, i),
          get(frame, literal(numInputs + static_cast<int64_t>(q)),
              first.getResult(q).getType()));
  b.setInsertionPointAfter(loop);
  free(frame);
  for (Value g : gathered)
    free(g);
  // Results that ops outside the loops use, read back from the tables.
  for (auto [i, call] : llvm::enumerate(run.calls))
    for (OpResult result : call->getResults()) {
      auto outside = [&](OpOperand &use) { return !looped(use); };
      if (llvm::none_of(result.getUses(), outside))
        continue;
      Value handle =
          get(run.tables[result.getResultNumber()],
              literal(static_cast<int64_t>(i) + 1), result.getType());
      result.replaceUsesWithIf(
          UnrealizedConversionCastOp::create(b, loc, result.getType(), handle)
              .getResult(0),
          outside);
    }
  state.stats.layerCalls += n;
  ++state.stats.layerLoops;
}

void LoopEmitter::planReturn(func::ReturnOp ret) {
  returnOp = ret;
  ArrayRef<unsigned> dying = state.plan->operandsDyingAt(ret);
  // Per table: (slot, result number, dies) of the results it holds.
  std::map<std::pair<unsigned, unsigned>,
           SmallVector<std::tuple<int64_t, int64_t, bool>>>
      byTable;
  for (OpOperand &operand : ret->getOpOperands()) {
    Source s = a.source(operand.get());
    if (s.kind == Source::Result)
      byTable[{s.run, unsigned(s.number)}].push_back(
          {s.slot, operand.getOperandNumber(),
           llvm::is_contained(dying, operand.getOperandNumber())});
  }
  for (auto &[table, members] : byTable) {
    llvm::sort(members);
    SmallVector<int64_t> slots, numbers;
    for (auto [slot, number, dies] : members) {
      slots.push_back(slot);
      numbers.push_back(number);
    }
    // Every call's result (slots 1 .. n), as results `base + step · i`.
    auto slotLine = affine(slots), numberLine = affine(numbers);
    bool dies = std::get<2>(members.front());
    if (members.size() != a.runs[table.first].calls.size() || !slotLine ||
        *slotLine != std::make_pair(int64_t(1), int64_t(1)) || !numberLine ||
        llvm::any_of(members, [&](auto &m) { return std::get<2>(m) != dies; }))
      continue;
    resultLoops.push_back({table.first, table.second, numberLine->first,
                           numberLine->second, dies});
    for (int64_t number : numbers)
      returnLooped.insert(number);
  }
}

void LoopEmitter::emitReturn(func::ReturnOp ret) {
  loc = ret.getLoc();
  b.setInsertionPoint(ret);
  ArrayRef<unsigned> dying = state.plan->operandsDyingAt(ret);
  for (const ResultLoop &r : resultLoops) {
    int64_t n = a.runs[r.run].calls.size();
    auto loop =
        emitc::ForOp::create(b, loc, literal(0), literal(n), literal(1));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    state.handOverResult(b, loc, program, line(r.base, r.step, i),
                         get(a.runs[r.run].tables[r.result], line(1, 1, i),
                             resultType(r.run, r.result)),
                         r.dies);
  }
  for (OpOperand &operand : ret->getOpOperands()) {
    unsigned number = operand.getOperandNumber();
    if (returnLooped.count(number))
      continue;
    Source s;
    s.value = operand.get();
    state.handOverResult(b, loc, program, int64_t(number), materialize(s),
                         llvm::is_contained(dying, number));
  }
}

void LoopEmitter::freeTables(Operation *before) {
  b.setInsertionPoint(before);
  for (Value table : tables)
    free(table);
}

} // namespace

void LayerLoops::emit(emitc::FuncOp shell, LoweringState &state) {
  Analysis &a = *analysis;
  LoopEmitter emitter(a, shell, state);
  Block &body = shell.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  emitter.planReturn(ret);
  for (Run &run : a.runs)
    emitter.emitRun(run);
  // Without a loop of results the return pattern lowers the return.
  bool ownReturn = emitter.hasResultLoops();
  if (ownReturn)
    emitter.emitReturn(ret);
  emitter.freeTables(ret);
  if (ownReturn) {
    OpBuilder builder(ret);
    emitc::ReturnOp::create(builder, ret.getLoc(), Value());
    ret.erase();
  }
  for (Run &run : llvm::reverse(a.runs))
    for (func::CallOp call : llvm::reverse(run.calls))
      call.erase();
  // The argument reads the loops made dead.
  for (Operation &op : llvm::make_early_inc_range(body)) {
    auto cast = dyn_cast<UnrealizedConversionCastOp>(op);
    if (!cast || !cast->use_empty())
      continue;
    auto read = cast.getOperand(0).getDefiningOp<emitc::CallOpaqueOp>();
    if (!read || read.getCallee() != "fsdp_prog_arg")
      continue;
    cast.erase();
    if (read->use_empty())
      read.erase();
  }
}

//===- TPPlan.cpp - Mesh and tensor-parallel plan from parallel.json ------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-tp-plan`: builds the (dp_replicate, dp_shard, cp, tp)
// mesh of a parallel configuration and annotates the ops of every module a
// plan key matches with the style it runs under.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"
#include "TPAnnotation.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/FSDP/IR/FSDPDialect.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

namespace fsdp {
#define GEN_PASS_DEF_TPPLANPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

struct TPPlanPass : fsdp::impl::TPPlanPassBase<TPPlanPass> {
  using TPPlanPassBase::TPPlanPassBase;
  void runOnOperation() override;
  std::optional<MeshSizes> resolveConfig(ParallelConfig &parallel);

  /// Where the JSON plan goes instead of `report`, when set.
  std::shared_ptr<JsonReport> jsonReport;
};

/// Where in parallel.json `error` (`<file>: ...` or `<file>:L:C: ...`, as
/// parseParallelConfig words it) points: the line and column it names, or
/// the first occurrence of the key of the `field 'a.b'` it names. Returns the
/// location and the message without the file prefix.
std::pair<Location, std::string> configErrorLoc(MLIRContext *context,
                                                StringRef file, StringRef text,
                                                StringRef error) {
  StringRef rest = error;
  if (!rest.consume_front(file))
    return {FileLineColLoc::get(context, file, 0, 0), error.str()};
  unsigned line = 0, column = 0;
  if (rest.consume_front(":") && !rest.consumeInteger(10, line) &&
      rest.consume_front(":") && !rest.consumeInteger(10, column))
    return {FileLineColLoc::get(context, file, line, column),
            rest.drop_while([](char c) { return c == ':' || c == ' '; }).str()};
  rest = error.drop_front(file.size()).ltrim(": ");
  line = column = 0;
  size_t field = rest.find("field '");
  if (field != StringRef::npos) {
    StringRef name = rest.drop_front(field + 7).take_until(
        [](char c) { return c == '\'' || c == '['; });
    name = name.rsplit('.').second.empty() ? name : name.rsplit('.').second;
    size_t at = text.find(("\"" + name + "\"").str());
    if (at != StringRef::npos) {
      StringRef before = text.take_front(at);
      line = before.count('\n') + 1;
      column = at - (before.rfind('\n') + 1) + 1;
    }
  }
  return {FileLineColLoc::get(context, file, line, column), rest.str()};
}

/// What fsdp-tp-plan resolved, for its report.
struct PlanSummary {
  std::string arch;
  int64_t tp;
  const ParallelConfig &config;
  bool builtin;
  MeshSizes sizes;
  const std::vector<TPPlanEntry> &entries;
  ArrayRef<int64_t> modules;
  std::string unmatched;
};

/// The forward's parameters, by whether a styled op splits them over tp.
struct ParameterSplit {
  int64_t splitCount = 0, splitElements = 0;
  int64_t wholeElements = 0, wholeBytes = 0;
  /// Each parameter left whole on every rank, and its elements.
  SmallVector<std::pair<StringRef, int64_t>> whole;
};

ParameterSplit splitParameters(func::FuncOp forward) {
  llvm::DenseSet<unsigned> split;
  forward.walk([&](Operation *op) {
    if (std::optional<TPStyle> style = tp::decode(op))
      for (auto [v, dim] : tp::splitOperands(op, *style))
        if (auto arg = dyn_cast<BlockArgument>(v))
          split.insert(arg.getArgNumber());
  });
  ParameterSplit result;
  for (BlockArgument arg : forward.getArguments()) {
    auto name = forward.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), nn::NNDialect::kParamAttrName);
    if (!name)
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    if (split.contains(arg.getArgNumber())) {
      ++result.splitCount;
      result.splitElements += type.getNumElements();
      continue;
    }
    result.wholeElements += type.getNumElements();
    result.wholeBytes +=
        type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
    result.whole.push_back({name.getValue(), type.getNumElements()});
  }
  return result;
}

/// The plan report as a table: each entry's style and module count, and
/// every parameter left replicated over tp.
void printPlanTable(raw_ostream &os, const PlanSummary &plan,
                    const ParameterSplit &params) {
  os << "tensor-parallel plan: " << (plan.arch.empty() ? "?" : plan.arch)
     << ", tp = " << plan.tp << ", sequence parallel "
     << (plan.config.sequenceParallel ? "on" : "off") << ", "
     << (plan.builtin ? "built-in plan" : "plan from " + plan.config.file)
     << "\n";
  os << "mesh: dp_replicate = " << plan.sizes.dpReplicate
     << ", dp_shard = " << plan.sizes.dpShard << ", cp = " << plan.sizes.cp
     << ", tp = " << plan.sizes.tp << " (" << plan.sizes.world() << " ranks)\n";
  os << llvm::formatv("{0,-44} {1,-18} {2,-10} {3,-10} {4,-6} {5,7}\n", "entry",
                      "style", "input", "output", "local", "modules");
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const TPStyle &s = plan.entries[i].style;
    os << llvm::formatv("{0,-44} {1,-18} {2,-10} {3,-10} {4,-6} {5,7}\n",
                        plan.entries[i].pattern, s.kindName(), s.input.str(),
                        s.output.str(), s.useLocalOutput ? "yes" : "no",
                        plan.modules[i]);
  }
  os << "unmatched entries: "
     << (plan.unmatched.empty() ? "none" : plan.unmatched) << "\n";
  os << "parameters split over tp: " << params.splitCount << " ("
     << params.splitElements << " elements, 1/" << plan.tp
     << " on each rank)\n";
  os << "parameters replicated over tp: " << params.wholeElements
     << " elements, " << params.wholeBytes << " bytes on every rank\n";
  for (auto [name, elements] : params.whole)
    os << llvm::formatv("  {0,-52} {1,12}\n", name, elements);
}

/// The same report as JSON, with the table's names as keys.
llvm::json::Value planJson(const PlanSummary &plan,
                           const ParameterSplit &params) {
  llvm::json::Array entries, unmatched, whole;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const TPStyle &s = plan.entries[i].style;
    entries.push_back(llvm::json::Object{{"entry", plan.entries[i].pattern},
                                         {"style", s.kindName()},
                                         {"input", s.input.str()},
                                         {"output", s.output.str()},
                                         {"use_local_output", s.useLocalOutput},
                                         {"modules", plan.modules[i]}});
    if (plan.modules[i] == 0)
      unmatched.push_back(plan.entries[i].pattern);
  }
  for (auto [name, elements] : params.whole)
    whole.push_back(llvm::json::Object{{"name", name}, {"elements", elements}});
  return llvm::json::Object{
      {"architecture", plan.arch},
      {"tp", plan.tp},
      {"sequence_parallel", plan.config.sequenceParallel},
      {"source", plan.builtin ? "built-in" : plan.config.file},
      {"mesh", llvm::json::Object{{"dp_replicate", plan.sizes.dpReplicate},
                                  {"dp_shard", plan.sizes.dpShard},
                                  {"cp", plan.sizes.cp},
                                  {"tp", plan.sizes.tp},
                                  {"ranks", plan.sizes.world()}}},
      {"entries", std::move(entries)},
      {"unmatched", std::move(unmatched)},
      {"split_parameters",
       llvm::json::Object{{"count", params.splitCount},
                          {"elements", params.splitElements}}},
      {"replicated_parameters",
       llvm::json::Object{{"elements", params.wholeElements},
                          {"bytes", params.wholeBytes},
                          {"parameters", std::move(whole)}}}};
}

/// The configuration (the file's, then the options that override it) and
/// the mesh sizes it resolves to; emits the error and returns none when
/// either is wrong.
std::optional<MeshSizes> TPPlanPass::resolveConfig(ParallelConfig &parallel) {
  MLIRContext *context = &getContext();
  std::string error, configText;
  if (!config.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(config);
    if (!buffer) {
      emitError(FileLineColLoc::get(context, config, 0, 0),
                "cannot read parallel config: ")
          << buffer.getError().message();
      return std::nullopt;
    }
    configText = (*buffer)->getBuffer().str();
    std::optional<ParallelConfig> parsed =
        parseParallelConfig(configText, config, error);
    if (!parsed) {
      auto [loc, message] = configErrorLoc(context, config, configText, error);
      emitError(loc, message);
      return std::nullopt;
    }
    parallel = *parsed;
  }
  if (tp < 0 || worldSize < 0) {
    emitError(UnknownLoc::get(context), "tp and world-size must be >= 0");
    return std::nullopt;
  }
  if (tp > 0)
    parallel.tpSize = tp;
  if (sequenceParallel != FromConfig::Config)
    parallel.sequenceParallel = sequenceParallel == FromConfig::True;
  std::optional<MeshSizes> sizes = resolveMesh(parallel, worldSize, error);
  if (!sizes) {
    if (config.empty()) {
      emitError(UnknownLoc::get(context), error);
    } else {
      auto [loc, message] = configErrorLoc(context, config, configText, error);
      emitError(loc, message);
    }
    return std::nullopt;
  }

  return sizes;
}

void TPPlanPass::runOnOperation() {
  ModuleOp module = getOperation();
  MLIRContext *context = &getContext();
  func::FuncOp forward = lookupEntry(module, entry, "annotate");
  if (!forward)
    return signalPassFailure();

  ParallelConfig parallel;
  std::optional<MeshSizes> sizes = resolveConfig(parallel);
  if (!sizes)
    return signalPassFailure();

  // The mesh: the module's own, which must agree, or a new one.
  OpBuilder b(context);
  dist::MeshOp mesh = dist::findMesh(module);
  if (mesh) {
    if (mesh.getAxisSize("tp").value_or(1) != sizes->tp) {
      mesh.emitOpError("has tp = ")
          << mesh.getAxisSize("tp").value_or(1)
          << " but the parallel configuration asks for tp = " << sizes->tp;
      return signalPassFailure();
    }
  } else {
    b.setInsertionPointToStart(module.getBody());
    auto view = [&](ArrayRef<StringRef> axes) {
      return b.getNamedAttr("", b.getStrArrayAttr(axes));
    };
    NamedAttribute dp = view({"dp_replicate", "dp_shard"});
    dp.setName(b.getStringAttr("dp"));
    NamedAttribute dpShardCp = view({"dp_shard", "cp"});
    dpShardCp.setName(b.getStringAttr("dp_shard_cp"));
    NamedAttribute dpCp = view({"dp_replicate", "dp_shard", "cp"});
    dpCp.setName(b.getStringAttr("dp_cp"));
    mesh = dist::MeshOp::create(
        b, module.getLoc(), "mesh",
        b.getStrArrayAttr({"dp_replicate", "dp_shard", "cp", "tp"}),
        b.getDenseI64ArrayAttr(
            {sizes->dpReplicate, sizes->dpShard, sizes->cp, sizes->tp}),
        b.getDictionaryAttr({dp, dpShardCp, dpCp}));
  }
  // FSDP2Config's fields, from the file or at their defaults: a parallel
  // program follows FSDP2Manager's MixedPrecisionPolicy (bf16 parameters,
  // f32 reduction) however its mesh was given.
  module->setAttr("fsdp.reshard_after_forward",
                  b.getStringAttr(parallel.reshardAfterForward));
  module->setAttr("fsdp.defer_grad_sync",
                  b.getBoolAttr(parallel.deferGradSync));
  if (parallel.activationCheckpointing != "none")
    module->setAttr("fsdp.activation_checkpointing",
                    b.getStringAttr(parallel.activationCheckpointing));
  if (parallel.cpuOffload)
    module->setAttr("fsdp.offload", b.getUnitAttr());
  if (parallel.asyncTP)
    module->setAttr("fsdp.async_tp", b.getUnitAttr());
  if (parallel.activationMemoryBudget > 0)
    module->setAttr("fsdp.activation_memory_budget",
                    b.getF64FloatAttr(parallel.activationMemoryBudget));
  auto [forwardDepth, backwardDepth] = parallel.scheduleDepths();
  module->setAttr("fsdp.prefetch",
                  b.getDenseI64ArrayAttr({forwardDepth, backwardDepth}));
  const MixedPrecision &mp = parallel.mpPolicy;
  // The parallel config normalizes the dtypes to f32, bf16 and f16.
  auto dtype = [&](StringRef name) -> Type {
    return name == "f32"   ? Type(b.getF32Type())
           : name == "f16" ? Type(b.getF16Type())
                           : Type(b.getBF16Type());
  };
  module->setAttr(tp::kMixedPrecisionAttrName,
                  MixedPrecisionPolicyAttr::get(
                      context, dtype(mp.paramDtype), dtype(mp.reduceDtype),
                      dtype(mp.outputDtype),
                      b.getBoolAttr(mp.castForwardInputs)));
  const int64_t tpSize = sizes->tp;
  if (tpSize == 1)
    return;

  // The plan: the config's, or the family's built-in one.
  auto architecture =
      forward->getAttrOfType<StringAttr>(nn::NNDialect::kModelAttrName);
  std::string arch = architecture ? architecture.getValue().str() : "";
  std::vector<TPPlanEntry> plan;
  bool builtin = !parallel.tpPlan;
  if (builtin) {
    bool known = false;
    plan = builtinTPPlan(arch, parallel.sequenceParallel, known);
    if (!known)
      emitWarning(forward.getLoc(), "no built-in tensor-parallel plan for '")
          << arch << "'; using the Llama-style default plan";
  } else {
    plan = *parallel.tpPlan;
  }

  // Query heads must divide by tp; key/value heads must divide by tp or
  // divide it (fewer KV heads than ranks: each is repeated on the ranks of
  // its query heads, as Megatron and torchtitan do).
  WalkResult heads = forward.walk([&](nn::AttentionOp attention) {
    int64_t q = attention.getQuery().getType().getDimSize(2);
    int64_t kv = attention.getKey().getType().getDimSize(2);
    if (q % tpSize == 0 && (kv % tpSize == 0 || tpSize % kv == 0))
      return WalkResult::advance();
    attention.emitOpError("has ")
        << q << " query heads and " << kv
        << " key/value heads; the query heads must divide by tp = " << tpSize
        << " and the key/value heads divide it or be divided by it";
    return WalkResult::interrupt();
  });
  if (heads.wasInterrupted())
    return signalPassFailure();

  // Annotate: the last matching key wins, as when torch applies a plan's
  // entries in order.
  std::vector<int64_t> modules(plan.size(), 0);
  llvm::StringSet<> seenPaths;
  forward.walk([&](Operation *op) {
    auto path = op->getAttrOfType<StringAttr>("path");
    if (!path)
      return;
    for (size_t i = plan.size(); i-- > 0;) {
      if (!matchModulePath(plan[i].pattern, path.getValue().str()))
        continue;
      op->setAttr(tp::kStyleAttrName,
                  tp::encode(b, plan[i].style, plan[i].pattern));
      ++numAnnotated;
      if (seenPaths.insert(path.getValue()).second)
        ++modules[i];
      return;
    }
  });
  std::string unmatched;
  for (size_t i = 0; i < plan.size(); ++i)
    if (!modules[i])
      unmatched += (unmatched.empty() ? "'" : ", '") + plan[i].pattern + "'";
  if (!unmatched.empty()) {
    if (strictPlan) {
      emitError(forward.getLoc(),
                "tensor-parallel plan entries match no module: ")
          << unmatched;
      return signalPassFailure();
    }
    emitWarning(forward.getLoc(),
                "tensor-parallel plan entries match no module: ")
        << unmatched;
  }
  if (llvm::all_of(modules, [](int64_t n) { return n == 0; })) {
    emitError(forward.getLoc(), "the tensor-parallel plan matches no module");
    return signalPassFailure();
  }

  if (report.empty() && !jsonReport)
    return;
  PlanSummary summary{arch,   tpSize, parallel, builtin,
                      *sizes, plan,   modules,  unmatched};
  ParameterSplit params = splitParameters(forward);
  if (jsonReport) {
    if (failed(jsonReport->write(module, "plan", planJson(summary, params))))
      signalPassFailure();
    return;
  }
  auto write = [&](raw_ostream &os) {
    if (format == ReportFormat::Json)
      os << llvm::formatv("{0:2}", planJson(summary, params)) << "\n";
    else
      printPlanTable(os, summary, params);
  };
  if (failed(
          writeReport(module, report, "cannot write the plan report: ", write)))
    signalPassFailure();
}

} // namespace

std::unique_ptr<Pass>
fsdp::createTPPlanPass(const TPPlanPassOptions &options,
                       std::shared_ptr<JsonReport> report) {
  auto pass = std::make_unique<TPPlanPass>(options);
  pass->jsonReport = std::move(report);
  return pass;
}

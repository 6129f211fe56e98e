//===- TPPlan.cpp - Mesh and tensor-parallel plan from parallel.json ------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-tp-plan`: annotates the ops of every module a key of the
// parallel configuration's tensor-parallel plan matches with the style it
// runs under.
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

  /// Where the JSON plan goes instead of `report`, when set.
  std::shared_ptr<JsonReport> jsonReport;
};

/// What fsdp-tp-plan resolved, for its report.
struct PlanSummary {
  std::string arch;
  ParallelConfigAttr config;
  bool builtin;
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
  ParallelConfigAttr c = plan.config;
  os << "tensor-parallel plan: " << (plan.arch.empty() ? "?" : plan.arch)
     << ", tp = " << c.getTp() << ", sequence parallel "
     << (c.getSequenceParallel().getValue() ? "on" : "off") << ", "
     << (plan.builtin ? "built-in plan"
                      : "plan from " + c.getSource().getValue().str())
     << "\n";
  os << "mesh: dp_replicate = " << c.getDpReplicate()
     << ", dp_shard = " << c.getDpShard() << ", cp = " << c.getCp()
     << ", tp = " << c.getTp() << " (" << c.getWorld() << " ranks)\n";
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
     << params.splitElements << " elements, 1/" << c.getTp()
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
  ParallelConfigAttr c = plan.config;
  return llvm::json::Object{
      {"architecture", plan.arch},
      {"tp", c.getTp()},
      {"sequence_parallel", c.getSequenceParallel().getValue()},
      {"source", plan.builtin ? "built-in" : c.getSource().getValue().str()},
      {"mesh", llvm::json::Object{{"dp_replicate", c.getDpReplicate()},
                                  {"dp_shard", c.getDpShard()},
                                  {"cp", c.getCp()},
                                  {"tp", c.getTp()},
                                  {"ranks", c.getWorld()}}},
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

/// The plan of `config`: its own, or the built-in plan of `arch`'s family
/// (a warning and the Llama-style plan for another family); `builtin` says
/// which.
std::vector<TPPlanEntry> planOf(ParallelConfigAttr config, StringRef arch,
                                func::FuncOp forward, bool &builtin) {
  builtin = !config.getTpPlan();
  std::vector<TPPlanEntry> plan;
  if (!builtin) {
    for (Attribute entry : config.getTpPlan()) {
      auto style = cast<dist::TPStyleAttr>(entry);
      plan.push_back({style.getEntry().getValue().str(), tp::decode(style)});
    }
    return plan;
  }
  bool known = false;
  plan =
      builtinTPPlan(arch.str(), config.getSequenceParallel().getValue(), known);
  if (!known)
    emitWarning(forward.getLoc(), "no built-in tensor-parallel plan for '")
        << arch << "'; using the Llama-style default plan";
  return plan;
}

/// Query heads must divide by tp; key/value heads must divide by tp or
/// divide it (fewer KV heads than ranks: each is repeated on the ranks of
/// its query heads, as Megatron and torchtitan do).
LogicalResult checkHeads(func::FuncOp forward, int64_t tpSize) {
  WalkResult heads = forward.walk([&](nn::MultiHeadOpInterface attention) {
    int64_t q = attention.getNumHeads();
    int64_t kv = attention.getNumKeyValueHeads();
    if (q % tpSize == 0 && (kv % tpSize == 0 || tpSize % kv == 0))
      return WalkResult::advance();
    attention->emitOpError("has ")
        << q << " query heads and " << kv
        << " key/value heads; the query heads must divide by tp = " << tpSize
        << " and the key/value heads divide it or be divided by it";
    return WalkResult::interrupt();
  });
  return failure(heads.wasInterrupted());
}

void TPPlanPass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp forward = lookupEntry(module, entry, "annotate");
  if (!forward)
    return signalPassFailure();
  ParallelConfigAttr config = ParallelConfigAttr::of(module);
  if (!config) {
    module.emitError("has no fsdp.parallel to take a tensor-parallel plan "
                     "from; run fsdp-parallel-config first");
    return signalPassFailure();
  }
  const int64_t tpSize = config.getTp();
  if (tpSize == 1)
    return;

  auto architecture =
      forward->getAttrOfType<StringAttr>(nn::NNDialect::kModelAttrName);
  std::string arch = architecture ? architecture.getValue().str() : "";
  bool builtin;
  std::vector<TPPlanEntry> plan = planOf(config, arch, forward, builtin);
  if (failed(checkHeads(forward, tpSize)))
    return signalPassFailure();

  // Annotate: the last matching key wins, as when torch applies a plan's
  // entries in order.
  Builder b(&getContext());
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
  PlanSummary summary{arch, config, builtin, plan, modules, unmatched};
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

//===- CommReport.cpp - Static communication volume of one step -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-comm-report`. The byte convention is the runtime's
// (lib/Runtime/Host/Collectives.cpp counts with the same formulas), so a run
// of one step reports exactly these numbers.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <map>

namespace fsdp {
#define GEN_PASS_DEF_COMMREPORTPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;

namespace {

/// Calls and bytes of one (kind, group).
struct Volume {
  int64_t calls = 0, bytes = 0;
};

struct CommReportPass
    : ReportPass<CommReportPass, fsdp::impl::CommReportPassBase> {
  using ReportPass::ReportPass;

  void runOnEntry(ModuleOp module, func::FuncOp func) {
    // (kind, axis mask in mesh order) -> volume, and the group names.
    std::map<std::pair<accounting::Collective, uint32_t>, Volume> volumes;
    std::map<uint32_t, std::string> groupNames;
    SymbolTableCollection symbols;
    WalkResult walk = func.walk([&](dist::CollectiveOpInterface op) {
      auto mesh =
          symbols.lookupNearestSymbolFrom<dist::MeshOp>(op, op.getMeshAttr());
      if (!mesh) {
        op->emitOpError("has no mesh to report on");
        return WalkResult::interrupt();
      }
      uint32_t mask = axisMask(op, mesh);
      groupNames[mask] = groupName(mask, mesh);
      Volume &v = volumes[{op.getCollectiveKind(), mask}];
      ++v.calls;
      v.bytes += op.getBytesSent(groupSize(op, mesh));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    llvm::json::Array rows;
    int64_t total = 0;
    for (auto &[key, v] : volumes) {
      rows.push_back(llvm::json::Object{{"kind", accounting::nameOf(key.first)},
                                        {"group", groupNames[key.second]},
                                        {"calls", v.calls},
                                        {"bytes", v.bytes}});
      total += v.bytes;
    }
    llvm::json::Object json{{"collectives", std::move(rows)},
                            {"total_bytes", total}};
    auto table = [&](raw_ostream &os) {
      os << llvm::format("%-16s %-12s %10s %14s\n", "collective", "group",
                         "calls", "bytes sent");
      for (auto &[key, v] : volumes)
        os << llvm::format("%-16s %-12s %10lld %14lld\n",
                           accounting::nameOf(key.first),
                           groupNames[key.second].c_str(), (long long)v.calls,
                           (long long)v.bytes);
    };
    if (failed(writePassReport(module, report.get(), "communication", format,
                               output, std::move(json), table)))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace

std::unique_ptr<Pass>
fsdp::createCommReportPass(std::shared_ptr<JsonReport> report) {
  return CommReportPass::create(std::move(report));
}

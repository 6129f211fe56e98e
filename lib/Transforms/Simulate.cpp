//===- Simulate.cpp - One step's time on a hardware model -----------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Implements `fsdp-simulate`: replays the per-rank step on one compute stream
// and one stream per communicating group, the way a GPU with one NCCL
// stream per group would run it with no host synchronization, and reports
// the predicted step time, exposed communication, MFU and tokens/s per GPU,
// with a Chrome/Perfetto trace.
//
//===----------------------------------------------------------------------===//

#include "PassUtils.h"

#include "fsdp/Analysis/Hardware.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <map>

namespace fsdp {
#define GEN_PASS_DEF_SIMULATEPASS
#include "fsdp/Transforms/Passes.h.inc"
} // namespace fsdp

using namespace mlir;
using namespace fsdp;
using namespace fsdp::sim;

namespace {

/// One communicating group's stream.
struct Stream {
  std::string name;
  Placement placement;
  /// The trace's track.
  int track = 0;
  /// When the stream is next free; seconds transferring; seconds the
  /// compute stream waited for it; collectives.
  double free = 0, busy = 0, exposed = 0;
  int64_t calls = 0;
};

/// One span of the trace.
struct Span {
  int track;
  double start, duration;
  std::string name;
  /// The op's module path, FLOPs and bytes (the trace's args).
  StringRef path;
  double flops = 0, bytes = 0;
};

/// Whether `op` is a CPU-offload placement copy (nn.to_device, nn.to_host).
bool isPlacementCopy(Operation *op) {
  return isa<nn::ToDeviceOp, nn::ToHostOp>(op);
}

/// Where CPU offload's host ops run, for a module whose optimizer is on the
/// host's cores or not (optimizerOnHostCores).
struct HostPlacement {
  bool optimizerOnCores;

  /// Whether `op` runs on the host's cores: an optimizer op or squared sum
  /// placed on the host (the runtime queues it as host work,
  /// HostOptimizer.cpp).
  bool onCores(Operation *op) const {
    return optimizerOnCores && op->hasAttr("fsdp.host") &&
           isa<nn::AdamWOp, nn::SGDOp, nn::SumSquaresOp>(op);
  }
  /// Whether `op` moves data over the host link: a placement copy, or
  /// another op placed on the host (a kernel reading pinned memory).
  bool onLink(Operation *op) const {
    return isPlacementCopy(op) || (op->hasAttr("fsdp.host") && !onCores(op));
  }
};

/// The replay's totals.
struct Totals {
  double step = 0, matmul = 0, attention = 0, memory = 0, modelFlops = 0;
  /// Time on the host link under CPU offload: the placement copies and the
  /// host ops' traffic.
  double hostLink = 0;
  /// Time on the host's cores under CPU offload: the optimizer.
  double hostCpu = 0;
  /// FLOPs of the ops activation checkpointing recomputes (not model FLOPs).
  double recomputed = 0;
};

/// The name of the compute track.
constexpr int kComputeTrack = 0;

/// The step's tokens per GPU: the rank's `input_ids` times the ranks the
/// batch is split over, shared by all `world` ranks.
double tokensPerGpu(func::FuncOp step, dist::MeshOp mesh, int64_t world) {
  for (BlockArgument arg : step.getArguments()) {
    auto input = step.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), nn::NNDialect::kInputAttrName);
    if (!input || input.getValue() != "input_ids")
      continue;
    double tokens = cast<RankedTensorType>(arg.getType()).getNumElements();
    if (auto sharding = step.getArgAttrOfType<dist::ShardingAttr>(
            arg.getArgNumber(), "dist.sharding"))
      for (Attribute dim : sharding.getDims())
        for (Attribute axis : cast<ArrayAttr>(dim))
          tokens *=
              mesh.getAxisSize(cast<StringAttr>(axis).getValue()).value_or(1);
    return tokens / world;
  }
  return 0;
}

struct SimulatePass
    : EntryFunctionPass<SimulatePass, fsdp::impl::SimulatePassBase> {
  using EntryFunctionPass::EntryFunctionPass;
  static constexpr llvm::StringLiteral kPurpose = "simulate";

  void runOnEntry(ModuleOp module, func::FuncOp step) {
    FailureOr<Hardware> hw = loadHardware(module);
    if (failed(hw))
      return signalPassFailure();
    FailureOr<dist::MeshOp> found = meshForCollectives(module, step, "place");
    if (failed(found))
      return signalPassFailure();
    dist::MeshOp mesh = *found;
    SmallVector<int64_t> sizes;
    if (mesh)
      sizes.assign(mesh.getShape().begin(), mesh.getShape().end());
    int64_t world = mesh ? mesh.getNumRanks() : 1;

    Totals totals;
    std::map<uint32_t, Stream> streams;
    std::vector<Span> spans;
    // A program that offloads needs the model's host link and host cores.
    placement = HostPlacement{optimizerOnHostCores(module)};
    for (bool cores : {false, true}) {
      if (cores ? hw->hostCpuBytesPerS > 0 : hw->hostLinkBytesPerS > 0)
        continue;
      Operation *offloaded = nullptr;
      step.walk([&](Operation *op) {
        if (!offloaded &&
            (cores ? placement.onCores(op) : placement.onLink(op)))
          offloaded = op;
      });
      if (offloaded) {
        offloaded->emitOpError("is placed in host memory (offload_policy), but "
                               "the hardware model '")
            << hardware << "' has no " << (cores ? "host_cpu" : "host_link");
        return signalPassFailure();
      }
    }
    replay(step.getBody().front(), *hw, mesh, sizes, totals, streams, spans);

    double tokens = tokensPerGpu(step, mesh, world);
    auto write = [&](raw_ostream &os) {
      report(os, *hw, world, totals, streams, tokens);
    };
    if (failed(writeReport(module, output, "", write)))
      return signalPassFailure();
    if (!trace.empty()) {
      auto writeTrace = [&](raw_ostream &os) {
        emitTrace(os, *hw, streams, spans);
      };
      if (failed(writeReport(module, trace,
                             "cannot write the trace: ", writeTrace)))
        return signalPassFailure();
    }
    markAllAnalysesPreserved();
  }

  /// Reads and parses `hardware`; errors are emitted at `module`.
  FailureOr<Hardware> loadHardware(ModuleOp module) {
    if (hardware.empty()) {
      module.emitError("fsdp-simulate needs a hardware model (hardware=FILE)");
      return failure();
    }
    auto buffer = llvm::MemoryBuffer::getFile(hardware);
    if (!buffer) {
      module.emitError("cannot read the hardware model '")
          << hardware << "': " << buffer.getError().message();
      return failure();
    }
    llvm::Expected<Hardware> hw =
        parseHardware((*buffer)->getBuffer(), hardware);
    if (!hw) {
      module.emitError(llvm::toString(hw.takeError()));
      return failure();
    }
    return *hw;
  }

  /// Runs `body` on the streams: an op starts when its stream is free and
  /// its operands are ready.
  /// Where the module's host ops run; set before the replay.
  HostPlacement placement{false};

  void replay(Block &body, const Hardware &hw, dist::MeshOp mesh,
              ArrayRef<int64_t> sizes, Totals &totals,
              std::map<uint32_t, Stream> &streams, std::vector<Span> &spans) {
    DenseMap<Value, double> ready;
    DenseMap<Value, uint32_t> futureGroup;
    auto readyOf = [&](Value v) { return ready.lookup(v); };
    double compute = 0;
    // The compute stream waits for `stream` until `until`.
    auto stall = [&](Stream &stream, double until) {
      if (until <= compute)
        return;
      stream.exposed += until - compute;
      spans.push_back(
          {kComputeTrack, compute, until - compute, "wait " + stream.name});
      compute = until;
    };
    for (Operation &op : body.without_terminator()) {
      if (isa<dist::CopyOp>(op)) {
        ready[op.getResult(0)] = readyOf(op.getOperand(0));
        continue;
      }
      if (auto wait = dyn_cast<dist::WaitOp>(op)) {
        auto group = futureGroup.find(wait.getFuture());
        if (group != futureGroup.end())
          stall(streams[group->second], readyOf(wait.getFuture()));
        ready[wait.getResult()] = compute;
        continue;
      }
      if (auto collective = dyn_cast<dist::CollectiveOpInterface>(op)) {
        uint32_t mask = axisMask(collective, mesh);
        Stream &stream = streams[mask];
        if (stream.name.empty()) {
          stream.name = groupName(mask, mesh);
          stream.placement = place(sizes, mask, hw.gpusPerNode);
          stream.track = static_cast<int>(streams.size());
        }
        accounting::Collective kind = collective.getCollectiveKind();
        double bytes =
            accounting::trafficOf(kind) == accounting::Traffic::Gather
                ? bytesOf(op.getResult(0).getType())
                : bytesOf(collective.getInput().getType());
        // Routed rows: balanced routing moves the dispatch's rows each way
        // (a combine's input is a buffer sized for the worst routing).
        if (accounting::trafficOf(kind) == accounting::Traffic::Routed)
          bytes = std::min(bytes,
                           double(bytesOf(collective.getResultTensorType())));
        double duration = hw.seconds(kind, bytes, stream.placement);
        double start = std::max(stream.free, readyOf(collective.getInput()));
        if (!collective.isAsync())
          start = std::max(start, compute);
        stream.free = start + duration;
        stream.busy += duration;
        ++stream.calls;
        spans.push_back({stream.track, start, duration,
                         op.getName().stripDialect().str(), pathOf(op), 0,
                         bytes});
        ready[op.getResult(0)] = stream.free;
        if (collective.isAsync())
          futureGroup[op.getResult(0)] = mask;
        else
          stall(stream, stream.free);
        continue;
      }
      nn::OpCost cost = isa<nn::CostOpInterface>(op)
                            ? cast<nn::CostOpInterface>(op).getCost()
                            : nn::streamingCost(&op);
      // CPU offload: a placement copy moves its tensor over the host link
      // once; the optimizer streams its bytes through the host's memory, on
      // the stream (the next op waits for it); another op placed on the
      // host streams its bytes over the link.
      bool copy = isPlacementCopy(&op);
      bool hostTraffic = placement.onLink(&op);
      bool hostCpu = placement.onCores(&op);
      double duration =
          hostCpu        ? hw.hostCpuSeconds(cost.bytes)
          : !hostTraffic ? hw.seconds(cost)
          : copy         ? hw.hostSeconds(bytesOf(op.getResult(0).getType()))
                         : std::max(hw.hostSeconds(cost.bytes),
                            cost.bytes > 0 ? hw.kernelLatencyS : 0.0);
      double start = compute;
      for (Value operand : op.getOperands())
        start = std::max(start, readyOf(operand));
      compute = start + duration;
      for (Value result : op.getResults())
        ready[result] = compute;
      if (duration == 0)
        continue;
      if (op.hasAttr("fsdp.recompute"))
        totals.recomputed += cost.flops;
      else
        totals.modelFlops += cost.modelFlops;
      if (hostCpu)
        totals.hostCpu += duration;
      else if (hostTraffic)
        totals.hostLink += duration;
      else
        switch (cost.unit) {
        case nn::CostUnit::Memory:
          totals.memory += duration;
          break;
        case nn::CostUnit::Matmul:
          totals.matmul += duration;
          break;
        case nn::CostUnit::AttentionForward:
        case nn::CostUnit::AttentionBackward:
          totals.attention += duration;
          break;
        }
      spans.push_back({kComputeTrack, start, duration,
                       op.getName().getStringRef().str(), pathOf(op),
                       cost.flops, cost.bytes});
    }
    totals.step = compute;
    for (auto &[mask, stream] : streams)
      totals.step = std::max(totals.step, stream.free);
  }

  static StringRef pathOf(Operation &op) {
    if (auto path = op.getAttrOfType<StringAttr>("path"))
      return path.getValue();
    return {};
  }

  void report(raw_ostream &os, const Hardware &hw, int64_t world,
              const Totals &totals, const std::map<uint32_t, Stream> &streams,
              double tokens) {
    double exposed = 0;
    for (const auto &[mask, stream] : streams)
      exposed += stream.exposed;
    double mfu =
        totals.step > 0 ? totals.modelFlops / totals.step / hw.peakBf16 : 0;
    double tokensPerS = totals.step > 0 ? tokens / totals.step : 0;
    auto where = [&](const Stream &s) {
      if (!s.placement.crossesNodes())
        return std::string("NVLink");
      return llvm::formatv("network, {0} per node", s.placement.perNode).str();
    };
    if (format == ReportFormat::Json) {
      llvm::json::Array groups;
      for (const auto &[mask, s] : streams)
        groups.push_back(llvm::json::Object{{"group", s.name},
                                            {"ranks", s.placement.ranks},
                                            {"link", where(s)},
                                            {"calls", s.calls},
                                            {"busy_s", s.busy},
                                            {"exposed_s", s.exposed}});
      os << llvm::formatv("{0:2}", llvm::json::Value(llvm::json::Object{
                                       {"hardware", hw.name},
                                       {"ranks", world},
                                       {"step_s", totals.step},
                                       {"matmul_s", totals.matmul},
                                       {"attention_s", totals.attention},
                                       {"memory_bound_s", totals.memory},
                                       {"host_link_s", totals.hostLink},
                                       {"host_cpu_s", totals.hostCpu},
                                       {"exposed_communication_s", exposed},
                                       {"groups", std::move(groups)},
                                       {"model_flops", totals.modelFlops},
                                       {"recomputed_flops", totals.recomputed},
                                       {"mfu", mfu},
                                       {"tokens_per_gpu", tokens},
                                       {"tokens_per_s_per_gpu", tokensPerS}}))
         << "\n";
      return;
    }
    auto ms = [](double s) { return llvm::formatv("{0:f3} ms", s * 1e3); };
    auto row = [&](StringRef what, const Twine &value) {
      os << llvm::formatv("{0,-36} {1,18}\n", what, value.str());
    };
    os << "simulated step on " << hw.name << ", rank 0 of " << world << "\n";
    row("step time", ms(totals.step).str());
    row("compute: matmul", ms(totals.matmul).str());
    row("compute: attention", ms(totals.attention).str());
    row("compute: memory-bound ops", ms(totals.memory).str());
    if (totals.hostLink > 0)
      row("CPU offload: host link", ms(totals.hostLink).str());
    if (totals.hostCpu > 0)
      row("CPU offload: host cores", ms(totals.hostCpu).str());
    row("exposed communication", ms(exposed).str());
    row("model FLOPs per rank", llvm::formatv("{0:e3}", totals.modelFlops));
    if (totals.recomputed > 0)
      row("recomputed FLOPs per rank",
          llvm::formatv("{0:e3}", totals.recomputed));
    row("MFU (vs bf16 dense peak)", llvm::formatv("{0:f1}%", 100 * mfu));
    row("tokens per GPU per step", llvm::formatv("{0:f0}", tokens));
    row("tokens/s per GPU", llvm::formatv("{0:f0}", tokensPerS));
    if (streams.empty())
      return;
    os << llvm::formatv("{0,-24} {1,-20} {2,8} {3,12} {4,12}\n", "group",
                        "link", "calls", "busy ms", "exposed ms");
    for (const auto &[mask, s] : streams)
      os << llvm::formatv("{0,-24} {1,-20} {2,8} {3,12:f3} {4,12:f3}\n", s.name,
                          where(s), s.calls, s.busy * 1e3, s.exposed * 1e3);
  }

  /// The Chrome trace event format: complete events ("X") in microseconds,
  /// one thread per stream, named by metadata events.
  void emitTrace(raw_ostream &os, const Hardware &hw,
                 const std::map<uint32_t, Stream> &streams,
                 ArrayRef<Span> spans) {
    llvm::json::OStream j(os);
    auto meta = [&](StringRef what, int track, StringRef name) {
      j.object([&] {
        j.attribute("name", what);
        j.attribute("ph", "M");
        j.attribute("pid", 0);
        j.attribute("tid", track);
        j.attributeObject("args", [&] { j.attribute("name", name); });
      });
    };
    j.object([&] {
      j.attribute("displayTimeUnit", "ms");
      j.attributeArray("traceEvents", [&] {
        meta("process_name", kComputeTrack, "rank 0 on " + hw.name);
        meta("thread_name", kComputeTrack, "compute");
        for (const auto &[mask, s] : streams)
          meta("thread_name", s.track, "comm " + s.name);
        for (const Span &span : spans)
          j.object([&] {
            j.attribute("name", span.name);
            j.attribute("ph", "X");
            j.attribute("pid", 0);
            j.attribute("tid", span.track);
            j.attribute("ts", span.start * 1e6);
            j.attribute("dur", span.duration * 1e6);
            j.attributeObject("args", [&] {
              if (!span.path.empty())
                j.attribute("path", span.path);
              if (span.flops > 0)
                j.attribute("flops", span.flops);
              if (span.bytes > 0)
                j.attribute("bytes", span.bytes);
            });
          });
      });
    });
    os << "\n";
  }
};

} // namespace

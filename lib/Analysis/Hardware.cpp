//===- Hardware.cpp - The GPU and network model of fsdp-simulate ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp/Analysis/Hardware.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace mlir;
using namespace fsdp;
using namespace fsdp::sim;

Placement sim::place(ArrayRef<int64_t> sizes, uint32_t mask,
                     int64_t gpusPerNode) {
  // The ranks of rank 0's group: every combination of the group's axes.
  SmallVector<int64_t> ranks = {0};
  int64_t stride = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (mask & (1u << i)) {
      SmallVector<int64_t> next;
      for (int64_t r : ranks)
        for (int64_t k = 0; k < sizes[i]; ++k)
          next.push_back(r + k * stride);
      ranks = std::move(next);
    }
    stride *= sizes[i];
  }
  Placement p;
  p.ranks = static_cast<int64_t>(ranks.size());
  p.perNode = llvm::count_if(ranks, [&](int64_t r) { return r < gpusPerNode; });
  return p;
}

double Hardware::peakFlops(Type element) const {
  if (element && element.isBF16())
    return peakBf16;
  if (element && element.isF16())
    return peakF16;
  return peakF32;
}

double Hardware::seconds(const nn::OpCost &cost) const {
  double efficiency = 1;
  switch (cost.unit) {
  case nn::CostUnit::Memory:
    break;
  case nn::CostUnit::Matmul:
    efficiency = matmulEfficiency;
    break;
  case nn::CostUnit::AttentionForward:
    efficiency = attentionForwardEfficiency;
    break;
  case nn::CostUnit::AttentionBackward:
    efficiency = attentionBackwardEfficiency;
    break;
  }
  double flops =
      cost.flops > 0 ? cost.flops / (peakFlops(cost.dtype) * efficiency) : 0;
  double bytes = cost.bytes / (hbmBytesPerS * memoryEfficiency);
  if (flops == 0 && bytes == 0)
    return 0;
  return std::max({flops, bytes, kernelLatencyS});
}

double Hardware::seconds(accounting::Collective kind, double bytes,
                         Placement group) const {
  double n = static_cast<double>(group.ranks);
  if (group.ranks <= 1)
    return 0;
  // A group across nodes moves through the NICs of its ranks on a node
  // (one per GPU), and no faster than NVLink inside the node.
  bool network = group.crossesNodes();
  double bus = network ? std::min(nvlinkBusBytesPerS,
                                  group.perNode * networkBytesPerSPerGpu)
                       : nvlinkBusBytesPerS;
  double alpha = network ? networkLatencyS : nvlinkLatencyS;
  double share = (n - 1) / n;
  switch (accounting::trafficOf(kind)) {
  case accounting::Traffic::Gather:
  case accounting::Traffic::Scatter:
  case accounting::Traffic::Routed:
    return (n - 1) * alpha + bytes * share / bus;
  case accounting::Traffic::Reduce: {
    double arBus = network ? bus : nvlinkAllReduceBusBytesPerS;
    double ring = 2 * (n - 1) * alpha + 2 * bytes * share / arBus;
    double tree = 2 * std::ceil(std::log2(n)) * alpha + 2 * bytes / arBus;
    return std::min(ring, tree);
  }
  case accounting::Traffic::Shift:
    return alpha + bytes / bus;
  case accounting::Traffic::Root:
    return (n - 1) * alpha + bytes / bus;
  }
  return 0;
}

namespace {

/// Reads the fields of one JSON object, each once; reports the first
/// problem with the file and the field's dotted path.
class Reader {
public:
  Reader(StringRef file) : file(file.str()) {}

  /// Keeps the first problem.
  void error(const Twine &message) {
    if (!failure)
      failure = (file + ": " + message).str();
  }

  /// A positive number at `path` ("a.b") in `root`; 0 after an error.
  double positive(const llvm::json::Object &root, StringRef path) {
    const llvm::json::Value *v = find(root, path);
    if (!v)
      return 0;
    std::optional<double> x = v->getAsNumber();
    if (!x || !(*x > 0) || !std::isfinite(*x)) {
      error("field '" + path + "' must be a positive number");
      return 0;
    }
    return *x;
  }

  /// A fraction in (0, 1] at `path`.
  double fraction(const llvm::json::Object &root, StringRef path) {
    double x = positive(root, path);
    if (x > 1)
      error("field '" + path + "' must be in (0, 1], got " +
            llvm::formatv("{0}", x).str());
    return x;
  }

  /// Fails on a key of `object` (at `where`) not in `known`.
  void onlyKnown(const llvm::json::Object &object, StringRef where,
                 ArrayRef<StringRef> known) {
    for (const auto &kv : object)
      if (!llvm::is_contained(known, StringRef(kv.first)))
        error("unknown field '" + where + kv.first.str() + "'");
  }

  std::optional<std::string> failure;

private:
  const llvm::json::Value *find(const llvm::json::Object &root,
                                StringRef path) {
    auto [head, rest] = path.split('.');
    const llvm::json::Value *v = root.get(head);
    if (v && !rest.empty()) {
      const llvm::json::Object *inner = v->getAsObject();
      v = inner ? inner->get(rest) : nullptr;
    }
    if (!v)
      error("missing field '" + path + "'");
    return v;
  }

  std::string file;
};

} // namespace

llvm::Expected<Hardware> sim::parseHardware(StringRef text, StringRef file) {
  auto makeError = [](const Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return makeError(file +
                     ": not valid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return makeError(file + ": expected a JSON object");
  Reader r(file);
  r.onlyKnown(*root, "",
              {"name", "sources", "peak_flops", "hbm_bytes_per_s", "efficiency",
               "kernel_latency_s", "gpus_per_node", "nvlink", "network",
               "host_link", "host_cpu"});
  auto nested = [&](StringRef key, ArrayRef<StringRef> known) {
    if (const llvm::json::Object *o = root->getObject(key))
      r.onlyKnown(*o, (key + ".").str(), known);
  };
  nested("peak_flops", {"bf16", "f16", "f32"});
  nested("efficiency",
         {"matmul", "attention_forward", "attention_backward", "memory"});
  nested("nvlink",
         {"bus_bytes_per_s", "all_reduce_bus_bytes_per_s", "latency_s"});
  nested("network", {"bytes_per_s_per_gpu", "latency_s"});
  nested("host_link", {"bytes_per_s", "latency_s"});
  nested("host_cpu", {"bytes_per_s_per_gpu", "latency_s"});

  Hardware hw;
  std::optional<StringRef> name = root->getString("name");
  if (!name)
    r.error("missing field 'name' (a string)");
  hw.name = name.value_or("").str();
  hw.peakBf16 = r.positive(*root, "peak_flops.bf16");
  hw.peakF16 = r.positive(*root, "peak_flops.f16");
  hw.peakF32 = r.positive(*root, "peak_flops.f32");
  hw.hbmBytesPerS = r.positive(*root, "hbm_bytes_per_s");
  hw.matmulEfficiency = r.fraction(*root, "efficiency.matmul");
  hw.attentionForwardEfficiency =
      r.fraction(*root, "efficiency.attention_forward");
  hw.attentionBackwardEfficiency =
      r.fraction(*root, "efficiency.attention_backward");
  hw.memoryEfficiency = r.fraction(*root, "efficiency.memory");
  hw.kernelLatencyS = r.positive(*root, "kernel_latency_s");
  double gpus = r.positive(*root, "gpus_per_node");
  if (gpus != std::floor(gpus))
    r.error("field 'gpus_per_node' must be a whole number");
  hw.gpusPerNode = static_cast<int64_t>(gpus);
  hw.nvlinkBusBytesPerS = r.positive(*root, "nvlink.bus_bytes_per_s");
  hw.nvlinkAllReduceBusBytesPerS =
      r.positive(*root, "nvlink.all_reduce_bus_bytes_per_s");
  hw.nvlinkLatencyS = r.positive(*root, "nvlink.latency_s");
  hw.networkBytesPerSPerGpu = r.positive(*root, "network.bytes_per_s_per_gpu");
  hw.networkLatencyS = r.positive(*root, "network.latency_s");
  // Optional: only programs with CPU offload use it.
  if (root->get("host_link")) {
    hw.hostLinkBytesPerS = r.positive(*root, "host_link.bytes_per_s");
    hw.hostLinkLatencyS = r.positive(*root, "host_link.latency_s");
  }
  if (root->get("host_cpu")) {
    hw.hostCpuBytesPerS = r.positive(*root, "host_cpu.bytes_per_s_per_gpu");
    hw.hostCpuLatencyS = r.positive(*root, "host_cpu.latency_s");
  }
  if (r.failure)
    return makeError(*r.failure);
  return hw;
}

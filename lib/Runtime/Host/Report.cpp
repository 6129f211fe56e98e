//===- Report.cpp - Tensor dumps and the counter report -------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "fsdp/Runtime/Accounting.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <sys/stat.h>

using namespace fsdp::host;

namespace {

void makeDir(const std::string &dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    fail("dump", dir + ": cannot create directory");
}

void dumpOne(FILE *manifest, const std::string &dir, const std::string &name,
             const fsdp_tensor *t) {
  std::string path = dir + "/" + name + ".bin";
  FILE *f = std::fopen(path.c_str(), "wb");
  std::vector<char> image = download(t);
  if (!f || std::fwrite(image.data(), 1, image.size(), f) != image.size())
    fail("dump", path + ": write failed");
  std::fclose(f);
  std::string dims;
  for (int64_t i = 0; i < t->type.rank; ++i)
    dims += (i ? "x" : "") + std::to_string(t->type.dims[i]);
  std::fprintf(manifest, "%s %s %s\n", name.c_str(), dtypeName(t->type.dtype),
               t->type.rank ? dims.c_str() : "scalar");
}

} // namespace

std::string fsdp::host::groupName(const fsdp_program &p, uint32_t mask) {
  std::string s;
  for (size_t i = 0; i < p.axes.size(); ++i)
    if (mask & (1u << i))
      s += (s.empty() ? "" : ",") + p.axes[i].name;
  return "{" + s + "}";
}

void fsdp::host::dumpTensors(const fsdp_program &p, const std::string &dir,
                             DumpPart part) {
  std::string rankDir = dir + "/rank" + std::to_string(p.worldRank);
  if (part == DumpPart::Outputs) {
    FILE *manifest = std::fopen((rankDir + "/manifest.txt").c_str(), "a");
    if (!manifest)
      fail("dump", rankDir + "/manifest.txt: cannot open for appending");
    for (size_t i = 0; i < p.outputs.size(); ++i)
      dumpOne(manifest, rankDir, p.outputNames[i], p.outputs[i]);
    std::fclose(manifest);
    return;
  }
  makeDir(dir);
  makeDir(rankDir);
  FILE *manifest = std::fopen((rankDir + "/manifest.txt").c_str(), "w");
  if (!manifest)
    fail("dump", rankDir + "/manifest.txt: cannot open for writing");
  for (const Param &param : p.params)
    dumpOne(manifest, rankDir, param.name, param.tensor);
  for (const Input &in : p.inputs)
    dumpOne(manifest, rankDir, in.name, in.tensor);
  std::fclose(manifest);
  // How sharded parameters are split, for tools that join the blocks:
  // `<name> <dim> <groups> <axis,...> <inner>` (axes major first; the last
  // `inner` of them split the block the others leave, padded) for each
  // split dim.
  FILE *shards = std::fopen((rankDir + "/shards.txt").c_str(), "w");
  if (!shards)
    fail("dump", rankDir + "/shards.txt: cannot open for writing");
  for (const Param &param : p.params)
    for (size_t d = 0; d < param.dimAxes.size(); ++d)
      if (param.dimAxes[d]) {
        std::string axes;
        for (int axis : param.dimOrder[d])
          axes += (axes.empty() ? "" : ",") + p.axes[size_t(axis)].name;
        std::fprintf(shards, "%s %zu %lld %s %lld\n", param.name.c_str(), d,
                     (long long)param.dimGroups[d], axes.c_str(),
                     (long long)param.dimInner[d]);
      }
  // A context-parallel sequence split is load-balanced (group count -2 per
  // round).
  auto axisList = [&](uint32_t mask) {
    std::string axes;
    for (size_t i = 0; i < p.axes.size(); ++i)
      if (mask >> i & 1)
        axes += (axes.empty() ? "" : ",") + p.axes[i].name;
    return axes;
  };
  for (const Input &in : p.inputs) {
    if (in.batchAxes)
      std::fprintf(shards, "%s 0 1 %s\n", in.name.c_str(),
                   axisList(in.batchAxes).c_str());
    if (in.sequenceAxes)
      std::fprintf(shards, "%s 1 %lld %s\n", in.name.c_str(),
                   (long long)(-2 * in.sequenceRounds),
                   axisList(in.sequenceAxes).c_str());
  }
  for (const auto &[index, dims] : p.outputSplits)
    for (size_t d = 0; d < dims.size(); ++d)
      if (!dims[d].first.empty()) {
        std::string axes;
        for (int axis : dims[d].first)
          axes += (axes.empty() ? "" : ",") + p.axes[size_t(axis)].name;
        std::fprintf(shards, "%s %zu %lld %s\n",
                     p.outputNames[size_t(index)].c_str(), d,
                     (long long)dims[d].second, axes.c_str());
      }
  // The mesh, so tools can place each rank: `<axis> <size>` in order.
  FILE *mesh = std::fopen((rankDir + "/mesh.txt").c_str(), "w");
  if (!mesh)
    fail("dump", rankDir + "/mesh.txt: cannot open for writing");
  for (const MeshAxis &axis : p.axes)
    std::fprintf(mesh, "%s %lld\n", axis.name.c_str(), (long long)axis.size);
  std::fclose(mesh);
  std::fclose(shards);
}

void fsdp::host::printReport(const fsdp_program &p,
                             const std::vector<int64_t> &attentionPairs) {
  static const char *kernelNames[] = {
      "gemm",    "elementwise", "norm",      "rotary",        "attention",
      "softmax", "loss",        "embedding", "data_movement", "optimizer"};
  std::printf("== report (rank %d of %d, mesh %s) ==\n", p.worldRank,
              p.worldSize, meshString(p).c_str());
  std::printf("host threads per rank: %d (OMP_NUM_THREADS, or the node's "
              "processors over its %d local ranks within the affinity "
              "mask)\n",
              hostThreadCount(), p.localRanks);
  std::printf("kernel isa: %s\n", fsdp_rt_kernel_isa());
  std::printf("memory: current %lld bytes, peak %lld bytes\n",
              (long long)fsdp_rt_memory_current(),
              (long long)fsdp_rt_memory_peak());
  std::printf("memory reserved by the backend: peak %lld bytes\n",
              (long long)fsdp_rt_memory_reserved_peak());
  if (hostMemoryPeak() > 0)
    std::printf("host memory (CPU offload): current %lld bytes, peak %lld "
                "bytes\n",
                (long long)hostMemoryCurrent(), (long long)hostMemoryPeak());
  if (!p.memoryPlan.bytes.empty())
    std::printf("memory plan: arena %lld bytes, %lld allocations checked "
                "against it\n",
                (long long)p.memoryPlan.arena, (long long)p.memoryPlan.checked);
  // Waits of the host on the backend's streams inside the steps; the loss
  // read every --log-every steps is outside this count.
  std::printf("host syncs per step: %.2f (%lld in %lld steps)\n",
              p.stepsRun ? double(p.stepHostSyncs) / double(p.stepsRun) : 0.0,
              (long long)p.stepHostSyncs, (long long)p.stepsRun);
  if (p.graphReplays)
    std::printf("cuda graph: %lld of %lld steps replayed one recording; the "
                "kernel and collective counts below are of the steps run as "
                "calls and the recording\n",
                (long long)p.graphReplays, (long long)p.stepsRun);
  // Query-key pairs per head the forward attentions scored, per step and
  // rank: context parallelism's load balance.
  if (!attentionPairs.empty() && attentionPairs.front() > 0) {
    std::printf("attention pairs per step, by rank:");
    for (int64_t pairs : attentionPairs)
      std::printf(" %lld",
                  (long long)(pairs / std::max<int64_t>(1, p.stepsRun)));
    std::printf("\n");
  }
  std::printf("%-16s %10s %12s\n", "kernel class", "calls", "time (ms)");
  for (int c = 0; c < FSDP_RT_NUM_KERNEL_CLASSES; ++c) {
    auto cls = fsdp_rt_kernel_class(c);
    if (fsdp_rt_kernel_calls(cls))
      std::printf("%-16s %10lld %12.3f\n", kernelNames[c],
                  (long long)fsdp_rt_kernel_calls(cls),
                  double(fsdp_rt_kernel_time_ns(cls)) / 1e6);
  }
  // The functions that took the most kernel time.
  constexpr int kTop = 12;
  const char *names[kTop];
  int64_t calls[kTop], nanos[kTop];
  int ran = fsdp_rt_kernel_profile(kTop, names, calls, nanos);
  if (ran > 0) {
    std::printf("%-34s %10s %12s (top %d of %d)\n", "kernel function", "calls",
                "time (ms)", std::min(ran, kTop), ran);
    for (int i = 0; i < std::min(ran, kTop); ++i)
      std::printf("%-34s %10lld %12.3f\n", names[i], (long long)calls[i],
                  double(nanos[i]) / 1e6);
  }
  // How long collectives were in flight and how long the rank waited for
  // them (the exposed communication), per step and group.
  if (!overlapStats().empty()) {
    double steps = double(std::max<int64_t>(1, p.step + 1));
    std::printf("time in collectives per step (communication thread %s)\n",
                p.commThread ? "on" : "off");
    std::printf("%-12s %10s %14s %14s\n", "group", "calls", "in flight ms",
                "exposed ms");
    for (const auto &[mask, stats] : overlapStats())
      std::printf("%-12s %10.1f %14.3f %14.3f\n", groupName(p, mask).c_str(),
                  double(stats.calls) / steps,
                  double(stats.inFlightNs) / steps / 1e6,
                  double(stats.blockedNs) / steps / 1e6);
  }
  std::printf("%-16s %-12s %10s %14s\n", "collective", "group", "calls",
              "bytes sent");
  for (int k = 0; k < FSDP_RT_NUM_COLLECTIVE_KINDS; ++k)
    for (uint32_t mask = 0; mask < (1u << p.axes.size()); ++mask) {
      auto kind = fsdp_rt_collective_kind(k);
      if (int64_t calls = fsdp_rt_collective_calls(kind, mask))
        std::printf("%-16s %-12s %10lld %14lld\n",
                    fsdp::accounting::nameOf(fsdp::accounting::Collective(k)),
                    groupName(p, mask).c_str(), (long long)calls,
                    (long long)fsdp_rt_collective_bytes(kind, mask));
    }
  std::fflush(stdout);
}

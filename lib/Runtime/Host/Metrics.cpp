//===- Metrics.cpp - The step line and the metrics file -------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What rank 0 reports per logged step: the loss, the step time, the
// learning rate and the global gradient norm the step computed (its `lr`
// and `grad_sum_squares` outputs), tokens/s over all ranks and per rank,
// MFU when the device's peak is known, and the time left; with --metrics,
// the same as one JSON object per line, beside the held-out losses.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "../Common/Float.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using namespace fsdp::host;

namespace {

/// Tokens one step trains on over all ranks: this rank's `input_ids` (else
/// `labels`) times the ranks its batch and sequence are split over.
double globalTokensOf(const fsdp_program &p) {
  for (const char *name : {"input_ids", "labels"})
    for (const Input &in : p.inputs) {
      if (in.name != name)
        continue;
      double tokens = double(numElements(in.type));
      for (size_t a = 0; a < p.axes.size(); ++a)
        if ((in.batchAxes | in.sequenceAxes) & (1u << a))
          tokens *= double(p.axes[a].size);
      return tokens;
    }
  return 0;
}

/// `seconds` as 1h02m03s, 2m03s or 3s.
std::string duration(double seconds) {
  long long s = (long long)std::llround(seconds);
  char text[48];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%lldh%02lldm%02llds", s / 3600,
                  s / 60 % 60, s % 60);
  else if (s >= 60)
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%llds", s);
  return text;
}

} // namespace

bool fsdp::host::scalarOutput(const fsdp_program &p, const std::string &name,
                              double &value) {
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const fsdp_tensor *t = p.outputs[i];
    if (p.outputNames[i] != name || !t || t->type.rank != 0 ||
        t->type.dtype > FSDP_RT_F16)
      continue;
    // Not fsdp_rt_cast: reading a scalar is no kernel time of the step.
    float f = 0;
    std::vector<char> image = download(t);
    fsdp::rt::toFloat(t->type.dtype, image.data(), 1, &f);
    value = f;
    return true;
  }
  return false;
}

double fsdp::host::hardwarePeakFlops(const std::string &path,
                                     fsdp_rt_dtype dtype) {
  const char *key = dtype == FSDP_RT_BF16  ? "bf16"
                    : dtype == FSDP_RT_F16 ? "f16"
                                           : "f32";
  std::ifstream in(path);
  if (!in)
    fail("hardware", "cannot read '" + path + "'");
  nlohmann::json root = nlohmann::json::parse(in, nullptr, false);
  if (root.is_discarded())
    fail("hardware", "'" + path + "' is not valid JSON");
  auto peak = root.find("peak_flops");
  if (peak == root.end() || !peak->is_object() || !peak->contains(key) ||
      !(*peak)[key].is_number() || !((*peak)[key].get<double>() > 0))
    fail("hardware", "'" + path + "': field 'peak_flops." + key +
                         "' must be a positive number (FLOP/s)");
  return (*peak)[key].get<double>();
}

RunMetrics::RunMetrics(const fsdp_program &p, Options o)
    : p(p), o(std::move(o)), globalTokens(globalTokensOf(p)) {
  MPI_Allreduce(&p.modelFlops, &globalFlops, 1, MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
  if (this->o.file.empty() || p.worldRank != 0)
    return;
  file = std::fopen(this->o.file.c_str(), this->o.append ? "a" : "w");
  if (!file)
    fail("metrics", "cannot open '" + this->o.file + "' for writing");
}

RunMetrics::~RunMetrics() {
  if (file)
    std::fclose(file);
}

void RunMetrics::step(int64_t step, double loss, double ms, int64_t remaining) {
  if (p.worldRank != 0)
    return;
  double lr = NAN, sumSquares = NAN;
  bool hasLr = scalarOutput(p, "lr", lr);
  bool hasNorm = scalarOutput(p, "grad_sum_squares", sumSquares);
  double gradNorm = std::sqrt(sumSquares);
  double seconds = ms / 1000;
  double tokensPerS = seconds > 0 ? globalTokens / seconds : 0;
  double perRank = tokensPerS / p.worldSize;
  bool hasMfu = o.peakFlops > 0 && globalFlops > 0 && seconds > 0;
  double mfu = hasMfu ? globalFlops / seconds / (o.peakFlops * p.worldSize) : 0;
  if (!o.quiet) {
    std::string line = "step " + std::to_string(step);
    char text[96];
    std::snprintf(text, sizeof text, " loss %.6f time %.3f ms", loss, ms);
    line += text;
    if (hasLr) {
      std::snprintf(text, sizeof text, " lr %.6g", lr);
      line += text;
    }
    if (hasNorm) {
      std::snprintf(text, sizeof text, " grad_norm %.4g", gradNorm);
      line += text;
    }
    if (globalTokens > 0) {
      std::snprintf(text, sizeof text, " tokens/s %.0f (%.0f/rank)", tokensPerS,
                    perRank);
      line += text;
    }
    if (hasMfu) {
      std::snprintf(text, sizeof text, " mfu %.2f%%", 100 * mfu);
      line += text;
    }
    if (remaining > 0)
      line += " eta " + duration(seconds * double(remaining));
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  if (!file)
    return;
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"step_ms", ms},
                      {"tokens_per_s", tokensPerS},
                      {"tokens_per_s_per_rank", perRank},
                      {"memory_peak_bytes", fsdp_rt_memory_peak()}};
  if (hasLr)
    j["lr"] = lr;
  if (hasNorm)
    j["grad_norm"] = gradNorm;
  if (hasMfu)
    j["mfu"] = mfu;
  std::fprintf(file, "%s\n", j.dump().c_str());
  std::fflush(file);
}

void RunMetrics::eval(int64_t step, double loss, int64_t batches) {
  if (p.worldRank != 0)
    return;
  if (!o.quiet) {
    std::printf("eval after step %lld loss %.6f (%lld batches)\n",
                (long long)step, loss, (long long)batches);
    std::fflush(stdout);
  }
  if (file) {
    nlohmann::json j = {
        {"step", step}, {"eval_loss", loss}, {"eval_batches", batches}};
    std::fprintf(file, "%s\n", j.dump().c_str());
    std::fflush(file);
  }
}

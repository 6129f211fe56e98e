//===- Main.cpp - The main() of every generated program -------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// prog [--steps N] [--seed S] [--load F] [--save F] [--data F]
//      [--dump-dir D] [--dump-step K] [--report] [--quiet]
//
// Describes the program, checks the rank count against its mesh, creates the
// communicators, initializes or loads the parameters and runs the steps.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "../CPU/Internal.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace fsdp::host;

namespace {

struct Options {
  int64_t steps = 3;
  /// The step (0-based) whose tensors --dump-dir writes.
  int64_t dumpStep = 0;
  uint64_t seed = 0;
  std::string load, save, data, dumpDir;
  bool report = false, quiet = false;
};

const char *kUsage =
    "usage: %s [--steps N] [--seed S] [--load FILE.safetensors]\n"
    "          [--save FILE.safetensors] [--data TOKENS.bin] [--dump-dir DIR]\n"
    "          [--dump-step K] [--report] [--quiet]\n";

/// Parses the options; returns false (after printing why on rank 0) if they
/// are wrong.
bool parse(int argc, char **argv, int rank, Options &o) {
  auto bad = [&](const std::string &why) {
    if (rank == 0) {
      std::fprintf(stderr, "error: %s\n", why.c_str());
      std::fprintf(stderr, kUsage, argv[0]);
    }
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    bool hasValue = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      hasValue = true;
    }
    auto next = [&]() -> bool {
      if (hasValue)
        return true;
      if (i + 1 >= argc)
        return false;
      value = argv[++i];
      return true;
    };
    auto number = [&](int64_t &out) {
      if (!next())
        return false;
      char *end = nullptr;
      errno = 0;
      out = std::strtoll(value.c_str(), &end, 10);
      return !value.empty() && *end == '\0' && errno != ERANGE && out >= 0;
    };
    int64_t n = 0;
    if (arg == "--steps") {
      if (!number(n))
        return bad("--steps needs a non-negative integer below 2^63, got '" +
                   value + "'");
      o.steps = n;
    } else if (arg == "--dump-step") {
      if (!number(n))
        return bad("--dump-step needs a non-negative integer");
      o.dumpStep = n;
    } else if (arg == "--seed") {
      if (!number(n))
        return bad("--seed needs a non-negative integer");
      o.seed = uint64_t(n);
    } else if (arg == "--load" || arg == "--save" || arg == "--data" ||
               arg == "--dump-dir") {
      if (!next() || value.empty())
        return bad(arg + " needs a path");
      (arg == "--load"   ? o.load
       : arg == "--save" ? o.save
       : arg == "--data" ? o.data
                         : o.dumpDir) = value;
    } else if (arg == "--report" && !hasValue) {
      o.report = true;
    } else if (arg == "--quiet" && !hasValue) {
      o.quiet = true;
    } else if (arg == "--help" || arg == "-h") {
      if (rank == 0)
        std::printf(kUsage, argv[0]);
      MPI_Finalize();
      std::exit(0);
    } else {
      return bad("unknown option '" + std::string(argv[i]) + "'");
    }
  }
  if (!o.dumpDir.empty() && o.dumpStep >= o.steps)
    return bad("--dump-step " + std::to_string(o.dumpStep) +
               " is not one of the " + std::to_string(o.steps) + " steps");
  return true;
}

/// The scalar output `loss` as a double, if the program has one.
bool lossOf(const fsdp_program &p, double &loss) {
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const fsdp_tensor *t = p.outputs[i];
    if (p.outputNames[i] != "loss" || t->type.rank != 0 ||
        t->type.dtype > FSDP_RT_F16)
      continue;
    // Not fsdp_rt_cast: reading the loss is no kernel time of the step.
    float value = 0;
    std::vector<char> image = fsdp::host::download(t);
    fsdp::rt::toFloat(t->type.dtype, image.data(), 1, &value);
    loss = value;
    return true;
  }
  return false;
}

} // namespace

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  fsdp_program p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.worldSize);
  Options o;
  if (!parse(argc, argv, p.worldRank, o)) {
    MPI_Finalize();
    return 1;
  }

  fsdp_program_describe(&p);
  validate(p);
  int64_t ranks = meshRanks(p);
  if (ranks != p.worldSize) {
    if (p.worldRank == 0)
      std::fprintf(stderr,
                   "error: this program was compiled for %lld ranks (mesh "
                   "%s) but runs on %d; launch it with mpirun -np %lld\n",
                   (long long)ranks, meshString(p).c_str(), p.worldSize,
                   (long long)ranks);
    MPI_Finalize();
    return 1;
  }
  createGroups(p);
  if (o.load.empty())
    initParams(p, o.seed);
  else
    loadParams(p, o.load);
  DataOptions data{o.seed, o.data};
  prepareInputs(p, data);

  for (int64_t step = 0; step < o.steps; ++step) {
    fillInputs(p, data, step);
    auto start = std::chrono::steady_clock::now();
    fsdp_program_forward(&p);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    for (size_t i = 0; i < p.outputs.size(); ++i)
      if (!p.outputs[i])
        fail("forward",
             "the step did not set output '" + p.outputNames[i] + "'");
    double loss = 0;
    if (!o.quiet && p.worldRank == 0 && lossOf(p, loss)) {
      std::printf("step %lld loss %.6f time %.3f ms\n", (long long)step, loss,
                  ms);
      std::fflush(stdout);
    }
    if (step == o.dumpStep && !o.dumpDir.empty())
      dumpTensors(p, o.dumpDir);
    // Updated parameters and optimizer state replace the old ones.
    for (auto [out, arg] : p.updates) {
      Param &param = p.params[size_t(arg) - p.inputs.size()];
      param.tensor->borrowed = false;
      fsdp_release(param.tensor);
      param.tensor = fsdp_retain(p.outputs[size_t(out)]);
      param.tensor->borrowed = true;
    }
    for (fsdp_tensor *&t : p.outputs) {
      fsdp_release(t);
      t = nullptr;
    }
  }

  if (!o.save.empty() && p.worldRank == 0)
    saveParams(p, o.save);
  MPI_Barrier(MPI_COMM_WORLD);
  if (o.report && p.worldRank == 0)
    printReport(p);

  for (Param &param : p.params) {
    param.tensor->borrowed = false;
    fsdp_release(param.tensor);
  }
  for (Input &in : p.inputs) {
    in.tensor->borrowed = false;
    fsdp_release(in.tensor);
  }
  freeGroups(p);
  MPI_Finalize();
  return 0;
}

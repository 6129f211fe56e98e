//===- Main.cpp - The main() of every generated program -------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// prog [--steps N] [--seed S] [--data F] [--load HF] [--strict-load]
//      [--save DIR [--save-every N] [--keep K]] [--resume DIR]
//      [--consolidate DIR --output FILE] [--collective-timeout S]
//      [--dump-dir D] [--dump-step K] [--report] [--quiet] [--cuda-graph]
//      [--metrics FILE.jsonl] [--peak-tflops T | --hardware HW.json]
//      [--eval-data F [--eval-every N] [--eval-batches K]]
//
// Describes the program, checks the rank count against its mesh, creates the
// communicators, initializes, loads or resumes the parameters and runs the
// steps, reporting each logged one (RunMetrics: the step line and the
// metrics file) and the held-out loss (the program's eval step on
// --eval-data every --eval-every steps), stopping on a non-finite loss and
// saving checkpoints on the way (and on SIGTERM or SIGINT, at the next step
// boundary). With --cuda-graph (a CUDA program) the second step is recorded
// as a CUDA graph and every later step replays it.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

using namespace fsdp::host;

#ifdef FSDP_SANITIZED
// A program built with fsdp-compile --sanitize (FSDPRuntimeSanitized). Open
// MPI keeps memory until exit that leak checking would report; every other
// report stops the program with its stack.
extern "C" const char *__asan_default_options() { return "detect_leaks=0"; }
extern "C" const char *__ubsan_default_options() {
  return "print_stacktrace=1";
}
#endif

namespace {

struct Options {
  int64_t steps = 3;
  /// The step (0-based, counted from the run's start) whose tensors
  /// --dump-dir writes.
  int64_t dumpStep = 0;
  uint64_t seed = 0;
  bool seedGiven = false;
  /// --eos ID: documents end with this token; --pack: whole documents
  /// packed into rows.
  std::optional<int64_t> eos;
  bool pack = false;
  std::string load, save, resume, data, dumpDir, consolidate, output;
  std::string metrics, hardware, evalData;
  /// Evaluate every N steps (0: after the last), on K batches.
  int64_t evalEvery = 0, evalBatches = 0;
  /// The device's peak TFLOP/s (0: unknown).
  double peakTflops = 0;
  int64_t saveEvery = 0, keep = 0;
  /// Read the loss (the step's one device-to-host copy) every N steps.
  int64_t logEvery = 1;
  double collectiveTimeout = 600;
  bool report = false, quiet = false, strictLoad = false, cudaGraph = false;
  bool commThread = true;
};

const char *kUsage =
    "usage: %s [--steps N] [--seed S] [--data TOKENS.bin [--eos ID [--pack]]]\n"
    "          [--load HF.safetensors|HF.index.json|HF_DIR] [--strict-load]\n"
    "          [--save DIR [--save-every N] [--keep K]] [--resume DIR]\n"
    "          [--consolidate DIR --output FILE.safetensors]\n"
    "          [--collective-timeout SECONDS] [--dump-dir DIR]\n"
    "          [--dump-step K] [--log-every N] [--report] [--quiet]\n"
    "          [--no-comm-thread] [--cuda-graph] [--metrics FILE.jsonl]\n"
    "          [--peak-tflops TFLOPS | --hardware HARDWARE.json]\n"
    "          [--eval-data TOKENS.bin [--eval-every N] [--eval-batches K]]\n";

/// The options taking a non-negative integer, a path, or no value.
const std::pair<const char *, int64_t Options::*> kIntegers[] = {
    {"--steps", &Options::steps},
    {"--dump-step", &Options::dumpStep},
    {"--save-every", &Options::saveEvery},
    {"--keep", &Options::keep},
    {"--log-every", &Options::logEvery},
    {"--eval-every", &Options::evalEvery},
    {"--eval-batches", &Options::evalBatches}};
const std::pair<const char *, std::string Options::*> kPaths[] = {
    {"--load", &Options::load},
    {"--save", &Options::save},
    {"--data", &Options::data},
    {"--dump-dir", &Options::dumpDir},
    {"--resume", &Options::resume},
    {"--consolidate", &Options::consolidate},
    {"--output", &Options::output},
    {"--metrics", &Options::metrics},
    {"--hardware", &Options::hardware},
    {"--eval-data", &Options::evalData}};
const std::pair<const char *, bool Options::*> kFlags[] = {
    {"--report", &Options::report},
    {"--quiet", &Options::quiet},
    {"--strict-load", &Options::strictLoad},
    {"--pack", &Options::pack},
    {"--cuda-graph", &Options::cudaGraph}};

/// Finds `arg` in one of the tables above.
template <typename Member, size_t N>
Member find(const std::pair<const char *, Member> (&table)[N],
            const std::string &arg) {
  for (const auto &[name, member] : table)
    if (arg == name)
      return member;
  return nullptr;
}

/// Why the options do not go together, or "" when they do; fills in the
/// defaults that depend on others.
std::string checkCombination(Options &o) {
  if (!o.dumpDir.empty() && o.dumpStep >= o.steps)
    return "--dump-step " + std::to_string(o.dumpStep) + " is not one of the " +
           std::to_string(o.steps) + " steps";
  if (!o.load.empty() && !o.resume.empty())
    return "--load (Hugging Face weights) and --resume (a checkpoint) both "
           "give the parameters; use one";
  if ((o.saveEvery || o.keep) && o.save.empty())
    return "--save-every and --keep need --save DIR";
  if (o.consolidate.empty() != o.output.empty())
    return "--consolidate DIR and --output FILE go together";
  if (o.strictLoad && o.load.empty())
    return "--strict-load needs --load";
  if (o.peakTflops > 0 && !o.hardware.empty())
    return "--peak-tflops and --hardware both give the peak; use one";
  if ((o.evalEvery || o.evalBatches) && o.evalData.empty())
    return "--eval-every and --eval-batches need --eval-data FILE";
  if (!o.evalData.empty() && o.evalBatches == 0)
    o.evalBatches = 1;
  if (o.logEvery < 1)
    return "--log-every needs a number of steps >= 1";
  if (o.cudaGraph && !fsdp_rt_graph_supported())
    return "--cuda-graph needs a program built with fsdp-compile --target "
           "cuda; this one runs on the CPU backend";
  return "";
}

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
    int64_t Options::*integer = find(kIntegers, arg);
    if (integer || arg == "--seed" || arg == "--eos") {
      char *end = nullptr;
      errno = 0;
      int64_t n = next() ? std::strtoll(value.c_str(), &end, 10) : -1;
      if (value.empty() || *end != '\0' || errno == ERANGE || n < 0)
        return bad(arg + " needs a non-negative integer below 2^63, got '" +
                   value + "'");
      if (integer) {
        o.*integer = n;
      } else if (arg == "--eos") {
        o.eos = n;
      } else {
        o.seed = uint64_t(n);
        o.seedGiven = true;
      }
    } else if (std::string Options::*path = find(kPaths, arg)) {
      if (!next() || value.empty())
        return bad(arg + " needs a path");
      o.*path = value;
    } else if (bool Options::*flag = find(kFlags, arg); flag && !hasValue) {
      o.*flag = true;
    } else if (arg == "--no-comm-thread" && !hasValue) {
      o.commThread = false;
    } else if (arg == "--collective-timeout" || arg == "--peak-tflops") {
      bool timeout = arg == "--collective-timeout";
      char *end = nullptr;
      if (!next())
        return bad(arg + " needs a number");
      double &target = timeout ? o.collectiveTimeout : o.peakTflops;
      target = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(target >= 0 && target < 1e9) ||
          (!timeout && target == 0))
        return bad(arg +
                   (timeout ? " needs a number of seconds >= 0 (0: none), "
                              "got '"
                            : " needs a positive TFLOP/s, got '") +
                   value + "'");
    } else if (arg == "--help" || arg == "-h") {
      if (rank == 0)
        std::printf(kUsage, argv[0]);
      MPI_Finalize();
      std::exit(0);
    } else {
      return bad("unknown option '" + std::string(argv[i]) + "'");
    }
  }
  std::string why = checkCombination(o);
  return why.empty() || bad(why);
}

/// Set by SIGTERM and SIGINT: save at the next step boundary and stop.
volatile std::sig_atomic_t stopRequested = 0;

/// After recording a step: every update must have been made in place,
/// since a replay reads the parameters and state where the recording did.
void checkRecordedUpdates(fsdp_program &p) {
  for (auto [out, arg] : p.updates) {
    const Param &param = p.params[size_t(arg) - p.inputs.size()];
    if (p.outputs[size_t(out)] != param.tensor)
      failAll(p, "cuda-graph",
              "output '" + p.outputNames[size_t(out)] + "' updates '" +
                  param.name +
                  "' in a new buffer (the step reads it after its update), "
                  "so a replay would not see the update; run without "
                  "--cuda-graph");
  }
}

/// Seconds since `t`, in milliseconds.
double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t)
      .count();
}

/// One training run of the program: the parameters' start, the steps with
/// their logging, checkpoints and stops, and the end.
class TrainingRun {
public:
  TrainingRun(fsdp_program &p, const Options &o)
      : p(p),
        o(o), state{0, o.seed, o.data}, data{o.seed, o.data, o.eos, o.pack} {}

  /// Initializes, loads or resumes the parameters and prepares the inputs.
  void start();
  /// Runs the steps; false when a signal stopped the run (after saving).
  bool train();
  /// The last checkpoint, the report, and the program's tensors freed.
  void finish();

private:
  /// Step `i` of this run: its inputs, the step (as calls, recorded or
  /// replayed), its outputs checked, and the host syncs it made.
  void runStep(int64_t i, bool dump);
  /// The step's calls, and the AdamW updates it deferred to its end.
  void callStep() {
    beginStepMemory(p);
    fsdp_program_forward(&p);
    applyDeferredUpdates(p);
    endStepMemory(p);
  }
  /// Reads the loss every --log-every steps, stops every rank on a
  /// non-finite one and prints the step line.
  void log(int64_t i, int64_t step);
  /// Updated parameters and optimizer state replace the old ones.
  void keepUpdates();
  /// The step's (or eval step's) outputs let go.
  void releaseOutputs() {
    for (fsdp_tensor *&t : p.outputs) {
      fsdp_release(t);
      t = nullptr;
    }
  }
  /// The held-out loss after step `step` when one is due: the mean of the
  /// eval step's loss over --eval-batches batches of --eval-data.
  void evaluate(int64_t i, int64_t step);
  /// Saves when due; true when a signal asks every rank to stop.
  bool saveOrStop(int64_t step);
  void save() {
    saveCheckpoint(p, o.save, state, o.keep);
    lastSaved = state.step;
  }

  fsdp_program &p;
  const Options &o;
  CheckpointState state;
  DataOptions data, evalData;
  int64_t lastSaved = -1;
  std::unique_ptr<RunMetrics> metrics;
  // Step times are per logging window: from the first step's start to the
  // loss read that ends it, which on a GPU waits for the queued work.
  std::chrono::steady_clock::time_point windowStart;
  int64_t windowSteps = 0;
  double windowExcludedMs = 0;
  // --cuda-graph: the first step runs as calls (creating cuBLAS's and NCCL's
  // resources and sizing the memory pool), the second is recorded, and it
  // and every later one replay the recording, whose outputs stay the same
  // buffers.
  std::vector<fsdp_tensor *> recordedOutputs;
};

void TrainingRun::start() {
  if (!o.save.empty())
    checkCheckpointDir(p, o.save);
  if (!o.resume.empty()) {
    CheckpointState saved = loadCheckpoint(p, o.resume);
    if (o.seedGiven && saved.seed != o.seed && p.worldRank == 0)
      std::fprintf(stderr,
                   "warning: --seed %llu ignored: the checkpoint's data and "
                   "initialization use seed %llu\n",
                   (unsigned long long)o.seed, (unsigned long long)saved.seed);
    if (saved.data != o.data && p.worldRank == 0)
      std::fprintf(stderr,
                   "warning: the checkpoint was trained on --data '%s', this "
                   "run reads '%s'\n",
                   saved.data.c_str(), o.data.c_str());
    state.step = saved.step;
    state.seed = saved.seed;
  } else if (!o.load.empty()) {
    loadParams(p, o.load, o.strictLoad);
  } else {
    initParams(p, o.seed);
  }
  data.seed = state.seed;
  prepareInputs(p, data);
  if (!o.evalData.empty()) {
    if (!p.evalStep)
      failAll(p, "eval",
              "--eval-data needs a program with an eval step: compile it with "
              "fsdp-build-train-step{eval=true}");
    evalData = {state.seed, o.evalData, o.eos, o.pack};
    checkTokenFile(p, evalData);
  }
  RunMetrics::Options m;
  m.file = o.metrics;
  m.append = !o.resume.empty();
  m.peakFlops = o.peakTflops > 0 ? o.peakTflops * 1e12
                : !o.hardware.empty()
                    ? hardwarePeakFlops(o.hardware, p.computeDtype)
                    : 0;
  m.steps = o.steps;
  m.quiet = o.quiet;
  metrics = std::make_unique<RunMetrics>(p, m);
  if (!o.save.empty()) {
    std::signal(SIGTERM, [](int) { stopRequested = 1; });
    std::signal(SIGINT, [](int) { stopRequested = 1; });
  }
}

void TrainingRun::runStep(int64_t i, bool dump) {
  int64_t syncsBefore = fsdp_rt_host_syncs();
  fillInputs(p, data, p.step);
  if (dump) {
    // Not the step's own waits.
    int64_t dumpSyncs = fsdp_rt_host_syncs();
    dumpTensors(p, o.dumpDir, DumpPart::Arguments);
    syncsBefore += fsdp_rt_host_syncs() - dumpSyncs;
  }
  if (!recordedOutputs.empty()) {
    for (size_t k = 0; k < p.outputs.size(); ++k)
      p.outputs[k] = fsdp_retain(recordedOutputs[k]);
    fsdp_rt_graph_launch();
    ++p.graphReplays;
  } else if (o.cudaGraph && i == 1) {
    // Its one wait for the device is set-up, not the step's.
    int64_t beginSyncs = fsdp_rt_host_syncs();
    fsdp_rt_graph_begin();
    syncsBefore += fsdp_rt_host_syncs() - beginSyncs;
    callStep();
    fsdp_rt_graph_end();
    checkRecordedUpdates(p);
    for (fsdp_tensor *t : p.outputs)
      recordedOutputs.push_back(fsdp_retain(t));
    fsdp_rt_graph_launch();
    ++p.graphReplays;
  } else {
    callStep();
  }
  for (size_t k = 0; k < p.outputs.size(); ++k)
    if (!p.outputs[k])
      fail("forward", "the step did not set output '" + p.outputNames[k] + "'");
  // What the step itself made the host wait for; the loss read is the one
  // wait a step is allowed, every --log-every steps.
  p.stepHostSyncs += fsdp_rt_host_syncs() - syncsBefore;
  ++p.stepsRun;
}

void TrainingRun::log(int64_t i, int64_t step) {
  bool logStep = (i + 1) % o.logEvery == 0 || i + 1 == o.steps;
  if (!logStep)
    return;
  // The loss is the same on every rank (a global mean), so every rank
  // stops together on a non-finite one, before its updates are kept.
  double loss = 0;
  bool hasLoss = scalarOutput(p, "loss", loss);
  if (hasLoss && !std::isfinite(loss))
    failAll(p, "train",
            "step " + std::to_string(step) + ": the loss is " +
                (std::isnan(loss) ? "nan" : "inf") +
                "; stopping without keeping this step's update" +
                (lastSaved >= 0 || !o.resume.empty()
                     ? " (the last checkpoint is kept as it was)"
                     : ""));
  double ms = (msSince(windowStart) - windowExcludedMs) / windowSteps;
  windowSteps = 0;
  if (hasLoss)
    metrics->step(step, loss, ms, o.steps - (i + 1));
}

void TrainingRun::keepUpdates() {
  for (auto [out, arg] : p.updates) {
    Param &param = p.params[size_t(arg) - p.inputs.size()];
    param.tensor->borrowed = false;
    fsdp_release(param.tensor);
    param.tensor = fsdp_retain(p.outputs[size_t(out)]);
    param.tensor->borrowed = true;
  }
  releaseOutputs();
}

void TrainingRun::evaluate(int64_t i, int64_t step) {
  if (o.evalData.empty() ||
      !(o.evalEvery ? (i + 1) % o.evalEvery == 0 : i + 1 == o.steps))
    return;
  auto evalStart = std::chrono::steady_clock::now();
  double sum = 0;
  for (int64_t k = 0; k < o.evalBatches; ++k) {
    fillInputs(p, evalData, k);
    p.evalStep(&p);
    double loss = 0;
    if (!scalarOutput(p, "loss", loss))
      fail("eval", "the eval step did not set output 'loss'");
    sum += loss;
    releaseOutputs();
  }
  metrics->eval(step, sum / double(o.evalBatches), o.evalBatches);
  windowExcludedMs += msSince(evalStart);
}

bool TrainingRun::saveOrStop(int64_t step) {
  if (o.save.empty())
    return false;
  if (o.saveEvery && state.step % o.saveEvery == 0) {
    auto saveStart = std::chrono::steady_clock::now();
    save();
    windowExcludedMs += msSince(saveStart);
  }
  // A signal may reach one rank only: stop when any rank has one.
  int local = stopRequested, any = 0;
  MPI_Allreduce(&local, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (!any)
    return false;
  if (lastSaved != state.step)
    save();
  if (p.worldRank == 0)
    std::fprintf(stderr,
                 "stopped by a signal after step %lld; checkpoint saved in %s "
                 "(resume with --resume %s)\n",
                 (long long)step, o.save.c_str(), o.save.c_str());
  return true;
}

bool TrainingRun::train() {
  for (int64_t i = 0; i < o.steps; ++i) {
    // Steps count from the run's beginning, so that a resumed run reads the
    // data and takes the optimizer steps the uninterrupted one would.
    int64_t step = state.step;
    p.step = step;
    if (windowSteps == 0) {
      windowStart = std::chrono::steady_clock::now();
      windowExcludedMs = 0;
    }
    bool dump = i == o.dumpStep && !o.dumpDir.empty();
    runStep(i, dump);
    ++windowSteps;
    log(i, step);
    if (dump)
      dumpTensors(p, o.dumpDir, DumpPart::Outputs);
    keepUpdates();
    evaluate(i, step);
    state.step = step + 1;
    if (saveOrStop(step))
      return false;
  }
  return true;
}

void TrainingRun::finish() {
  if (!o.save.empty() && lastSaved != state.step)
    save();
  MPI_Barrier(MPI_COMM_WORLD);
  if (o.report) {
    // Every rank's attention pairs, for the load balance of context
    // parallelism.
    std::vector<int64_t> mine(size_t(p.worldSize), 0), all(mine.size());
    mine[size_t(p.worldRank)] = fsdp_rt_attention_pairs();
    MPI_Allreduce(mine.data(), all.data(), p.worldSize, MPI_INT64_T, MPI_SUM,
                  MPI_COMM_WORLD);
    if (p.worldRank == 0)
      printReport(p, all);
  }
  for (fsdp_tensor *t : recordedOutputs)
    fsdp_release(t);
  // Before the communicators go: NCCL's destroy waits for every recording
  // that holds one of their collectives.
  fsdp_rt_graph_destroy();
  for (Param &param : p.params) {
    param.tensor->borrowed = false;
    fsdp_release(param.tensor);
  }
  for (Input &in : p.inputs) {
    in.tensor->borrowed = false;
    fsdp_release(in.tensor);
  }
}

/// Initializes MPI (threads: the communication thread calls MPI beside the
/// rank's own calls) and the rank's place in the world and on its node;
/// returns whether MPI gives every thread access.
bool startMpi(int &argc, char **&argv, fsdp_program &p) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &p.worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.worldSize);
  MPI_Comm node;
  int localRanks = 1;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                      &node);
  MPI_Comm_size(node, &localRanks);
  MPI_Comm_rank(node, &p.localRank);
  MPI_Comm_free(&node);
  p.localRanks = localRanks;
  fsdp_rt_set_threads(localRanks);
  setHostThreads(localRanks);
  return provided == MPI_THREAD_MULTIPLE;
}

/// Whether the program runs on as many ranks as its mesh has; says how to
/// launch it otherwise.
bool checkRanks(const fsdp_program &p) {
  int64_t ranks = meshRanks(p);
  if (ranks == p.worldSize)
    return true;
  if (p.worldRank == 0)
    std::fprintf(stderr,
                 "error: this program was compiled for %lld ranks (mesh %s) "
                 "but runs on %d; launch it with mpirun -np %lld\n",
                 (long long)ranks, meshString(p).c_str(), p.worldSize,
                 (long long)ranks);
  return false;
}

/// Ends MPI and returns the exit status `status`.
int finalize(int status) {
  MPI_Finalize();
  return status;
}

} // namespace

int main(int argc, char **argv) {
  fsdp_program p;
  bool threadedMpi = startMpi(argc, argv, p);
  Options o;
  if (!parse(argc, argv, p.worldRank, o))
    return finalize(1);
  p.collectiveTimeout = o.collectiveTimeout;
  p.commThread = o.commThread && threadedMpi;
  // A write past a file-size limit fails with EFBIG instead of killing the
  // process, so a save reports it like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);

  fsdp_program_describe(&p);
  validate(p);
  if (!o.consolidate.empty()) {
    if (p.worldSize != 1)
      failAll(p, "consolidate", "run --consolidate in one process");
    consolidateCheckpoint(p, o.consolidate, o.output);
    return finalize(0);
  }
  if (!checkRanks(p))
    return finalize(1);
  createGroups(p);
  TrainingRun run(p, o);
  run.start();
  if (!run.train())
    return finalize(1);
  run.finish();
  freeGroups(p);
  return finalize(0);
}

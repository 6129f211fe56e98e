//===- Host.h - Internals of the host runtime -------------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The state behind the opaque handles of Program.h and the entry points that
// the runtime's `main` (Main.cpp) drives: start-up checks, communicators,
// parameter init and loading, per-step data, dumps and the report.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_HOST_HOST_H
#define FSDP_LIB_RUNTIME_HOST_HOST_H

#include "fsdp/Runtime/Program.h"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

struct fsdp_tensor {
  fsdp_type type;
  void *data = nullptr;
  int64_t refs = 1;
  /// A view (a reshape) holds a reference to the tensor whose buffer it
  /// reads, and releases it instead of freeing the buffer.
  fsdp_tensor *base = nullptr;
  /// Inputs and parameters: owned by the program, borrowed by the step.
  bool borrowed = false;
  /// A scalar whose value the host wrote and nothing rewrites (a rank's axis
  /// index): the host reads `hostValue` instead of the buffer, which on a
  /// device would wait for the stream.
  bool hostKnown = false;
  double hostValue = 0;
  /// In host memory (CPU offload, fsdp-offload's fsdp.host): allocated and
  /// counted by the host layer, not the kernel backend.
  bool host = false;
  /// In the arena of the step's memory plan, not freed on its own.
  bool planned = false;
};

namespace fsdp::host {

/// Element `i` of an integer (i32 or i64) tensor.
inline int64_t indexAt(const fsdp_tensor *t, int64_t i) {
  return t->type.dtype == FSDP_RT_I32
             ? static_cast<const int32_t *>(t->data)[i]
             : static_cast<const int64_t *>(t->data)[i];
}

/// The elements of an optional i64 tensor (positions), or null.
inline const int64_t *indices(const fsdp_tensor *t) {
  return t ? static_cast<const int64_t *>(t->data) : nullptr;
}

/// The value of the integer scalar `t` (`what` of `op` in errors): the
/// host's copy when it has one, else the buffer where the host may read it;
/// a device scalar the host did not write is an error, since reading it
/// would stall the step.
int64_t indexScalar(const char *op, const fsdp_tensor *t, const char *what);

/// The splitmix64 finalizer: a counter-based generator step, so that element
/// i of a parameter or token s of a sample is drawn without drawing the ones
/// before it.
inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct MeshAxis {
  std::string name;
  int64_t size;
};

/// A queued fsdp_op_adamw (fsdp_prog_defer_updates): its tensors, each
/// holding a reference until the update runs, and its hyperparameters.
struct PendingAdamW {
  /// new_param, new_exp_avg, new_exp_avg_sq, param, grad, exp_avg,
  /// exp_avg_sq, step, grad_scale, lr_scale (maybe null): the call's order.
  fsdp_tensor *tensors[10];
  double lr, beta1, beta2, eps, weightDecay;
};

/// The step's memory plan (fsdp_prog_memory_plan) and where the running
/// step is in it.
struct MemoryPlan {
  int64_t arena = 0;
  /// Per allocation of a step: its bytes and its offset (-1: its own).
  std::vector<int64_t> bytes, offsets;
  char *base = nullptr;
  /// The running step's next allocation; the planned buffers it holds
  /// (offset -> end of slot).
  size_t next = 0;
  std::map<int64_t, int64_t> live;
  /// Allocations checked against the plan, in all steps.
  int64_t checked = 0;
};

struct Input {
  std::string name;
  fsdp_type type;
  fsdp_tensor *tensor = nullptr;
  /// Kept in host memory (fsdp_prog_arg_on_host).
  bool host = false;
  /// The mesh axes dim 0 (the batch) is split over (data parallelism).
  uint32_t batchAxes = 0;
  /// Context parallelism: the axes its sequence is split over, in
  /// load-balanced chunks (fsdp_prog_input_sequence_split).
  uint32_t sequenceAxes = 0;
  /// The rounds of that split (fsdp_prog_input_sequence_rounds).
  int64_t sequenceRounds = 1;
  /// Positions within documents (fsdp_prog_input_documents).
  bool documents = false;
  /// The label that does not count (fsdp_prog_input_ignore), if declared.
  std::optional<int64_t> ignore;
};

struct Param {
  std::string name;
  fsdp_type type;
  fsdp_init_kind init;
  double a, b;
  fsdp_tensor *tensor = nullptr;
  /// Kept in host memory (fsdp_prog_arg_on_host).
  bool host = false;
  /// Optimizer state: zero-initialized (or resumed), laid out as its
  /// parameter, not part of Hugging Face weights.
  bool state = false;
  /// For a block of a sharded parameter: the whole tensor's dims and, per
  /// dim, the mask of mesh axes that split it. Empty when not sharded.
  std::vector<int64_t> globalDims;
  std::vector<uint32_t> dimAxes;
  /// Per dim, the splitting axes (mesh indices), major first.
  std::vector<std::vector<int>> dimOrder;
  /// Per dim, the number of groups split separately (strided sharding).
  std::vector<int64_t> dimGroups;
  /// Per dim, how many trailing axes of dimOrder split the outer block
  /// again, padded (FSDP within tensor parallelism).
  std::vector<int64_t> dimInner;
};

/// What a device collectives backend keeps per group (NCCL: the
/// communicator and its stream); defined by that backend.
struct DeviceComm;

/// The communicator of one axis set: this rank's place in it.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1;
  int rank = 0;
  DeviceComm *device = nullptr;
  /// `rank` as an i64 in backend host memory (pinned on CUDA), where
  /// fsdp_op_axis_index copies it from: a copy a CUDA graph records reads
  /// the same address at every replay, which a stack variable is not.
  int64_t *rankHost = nullptr;
};

} // namespace fsdp::host

struct fsdp_program {
  std::vector<fsdp::host::MeshAxis> axes;
  std::vector<fsdp::host::Input> inputs;
  std::vector<fsdp::host::Param> params;
  std::vector<std::string> outputNames;
  /// Split outputs: index -> per dim (axes major first, groups).
  std::map<int64_t, std::vector<std::pair<std::vector<int>, int64_t>>>
      outputSplits;
  std::vector<fsdp_tensor *> outputs;
  /// (output index, argument index): the output replaces the argument after
  /// each step.
  std::vector<std::pair<int64_t, int64_t>> updates;
  /// AdamW calls queue in pendingAdamW: until applyDeferredUpdates after the
  /// step under fsdp_prog_defer_updates, else each runs as it is queued.
  bool deferUpdates = false;
  /// fsdp_prog_optimizer_on_host_cores: offloaded optimizer ops run on the
  /// host's cores (onHostCores).
  bool optimizerOnHostCores = false;
  /// One step's model FLOPs on this rank and their dtype
  /// (fsdp_prog_model_flops; 0 when not given).
  double modelFlops = 0;
  fsdp_rt_dtype computeDtype = FSDP_RT_F32;
  /// The forward-only step (fsdp_prog_eval_step), or null.
  void (*evalStep)(fsdp_program *) = nullptr;
  std::vector<fsdp::host::PendingAdamW> pendingAdamW;
  fsdp::host::MemoryPlan memoryPlan;
  std::vector<uint32_t> groupMasks;
  /// Token range of integer inputs (fsdp_prog_input_range).
  std::map<std::string, int64_t> inputRanges;
  std::map<uint32_t, fsdp::host::Group> groups;
  int worldRank = 0, worldSize = 1;
  /// This rank's place among the ranks of its node (a GPU backend binds
  /// local rank i to device i).
  int localRank = 0, localRanks = 1;
  /// This rank's coordinate along each mesh axis.
  std::vector<int64_t> coords;
  /// The step being run (0-based), for messages.
  int64_t step = -1;
  /// Steps run, and the host synchronizations they made outside the loss
  /// reads (fsdp_rt_host_syncs), for the report.
  int64_t stepsRun = 0, stepHostSyncs = 0;
  /// Steps replayed from the recording of --cuda-graph.
  int64_t graphReplays = 0;
  /// Seconds a collective may take before every rank stops (0: forever).
  double collectiveTimeout = 600;
  /// Whether a communication thread advances started collectives while
  /// the rank computes (needs MPI_THREAD_MULTIPLE).
  bool commThread = true;
};

namespace fsdp::host {

/// Prints `fsdp runtime error: <op>: <what>` and aborts every rank. When
/// every rank fails the same way, rank 0's message is the one printed.
[[noreturn]] void fail(const char *op, const std::string &what);
/// For an error every rank finds at the same point (a bad file, a bad
/// option): rank 0 prints it, every rank finalizes MPI and exits 1.
[[noreturn]] void failAll(const fsdp_program &p, const char *op,
                          const std::string &what);
/// Stops every rank, as fail(op, ...), unless each element of the integer
/// tensor `ids` is in [0, high) or equals `ignore`.
void checkIndices(const char *op, const fsdp_tensor *ids, int64_t high,
                  const char *what,
                  int64_t ignore = std::numeric_limits<int64_t>::min());

/// The first row (or class) of the block a vocabulary-parallel op holds:
/// the i64 scalar `shard_index` times `blockSize`.
int64_t shardStart(const char *op, const fsdp_tensor *shard_index,
                   int64_t blockSize);

/// The kernels' form of a loss reduction.
inline fsdp_rt_reduction kernelReduction(fsdp_loss_reduction reduction) {
  return reduction == FSDP_LOSS_NONE  ? FSDP_RT_REDUCTION_NONE
         : reduction == FSDP_LOSS_SUM ? FSDP_RT_REDUCTION_SUM
                                      : FSDP_RT_REDUCTION_MEAN;
}

/// This rank's block index over `axes` (mesh indices, major first).
int64_t blockIndex(const fsdp_program &p, const std::vector<int> &axes);

int64_t numElements(const fsdp_type &type);
int64_t byteSize(const fsdp_type &type);
const char *dtypeName(fsdp_rt_dtype dtype);
/// `f32[2x3]`, for messages.
std::string typeString(const fsdp_type &type);
/// A new zero-filled tensor with one reference, on the side the step is
/// placing results on (fsdp_prog_placement: the device unless a host op is
/// running).
fsdp_tensor *newTensor(const fsdp_type &type);
/// A zeroed tensor in host memory if `host`, else on the device.
fsdp_tensor *newTensor(const fsdp_type &type, bool host);
/// Host memory the program holds (CPU offload), in requested bytes.
int64_t hostMemoryCurrent();
int64_t hostMemoryPeak();
/// Brackets a step (and its deferred updates): the first allocates the
/// memory plan's arena; each checks that the step made every allocation
/// the plan has and freed every planned buffer.
void beginStepMemory(fsdp_program &p);
void endStepMemory(fsdp_program &p);
/// The planned slot of the running step's next device allocation, of
/// `type`; null when there is no plan or the plan allocates it on its own.
/// Fails when the allocation does not fit the plan.
void *takePlanned(const fsdp_type &type);
/// Gives back the slot at `data` (a tensor takePlanned placed).
void releasePlanned(void *data);
/// Copies a host image of `t`'s bytes into `t` (the backend's host-to-device
/// path; every host write of tensor data goes through it).
void upload(fsdp_tensor *t, const void *host);
/// `t`'s bytes as a host image (the device-to-host path).
std::vector<char> download(const fsdp_tensor *t);
/// The scalar float output `name` as a double, if the program has one.
bool scalarOutput(const fsdp_program &p, const std::string &name,
                  double &value);

/// What a training run reports per logged step: the step line (loss, step
/// time, learning rate, gradient norm, tokens/s, MFU, ETA) and, with a
/// metrics file, one JSON object per logged step and per evaluation.
class RunMetrics {
public:
  struct Options {
    /// --metrics: the JSON-lines file (empty: none); appended to when the
    /// run resumes.
    std::string file;
    bool append = false;
    /// Peak FLOP/s of one rank's device in the step's compute dtype
    /// (--peak-tflops or --hardware; 0: unknown, no MFU).
    double peakFlops = 0;
    /// Steps in this run, for the ETA.
    int64_t steps = 0;
    bool quiet = false;
  };
  RunMetrics(const fsdp_program &p, Options o);
  ~RunMetrics();
  /// Reports step `step`, which took `ms` (the window's mean) and after
  /// which `remaining` steps of the run are left.
  void step(int64_t step, double loss, double ms, int64_t remaining);
  /// Reports the held-out loss after step `step` (`batches` batches).
  void eval(int64_t step, double loss, int64_t batches);

private:
  const fsdp_program &p;
  Options o;
  std::FILE *file = nullptr;
  /// Tokens one step trains on over all ranks, and the model FLOPs of one
  /// step over all ranks.
  double globalTokens = 0, globalFlops = 0;
};

/// The peak FLOP/s for `dtype` in a simulator hardware file
/// (docs/hardware/*.json: `peak_flops.bf16|f16|f32`); fails naming the
/// file and field.
double hardwarePeakFlops(const std::string &path, fsdp_rt_dtype dtype);

/// `{a,b}`: the mesh axes of an axis mask.
std::string groupName(const fsdp_program &p, uint32_t mask);
/// Number of ranks the mesh needs (1 without a mesh).
int64_t meshRanks(const fsdp_program &p);
/// `a=2 x b=3`, for messages.
std::string meshString(const fsdp_program &p);
/// Checks the description (names, sizes, masks, ranges); called once after
/// fsdp_program_describe on every rank.
void validate(fsdp_program &p);
/// Sets the rank's mesh coordinates, splits one communicator per group and
/// starts the collectives backend on them.
void createGroups(fsdp_program &p);
void freeGroups(fsdp_program &p);
/// The collectives transport's set-up once the groups exist (MPI: nothing;
/// NCCL: this rank's GPU, one communicator and one stream per group) and
/// its tear-down; defined by the transport (lib/Runtime/Comm).
void startCommunication(fsdp_program &p);
void stopCommunication(fsdp_program &p);

/// The group of `mask`; fails naming `op` when the program declared none.
const Group &groupOf(const fsdp_program &p, const char *op, uint32_t mask);

/// Fills elements [begin, end) of the row-major parameter `name` with its
/// initializer, drawing element i from (seed, name, i) alone, so that any
/// rank can produce any slice of any parameter.
void initFill(fsdp_rt_dtype dtype, fsdp_init_kind init, double a, double b,
              uint64_t seed, const char *name, int64_t begin, int64_t end,
              void *out);
/// A contiguous run of a block: its `count` elements from local offset
/// `local` are the whole tensor's elements from flat index `global`.
struct Run {
  int64_t local, global, count;
};
/// Where a block sits in the whole tensor, per dim: the block's and the
/// whole tensor's size and two levels of splitting. The outer level cuts the
/// dim into `groups` equal groups and splits each into `outerParts` pieces
/// (block `outer` of each); the inner level splits that outer block into
/// `innerParts` blocks of the local size, padded at its end (block
/// `inner`). Local elements in the padding belong to no element of the
/// whole tensor.
struct Layout {
  std::vector<int64_t> local, whole, groups, outerParts, outer, innerParts,
      inner;
};
/// The runs of a block, in local order; padding is in no run.
std::vector<Run> runsOf(const Layout &layout);
/// The layout of a whole, unsplit tensor of `shape`.
Layout wholeLayout(const std::vector<int64_t> &shape);
/// Why `layout` is inconsistent (its blocks do not tile the tensor), or "".
std::string checkLayout(const Layout &layout);
/// The parameter whose layout `param` has: itself, or for an optimizer
/// state, its parameter.
const Param &layoutOwner(const fsdp_program &p, const Param &param);
/// The layout of this rank's block of `param` (an optimizer state is laid
/// out as its parameter).
Layout layoutOf(const fsdp_program &p, const Param &param);

/// Allocates and initializes every parameter.
void initParams(fsdp_program &p, uint64_t seed);
/// Allocates every parameter and reads this rank's blocks from Hugging Face
/// safetensors: a file, a `model.safetensors.index.json` set or a directory
/// holding either. Optimizer state starts at zero. A tensor the program needs
/// and the files lack is an error; one the files have and the program does
/// not is a warning, or an error when `strict`.
void loadParams(fsdp_program &p, const std::string &path, bool strict);

/// Distributed checkpoints: DIR/step-<N>/ holds rank<R>.safetensors (each
/// rank's blocks of the parameters and optimizer state) and index.json (the
/// mesh, each tensor's layout, the step and the data position); DIR/latest
/// names the newest complete one.
struct CheckpointState {
  int64_t step = 0;
  uint64_t seed = 0;
  std::string data;
};
/// Writes the checkpoint of `state.step` under `dir`, atomically: files go to
/// a staging directory, are fsynced and renamed into place, and `latest`
/// moves last, so an interrupted save leaves the previous one intact. Keeps
/// the newest `keep` checkpoints (0: all).
void saveCheckpoint(const fsdp_program &p, const std::string &dir,
                    const CheckpointState &state, int64_t keep);
/// Fails (on every rank) unless `dir` can hold checkpoints.
void checkCheckpointDir(const fsdp_program &p, const std::string &dir);
/// Allocates every parameter and optimizer state and reads them from the
/// checkpoint `path` (DIR with `latest`, or one step-<N> directory), on any
/// mesh: blocks are cut from the saved ones whatever mesh saved them.
CheckpointState loadCheckpoint(fsdp_program &p, const std::string &path);
/// Writes the parameters of checkpoint `path` as one Hugging Face
/// model.safetensors at `output` (one process).
void consolidateCheckpoint(const fsdp_program &p, const std::string &path,
                           const std::string &output);

/// Options of the data inputs.
struct DataOptions {
  uint64_t seed = 0;
  /// Little-endian int32 tokens; empty for synthetic data.
  std::string path;
  /// The end-of-document token (--eos): documents of the file end with it,
  /// and a packed program's positions restart after it.
  std::optional<int64_t> eos;
  /// Whole documents packed into rows (--pack), best fit, rather than the
  /// file read straight through.
  bool pack = false;
};
/// The global batch of the token inputs: the local one times the ranks that
/// split it; 0 without token inputs.
int64_t globalBatch(const fsdp_program &p);
/// Allocates the inputs, warns about names it cannot fill and checks the
/// token file: its size, its length against one global batch and every id
/// against the vocabulary.
void prepareInputs(fsdp_program &p, const DataOptions &options);
/// prepareInputs' check of the token file (every rank fails together).
void checkTokenFile(fsdp_program &p, const DataOptions &options);
/// Fills the inputs for step `step`.
void fillInputs(fsdp_program &p, const DataOptions &options, int64_t step);

/// What dumpTensors writes: the step's arguments (parameters and inputs,
/// with the manifest and the layout files), before the step, since an
/// in-place update overwrites them; then its outputs, after it.
enum class DumpPart { Arguments, Outputs };
/// Writes `part` to `dir`/rank<r>/ and lists it in the manifest.
void dumpTensors(const fsdp_program &p, const std::string &dir, DumpPart part);
/// Runs the AdamW updates the step queued (fsdp_prog_defer_updates): one
/// fsdp_rt_adamw per group of calls that share hyperparameters,
/// gradient type, step count and gradient scale, in the order of each
/// group's first call; then drops the queue's references.
void applyDeferredUpdates(fsdp_program &p);
/// Prints memory, kernel time and collective traffic (rank 0).
void printReport(const fsdp_program &p,
                 const std::vector<int64_t> &attentionPairs);

/// CPU offload's optimizer on the host's cores (HostOptimizer.cpp). When
/// the program asks for it (fsdp_prog_optimizer_on_host_cores) and the
/// backend's buffers are not host memory (CUDA; the CPU backend under
/// FSDP_RT_HOST_ADDRESSABLE=0), an optimizer op or squared sum over host
/// tensor `t` does not run as a backend kernel reading host memory: its
/// arithmetic (Common/OptimizerMath.h) runs on this process's share of the
/// cores, queued in stream order through fsdp_rt_host_call, so the host
/// still never waits for the device.
bool onHostCores(const fsdp_program &p, const fsdp_tensor *t);
/// Shares the cores among the node's `localRanks` processes, within this
/// process's affinity mask (Common/Threads.h; OMP_NUM_THREADS sets the count
/// instead, as for the CPU backend).
void setHostThreads(int localRanks);
/// The threads a host call runs on (the report prints it).
int hostThreadCount();
/// fsdp_rt_sum_squares on the host's cores.
void queueHostSumSquares(fsdp_rt_dtype dtype, const void *x, int64_t numel,
                         float *out);
/// fsdp_rt_adamw on the host's cores; `tensors` is copied.
void queueHostAdamW(std::vector<fsdp_rt_adamw_tensor> tensors,
                    fsdp_rt_dtype gradDtype, double lr, double beta1,
                    double beta2, double eps, double weightDecay,
                    const float *step, const float *gradScale,
                    const float *lrScale);
/// fsdp_rt_sgd on the host's cores.
void queueHostSgd(float *param, float *momentumBuffer, fsdp_rt_dtype gradDtype,
                  const void *grad, int64_t numel, double lr, double momentum,
                  double weightDecay, const float *step, const float *gradScale,
                  const float *lrScale);
/// What a group's collectives cost: how many ran, how long they were in
/// flight and how long the rank blocked on them (the exposed communication;
/// all of it for a synchronous one).
struct OverlapStats {
  int64_t calls = 0, inFlightNs = 0, blockedNs = 0;
};
/// Per group mask, since the program started.
const std::map<uint32_t, OverlapStats> &overlapStats();

} // namespace fsdp::host

#endif // FSDP_LIB_RUNTIME_HOST_HOST_H

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
#include <limits>
#include <map>
#include <string>
#include <vector>

struct fsdp_tensor {
  fsdp_type type;
  void *data = nullptr;
  int64_t refs = 1;
  /// Inputs and parameters: owned by the program, borrowed by the step.
  bool borrowed = false;
};

namespace fsdp::host {

/// Element `i` of an integer (i32 or i64) tensor.
inline int64_t indexAt(const fsdp_tensor *t, int64_t i) {
  return t->type.dtype == FSDP_RT_I32
             ? static_cast<const int32_t *>(t->data)[i]
             : static_cast<const int64_t *>(t->data)[i];
}

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

struct Input {
  std::string name;
  fsdp_type type;
  fsdp_tensor *tensor = nullptr;
  /// The mesh axes dim 0 (the batch) is split over (data parallelism).
  uint32_t batchAxes = 0;
};

struct Param {
  std::string name;
  fsdp_type type;
  fsdp_init_kind init;
  double a, b;
  fsdp_tensor *tensor = nullptr;
  /// Optimizer state: zero-initialized, neither saved nor dumped.
  bool state = false;
  /// For a block of a sharded parameter: the whole tensor's dims and, per
  /// dim, the mask of mesh axes that split it. Empty when not sharded.
  std::vector<int64_t> globalDims;
  std::vector<uint32_t> dimAxes;
  /// Per dim, the splitting axes (mesh indices), major first.
  std::vector<std::vector<int>> dimOrder;
  /// Per dim, the number of groups split separately (strided sharding).
  std::vector<int64_t> dimGroups;
};

/// The communicator of one axis set: this rank's place in it.
struct Group {
  MPI_Comm comm = MPI_COMM_NULL;
  int size = 1;
  int rank = 0;
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
  std::vector<uint32_t> groupMasks;
  /// Token range of integer inputs (fsdp_prog_input_range).
  std::map<std::string, int64_t> inputRanges;
  std::map<uint32_t, fsdp::host::Group> groups;
  int worldRank = 0, worldSize = 1;
  /// This rank's coordinate along each mesh axis.
  std::vector<int64_t> coords;
};

namespace fsdp::host {

/// Prints `fsdp runtime error: <op>: <what>` and aborts every rank.
[[noreturn]] void fail(const char *op, const std::string &what);
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
/// A new zero-filled tensor with one reference.
fsdp_tensor *newTensor(const fsdp_type &type);
/// Copies a host image of `t`'s bytes into `t` (the backend's host-to-device
/// path; every host write of tensor data goes through it).
void upload(fsdp_tensor *t, const void *host);
/// `t`'s bytes as a host image (the device-to-host path).
std::vector<char> download(const fsdp_tensor *t);

/// Number of ranks the mesh needs (1 without a mesh).
int64_t meshRanks(const fsdp_program &p);
/// `a=2 x b=3`, for messages.
std::string meshString(const fsdp_program &p);
/// Checks the description (names, sizes, masks, ranges); called once after
/// fsdp_program_describe on every rank.
void validate(fsdp_program &p);
/// Sets the rank's mesh coordinates and splits one communicator per group.
void createGroups(fsdp_program &p);
void freeGroups(fsdp_program &p);

/// Fills elements [begin, end) of the row-major parameter `name` with its
/// initializer, drawing element i from (seed, name, i) alone, so that any
/// rank can produce any slice of any parameter.
void initFill(fsdp_rt_dtype dtype, fsdp_init_kind init, double a, double b,
              uint64_t seed, const char *name, int64_t begin, int64_t end,
              void *out);
/// Allocates and initializes every parameter.
void initParams(fsdp_program &p, uint64_t seed);
/// Allocates every parameter and reads it from a safetensors file.
void loadParams(fsdp_program &p, const std::string &path);
/// Writes every parameter to a safetensors file.
void saveParams(const fsdp_program &p, const std::string &path);

/// Options of the data inputs.
struct DataOptions {
  uint64_t seed = 0;
  /// Little-endian int32 tokens; empty for synthetic data.
  std::string path;
};
/// Allocates the inputs and warns about names it cannot fill.
void prepareInputs(fsdp_program &p, const DataOptions &options);
/// Fills the inputs for step `step`.
void fillInputs(fsdp_program &p, const DataOptions &options, int64_t step);

/// Writes params, inputs and outputs to `dir`/rank<r>/ with a manifest.
void dumpTensors(const fsdp_program &p, const std::string &dir);
/// Prints memory, kernel time and collective traffic (rank 0).
void printReport(const fsdp_program &p);

} // namespace fsdp::host

#endif // FSDP_LIB_RUNTIME_HOST_HOST_H

//===- Program.cpp - Program state, tensors and the description -----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

using namespace fsdp::host;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

void fsdp::host::fail(const char *op, const std::string &what) {
  int initialized = 0, rank = 0, size = 1;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  // An error every rank meets (a bad operand) would print once per rank:
  // the others wait, so that rank 0's abort usually ends them before they
  // print; a rank failing alone still prints its own, a moment later.
  if (rank != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::fprintf(stderr, "fsdp runtime error: %s%s: %s\n",
               size > 1 ? ("rank " + std::to_string(rank) + ": ").c_str() : "",
               op, what.c_str());
  std::fflush(stderr);
  if (initialized)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void fsdp::host::failAll(const fsdp_program &p, const char *op,
                         const std::string &what) {
  if (p.worldRank == 0) {
    std::fprintf(stderr, "fsdp runtime error: %s: %s\n", op, what.c_str());
    std::fflush(stderr);
  }
  MPI_Finalize();
  std::exit(1);
}

int64_t fsdp::host::numElements(const fsdp_type &type) {
  int64_t n = 1;
  for (int64_t i = 0; i < type.rank; ++i)
    n *= type.dims[i];
  return n;
}

int64_t fsdp::host::byteSize(const fsdp_type &type) {
  return numElements(type) * int64_t(fsdp_rt_dtype_size(type.dtype));
}

const char *fsdp::host::dtypeName(fsdp_rt_dtype dtype) {
  static const char *names[] = {"f32", "bf16", "f16", "i32", "i64"};
  if (unsigned(dtype) > FSDP_RT_I64)
    return "?";
  return names[dtype];
}

std::string fsdp::host::typeString(const fsdp_type &type) {
  std::string s = dtypeName(type.dtype);
  s += "[";
  for (int64_t i = 0; i < type.rank; ++i)
    s += (i ? "x" : "") + std::to_string(type.dims[i]);
  return s + "]";
}

namespace {
/// Whether ops now place their results in host memory: set around each
/// host op by the generated code, per thread (the communication thread's
/// buffers are the device's).
thread_local bool placingOnHost = false;
std::mutex hostMemoryMutex;
int64_t hostCurrent = 0, hostPeak = 0;

/// Adds (`sign` 1) or removes (-1) host tensor `t`'s bytes, a zero-size
/// tensor counted as 1 byte as it is allocated.
void countHost(const fsdp_tensor &t, int sign) {
  int64_t bytes = std::max<int64_t>(fsdp::host::byteSize(t.type), 1);
  std::lock_guard<std::mutex> lock(hostMemoryMutex);
  hostCurrent += sign * bytes;
  hostPeak = std::max(hostPeak, hostCurrent);
}
} // namespace

int64_t fsdp::host::hostMemoryCurrent() {
  std::lock_guard<std::mutex> lock(hostMemoryMutex);
  return hostCurrent;
}

int64_t fsdp::host::hostMemoryPeak() {
  std::lock_guard<std::mutex> lock(hostMemoryMutex);
  return hostPeak;
}

void fsdp_prog_placement(fsdp_program *, bool host) { placingOnHost = host; }

fsdp_tensor *fsdp::host::newTensor(const fsdp_type &type) {
  return newTensor(type, placingOnHost);
}

fsdp_tensor *fsdp::host::newTensor(const fsdp_type &type, bool host) {
  if (type.rank < 0 || type.rank > 8)
    fail("alloc", "rank " + std::to_string(type.rank) + " is not in [0, 8]");
  for (int64_t i = 0; i < type.rank; ++i)
    if (type.dims[i] < 0)
      fail("alloc", "negative dim in " + typeString(type));
  if (unsigned(type.dtype) > FSDP_RT_I64)
    fail("alloc", "unknown dtype " + std::to_string(int(type.dtype)));
  auto *t = new fsdp_tensor;
  t->type = type;
  size_t bytes = size_t(byteSize(type));
  t->host = host;
  // A zero-size buffer still gets a distinct address.
  if (!host && (t->data = takePlanned(type)))
    t->planned = true;
  else
    t->data =
        host ? fsdp_rt_host_alloc(bytes) : fsdp_rt_alloc(bytes ? bytes : 1);
  if (!t->data)
    fail("alloc", std::string("out of ") + (host ? "host " : "") +
                      "memory allocating " + std::to_string(bytes) +
                      " bytes for " + typeString(type));
  if (host)
    countHost(*t, 1);
  // On the stream: a reused pinned block may still be read by queued work.
  fsdp_rt_zero(nullptr, t->data, bytes);
  return t;
}

void fsdp::host::upload(fsdp_tensor *t, const void *host) {
  fsdp_rt_copy_to_device(nullptr, t->data, host, size_t(byteSize(t->type)));
}

std::vector<char> fsdp::host::download(const fsdp_tensor *t) {
  std::vector<char> host(size_t(byteSize(t->type)));
  fsdp_rt_copy_to_host(nullptr, host.data(), t->data, host.size());
  fsdp_rt_stream_synchronize(nullptr);
  return host;
}

int64_t fsdp::host::meshRanks(const fsdp_program &p) {
  int64_t n = 1;
  for (const MeshAxis &axis : p.axes)
    n *= axis.size;
  return n;
}

std::string fsdp::host::meshString(const fsdp_program &p) {
  if (p.axes.empty())
    return "none";
  std::string s;
  for (const MeshAxis &axis : p.axes)
    s += (s.empty() ? "" : " x ") + axis.name + "=" + std::to_string(axis.size);
  return s;
}

void fsdp::host::validate(fsdp_program &p) {
  std::set<std::string> names;
  for (const MeshAxis &axis : p.axes) {
    if (!names.insert(axis.name).second)
      fail("mesh", "duplicate axis name '" + axis.name + "'");
    if (axis.size < 1)
      fail("mesh", "axis '" + axis.name + "' has size " +
                       std::to_string(axis.size) + "; sizes must be >= 1");
  }
  if (p.axes.size() > FSDP_RT_MAX_MESH_AXES)
    fail("mesh",
         "more than " + std::to_string(FSDP_RT_MAX_MESH_AXES) + " axes");
  names.clear();
  for (const Input &in : p.inputs)
    if (!names.insert(in.name).second)
      fail("describe", "duplicate input or parameter name '" + in.name + "'");
  for (const Param &param : p.params)
    if (!names.insert(param.name).second)
      fail("describe",
           "duplicate input or parameter name '" + param.name + "'");
  // Each sharded parameter's blocks tile it (layoutOf stops otherwise).
  for (const Param &param : p.params) {
    for (uint32_t mask : param.dimAxes)
      if (mask >> p.axes.size())
        fail("describe", "sharded parameter '" + param.name +
                             "' names an axis the mesh does not have");
    layoutOf(p, param);
  }
  int64_t numArgs = int64_t(p.inputs.size() + p.params.size());
  for (auto [out, arg] : p.updates)
    if (out < 0 || out >= int64_t(p.outputs.size()) ||
        arg < int64_t(p.inputs.size()) || arg >= numArgs)
      fail("describe", "output " + std::to_string(out) +
                           " cannot update argument " + std::to_string(arg) +
                           " (only parameters and state are updated)");
  for (uint32_t mask : p.groupMasks)
    if (mask >> p.axes.size())
      fail("group", "axis mask " + std::to_string(mask) +
                        " names an axis the mesh does not have (" +
                        std::to_string(p.axes.size()) + " axes)");
  for (const auto &[name, high] : p.inputRanges) {
    bool found = false;
    for (const Input &in : p.inputs)
      if (in.name == name) {
        found = true;
        if (in.type.dtype != FSDP_RT_I32 && in.type.dtype != FSDP_RT_I64)
          fail("input_range", "input '" + name + "' is " + typeString(in.type) +
                                  ", not integer");
      }
    if (!found)
      fail("input_range", "no input named '" + name + "'");
    if (high < 1)
      fail("input_range", "input '" + name + "' has an empty range [0, " +
                              std::to_string(high) + ")");
  }
}

//===----------------------------------------------------------------------===//
// Description
//===----------------------------------------------------------------------===//

void fsdp_prog_mesh_axis(fsdp_program *p, const char *name, int64_t size) {
  p->axes.push_back({name, size});
}

void fsdp_prog_input(fsdp_program *p, const char *name, fsdp_type type) {
  p->inputs.push_back({name, type, nullptr});
}

void fsdp_prog_input_split(fsdp_program *p, const char *name,
                           uint32_t axis_mask) {
  for (Input &in : p->inputs)
    if (in.name == name) {
      in.batchAxes = axis_mask;
      return;
    }
  fail("describe", std::string("no input named '") + name + "' to split");
}

void fsdp_prog_input_sequence_split(fsdp_program *p, const char *name,
                                    uint32_t axis_mask) {
  for (Input &in : p->inputs)
    if (in.name == name) {
      if (in.type.rank != 2)
        fail("describe", std::string("input '") + name + "' is " +
                             typeString(in.type) +
                             "; only [B, S] tokens split along the sequence");
      in.sequenceAxes = axis_mask;
      return;
    }
  fail("describe", std::string("no input named '") + name +
                       "' to split along the sequence");
}

/// The declared input `name`, or a failure naming `what` it was for.
static Input &declaredInput(fsdp_program *p, const char *name,
                            const char *what) {
  for (Input &in : p->inputs)
    if (in.name == name)
      return in;
  fail("describe", std::string("no input named '") + name + "' " + what);
}

void fsdp_prog_input_sequence_rounds(fsdp_program *p, const char *name,
                                     int64_t rounds) {
  if (rounds < 1)
    fail("describe", std::string("input '") + name +
                         "': " + std::to_string(rounds) + " rounds");
  declaredInput(p, name, "to split in rounds").sequenceRounds = rounds;
}

int64_t fsdp::host::blockIndex(const fsdp_program &p,
                               const std::vector<int> &axes) {
  int64_t block = 0;
  for (int axis : axes)
    block = block * p.axes[size_t(axis)].size + p.coords[size_t(axis)];
  return block;
}

void fsdp_prog_input_documents(fsdp_program *p, const char *name) {
  declaredInput(p, name, "to hold document positions").documents = true;
}

void fsdp_prog_input_ignore(fsdp_program *p, const char *name,
                            int64_t ignore_index) {
  declaredInput(p, name, "to ignore labels of").ignore = ignore_index;
}

void fsdp_prog_input_range(fsdp_program *p, const char *name, int64_t high) {
  p->inputRanges[name] = high;
}

void fsdp_prog_param(fsdp_program *p, const char *name, fsdp_type type,
                     fsdp_init_kind init, double a, double b) {
  p->params.push_back({name, type, init, a, b, nullptr});
}

namespace {
/// Decodes packed axis lists (4-bit fields of axis index + 1, major first).
std::vector<int> unpackAxes(int64_t packed, const std::string &what) {
  std::vector<int> order;
  uint32_t seen = 0;
  for (; packed; packed >>= 4) {
    int axis = int(packed & 15) - 1;
    if (axis < 0 || axis >= FSDP_RT_MAX_MESH_AXES || (seen >> axis & 1))
      fail("describe", what + " lists a bad or repeated mesh axis");
    seen |= 1u << axis;
    order.push_back(axis);
  }
  return order;
}
} // namespace

void fsdp_prog_output_shard(fsdp_program *p, int64_t index, fsdp_ints dim_axes,
                            fsdp_ints dim_groups) {
  if (dim_axes.size != dim_groups.size)
    fail("describe", "output " + std::to_string(index) +
                         ": axes and groups differ in rank");
  auto &dims = p->outputSplits[index];
  for (int64_t d = 0; d < dim_axes.size; ++d)
    dims.push_back(
        {unpackAxes(dim_axes.values[d], "output " + std::to_string(index)),
         dim_groups.values[d]});
}

void fsdp_prog_param_shard(fsdp_program *p, const char *name, fsdp_type type,
                           fsdp_init_kind init, double a, double b,
                           fsdp_ints global_dims, fsdp_ints dim_axes,
                           fsdp_ints dim_groups, fsdp_ints dim_inner) {
  Param param{name, type, init, a, b, nullptr};
  if (global_dims.size != type.rank || dim_axes.size != type.rank ||
      dim_groups.size != type.rank || dim_inner.size != type.rank)
    fail("describe", std::string("sharded parameter '") + name + "' has " +
                         std::to_string(global_dims.size) + " global dims, " +
                         std::to_string(dim_axes.size) + " axis masks and " +
                         std::to_string(dim_groups.size) +
                         " group counts for rank " + std::to_string(type.rank));
  param.dimGroups.assign(dim_groups.values,
                         dim_groups.values + dim_groups.size);
  param.globalDims.assign(global_dims.values,
                          global_dims.values + global_dims.size);
  for (int64_t d = 0; d < dim_axes.size; ++d) {
    std::vector<int> order =
        unpackAxes(dim_axes.values[d], std::string("sharded parameter '") +
                                           name + "' dim " + std::to_string(d));
    uint32_t mask = 0;
    for (int axis : order)
      mask |= 1u << axis;
    param.dimAxes.push_back(mask);
    param.dimOrder.push_back(order);
    if (dim_inner.values[d] < 0 || dim_inner.values[d] > int64_t(order.size()))
      fail("describe", std::string("sharded parameter '") + name + "' dim " +
                           std::to_string(d) + " has " +
                           std::to_string(dim_inner.values[d]) +
                           " inner axes of " + std::to_string(order.size()));
    param.dimInner.push_back(dim_inner.values[d]);
  }
  p->params.push_back(param);
}

void fsdp_prog_state(fsdp_program *p, const char *name, fsdp_type type) {
  Param state{name, type, FSDP_INIT_ZEROS, 0.0, 0.0, nullptr};
  state.state = true;
  p->params.push_back(state);
}

void fsdp_prog_output_update(fsdp_program *p, int64_t output_index,
                             int64_t arg_index) {
  p->updates.push_back({output_index, arg_index});
}

void fsdp_prog_defer_updates(fsdp_program *p) { p->deferUpdates = true; }

void fsdp_prog_optimizer_on_host_cores(fsdp_program *p) {
  p->optimizerOnHostCores = true;
}

void fsdp_prog_eval_step(fsdp_program *p, void (*eval)(fsdp_program *)) {
  p->evalStep = eval;
}

void fsdp_prog_model_flops(fsdp_program *p, double flops,
                           fsdp_rt_dtype compute_dtype) {
  p->modelFlops = flops;
  p->computeDtype = compute_dtype;
}

void fsdp_prog_output_name(fsdp_program *p, const char *name) {
  p->outputNames.push_back(name);
  p->outputs.push_back(nullptr);
}

void fsdp_prog_group(fsdp_program *p, uint32_t axis_mask) {
  for (uint32_t mask : p->groupMasks)
    if (mask == axis_mask)
      return;
  p->groupMasks.push_back(axis_mask);
}

int64_t fsdp_prog_mesh_coord(fsdp_program *p, int64_t axis) {
  if (axis < 0 || axis >= int64_t(p->coords.size()))
    fail("mesh_coord", "no mesh axis " + std::to_string(axis));
  return p->coords[axis];
}

//===----------------------------------------------------------------------===//
// Step
//===----------------------------------------------------------------------===//

namespace {
/// Calls `fn` on argument `index` of the step, an Input or a Param (inputs
/// first, then parameters, in declaration order); fails naming `what` when
/// there is none.
template <typename Fn>
auto onArgument(fsdp_program *p, int64_t index, const char *what, Fn fn) {
  int64_t numInputs = int64_t(p->inputs.size());
  if (index >= 0 && index < numInputs)
    return fn(p->inputs[index]);
  if (index >= numInputs && index < numInputs + int64_t(p->params.size()))
    return fn(p->params[index - numInputs]);
  fail("arg", "no argument " + std::to_string(index) + what + " (" +
                  std::to_string(numInputs) + " inputs, " +
                  std::to_string(p->params.size()) + " parameters)");
}
} // namespace

void fsdp_prog_arg_on_host(fsdp_program *p, int64_t index) {
  onArgument(p, index, " to place on the host",
             [](auto &arg) { arg.host = true; });
}

fsdp_tensor *fsdp_prog_arg(fsdp_program *p, int64_t index) {
  return onArgument(p, index, "", [](auto &arg) { return arg.tensor; });
}

void fsdp_prog_result(fsdp_program *p, int64_t index, fsdp_tensor *t) {
  if (index < 0 || index >= int64_t(p->outputs.size()))
    fail("result", "no output " + std::to_string(index) + " (" +
                       std::to_string(p->outputs.size()) + " declared)");
  if (p->outputs[index])
    fail("result", "output '" + p->outputNames[index] + "' set twice");
  fsdp_retain(t);
  p->outputs[index] = t;
}

fsdp_tensor *fsdp_retain(fsdp_tensor *t) {
  ++t->refs;
  return t;
}

void fsdp_release(fsdp_tensor *t) {
  if (!t)
    return;
  if (t->refs <= 0)
    fail("release", "tensor " + typeString(t->type) + " released too often");
  if (t->borrowed && t->refs == 1)
    fail("release", "the step released argument " + typeString(t->type) +
                        ", which it only borrows");
  if (--t->refs > 0)
    return;
  if (t->base)
    fsdp_release(t->base);
  else if (t->host) {
    fsdp_rt_host_free(t->data);
    countHost(*t, -1);
  } else if (t->planned) {
    releasePlanned(t->data);
  } else {
    fsdp_rt_free(t->data);
  }
  delete t;
}

fsdp_tensor *fsdp_tensor_new(fsdp_program *, fsdp_type type) {
  return newTensor(type);
}

void *fsdp_tensor_data(fsdp_tensor *t) { return t->data; }

struct fsdp_frame {
  /// A slot holds a tensor or a future (an async collective a layer
  /// function started and a later one waits on), never both.
  struct Slot {
    fsdp_tensor *tensor = nullptr;
    fsdp_future *future = nullptr;
  };
  std::vector<Slot> slots;

  Slot &at(int64_t index, bool set) {
    if (index < 0 || size_t(index) >= slots.size())
      fail("frame", std::string(set ? "cannot set" : "no") + " slot " +
                        std::to_string(index) + " of " +
                        std::to_string(slots.size()));
    return slots[size_t(index)];
  }
};

fsdp_frame *fsdp_frame_new(fsdp_program *, int64_t size) {
  if (size < 0)
    fail("frame", "negative size " + std::to_string(size));
  auto *f = new fsdp_frame;
  f->slots.assign(size_t(size), {});
  return f;
}

namespace {
/// Puts `slot` (a tensor or a future, never null) in slot `index` of `f`.
template <typename T>
void setSlot(fsdp_frame *f, int64_t index, const T *handle,
             fsdp_frame::Slot slot) {
  if (!handle)
    fail("frame", "cannot set slot " + std::to_string(index) + " to null");
  f->at(index, true) = slot;
}

/// The `member` of slot `index` of `f`, which must hold one (`what`).
template <typename T>
T *getSlot(fsdp_frame *f, int64_t index, T *fsdp_frame::Slot::*member,
           const char *what) {
  T *handle = f->at(index, false).*member;
  if (!handle)
    fail("frame", "slot " + std::to_string(index) + " of " +
                      std::to_string(f->slots.size()) + " holds no " + what);
  return handle;
}
} // namespace

void fsdp_frame_set(fsdp_frame *f, int64_t index, fsdp_tensor *t) {
  setSlot(f, index, t, {t, nullptr});
}

fsdp_tensor *fsdp_frame_get(fsdp_frame *f, int64_t index) {
  return getSlot(f, index, &fsdp_frame::Slot::tensor, "tensor");
}

void fsdp_frame_set_future(fsdp_frame *f, int64_t index, fsdp_future *future) {
  setSlot(f, index, future, {nullptr, future});
}

fsdp_future *fsdp_frame_get_future(fsdp_frame *f, int64_t index) {
  return getSlot(f, index, &fsdp_frame::Slot::future, "future");
}

void fsdp_frame_free(fsdp_frame *f) { delete f; }

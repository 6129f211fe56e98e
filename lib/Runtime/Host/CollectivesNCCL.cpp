//===- CollectivesNCCL.cpp - dist collectives over NCCL -------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The GPU backend of the collectives, linked with the CUDA kernels in place
// of Collectives.cpp. Each group of Groups.cpp gets an NCCL communicator
// (its unique id broadcast over the group's MPI communicator, so one
// process needs no MPI library: SerialMPI) and a communication stream of
// its own. A start orders the communication stream after the compute
// stream's work so far (an event), queues the staging copies and the NCCL
// call there and records a completion event; fsdp_wait makes the compute
// stream wait on that event. Neither blocks the host: a step queues all its
// work without a host synchronization. NCCL reduces 16-bit floats itself
// (in f32 per step, rounded to the storage type in between), where the MPI
// backend widens the whole buffer first.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "fsdp/Runtime/Accounting.h"
#include "fsdp/Runtime/RuntimeCUDA.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <vector>

using namespace fsdp::host;
using fsdp::accounting::Collective;
namespace accounting = fsdp::accounting;

struct fsdp::host::DeviceComm {
  ncclComm_t comm = nullptr;
  fsdp_rt_stream stream = nullptr;
  /// Recorded on the compute stream when a collective starts.
  fsdp_rt_event ready = nullptr;
};

namespace {

void check(ncclResult_t result, const char *op) {
  if (result != ncclSuccess)
    fail(op, std::string("NCCL: ") + ncclGetErrorString(result));
}

cudaStream_t cudaStreamOf(const DeviceComm &d) {
  return fsdp_rt_cuda_stream(d.stream);
}

/// Completion events, reused across collectives.
std::vector<fsdp_rt_event> spareEvents;

fsdp_rt_event takeEvent() {
  if (spareEvents.empty())
    return fsdp_rt_event_create();
  fsdp_rt_event e = spareEvents.back();
  spareEvents.pop_back();
  return e;
}

} // namespace

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

void fsdp::host::startCommunication(fsdp_program &p) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0)
    failAll(p, "cuda",
            std::string("no CUDA device is visible (") +
                (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
                "); this program was built with fsdp-compile --target cuda: "
                "run it on a GPU machine, or build it with --target cpu");
  // Local rank i drives GPU i. A launcher that binds one GPU per process
  // (CUDA_VISIBLE_DEVICES per rank: SLURM --gpus-per-task, --gpu-bind) shows
  // each rank a single device, which is then its own.
  int device = devices == 1 ? 0 : p.localRank;
  if (device >= devices)
    failAll(p, "cuda",
            std::to_string(p.localRanks) + " ranks share a node with " +
                std::to_string(devices) +
                " visible GPUs; NCCL needs one GPU per rank (launch at most " +
                std::to_string(devices) +
                " ranks per node, or bind one GPU to each rank)");
  // The runtime's memory pool and compute stream are created on it at
  // their first use, after this.
  if (cudaSetDevice(device) != cudaSuccess)
    failAll(p, "cuda", "cannot select GPU " + std::to_string(device));
  // Every rank visits the masks in the same order, so each group's members
  // meet in ncclCommInitRank together.
  for (uint32_t mask : p.groupMasks) {
    Group &g = p.groups[mask];
    ncclUniqueId id;
    if (g.rank == 0)
      check(ncclGetUniqueId(&id), "nccl init");
    MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, g.comm);
    auto *d = new DeviceComm;
    check(ncclCommInitRank(&d->comm, g.size, id, g.rank), "nccl init");
    d->stream = fsdp_rt_stream_create();
    d->ready = fsdp_rt_event_create();
    g.device = d;
  }
}

void fsdp::host::stopCommunication(fsdp_program &p) {
  // Every queued collective finishes before its communicator goes.
  fsdp_rt_stream_synchronize(nullptr);
  for (auto &[mask, g] : p.groups) {
    if (!g.device)
      continue;
    fsdp_rt_stream_synchronize(g.device->stream);
    ncclCommDestroy(g.device->comm);
    fsdp_rt_event_destroy(g.device->ready);
    fsdp_rt_stream_destroy(g.device->stream);
    delete g.device;
    g.device = nullptr;
  }
  for (fsdp_rt_event e : spareEvents)
    fsdp_rt_event_destroy(e);
  spareEvents.clear();
}

// Every collective is queued on streams: waiting at once costs nothing
// more than waiting later.
void fsdp::host::markSynchronous(bool) {}

// In-flight and exposed times would need the host to read events back
// during the step; the report leaves them out.
const std::map<uint32_t, OverlapStats> &fsdp::host::overlapStats() {
  static const std::map<uint32_t, OverlapStats> none;
  return none;
}

//===----------------------------------------------------------------------===//
// Futures
//===----------------------------------------------------------------------===//

struct fsdp_future {
  /// The input, kept alive until the compute stream is ordered after the
  /// transfer.
  fsdp_tensor *input = nullptr;
  fsdp_tensor *result = nullptr;
  /// Staging buffers (fsdp_rt_alloc), freed on the compute stream after
  /// the wait.
  void *send = nullptr, *recv = nullptr;
  /// Recorded on the communication stream after the transfer.
  fsdp_rt_event done = nullptr;
};

namespace {

ncclDataType_t ncclType(fsdp_rt_dtype dtype) {
  switch (dtype) {
  case FSDP_RT_F32:
    return ncclFloat32;
  case FSDP_RT_BF16:
    return ncclBfloat16;
  case FSDP_RT_F16:
    return ncclFloat16;
  case FSDP_RT_I32:
    return ncclInt32;
  default:
    return ncclInt64;
  }
}

ncclRedOp_t ncclOp(const char *op, fsdp_rt_dtype dtype,
                   fsdp_reduction reduction) {
  if (reduction == FSDP_REDUCE_MAX)
    return ncclMax;
  if (reduction == FSDP_REDUCE_SUM)
    return ncclSum;
  if (dtype == FSDP_RT_I32 || dtype == FSDP_RT_I64)
    fail(op, "an average of integers is not an NCCL reduction; the program "
             "averages only floats");
  return ncclAvg;
}

void *staging(const char *op, int64_t bytes) {
  void *ptr = fsdp_rt_alloc(size_t(bytes ? bytes : 1));
  if (!ptr)
    fail(op,
         "out of device memory staging " + std::to_string(bytes) + " bytes");
  return ptr;
}

/// Views `src` as [a, b, piece] bytes and writes it as [b, a, piece] on
/// `stream`: one strided copy per index of the shorter of a and b.
void swapBlocks(fsdp_rt_stream stream, const void *src, void *dst, int64_t a,
                int64_t b, int64_t piece) {
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  auto bytes = [](int64_t n) { return size_t(n); };
  if (a <= b) {
    // Row i of src (b pieces) becomes column i of dst.
    for (int64_t i = 0; i < a; ++i)
      fsdp_rt_copy_2d(stream, d + i * piece, bytes(a * piece),
                      s + i * b * piece, bytes(piece), bytes(piece), bytes(b));
  } else {
    // Column j of src (a pieces) becomes row j of dst.
    for (int64_t j = 0; j < b; ++j)
      fsdp_rt_copy_2d(stream, d + j * a * piece, bytes(piece), s + j * piece,
                      bytes(b * piece), bytes(piece), bytes(a));
  }
}

/// Checks the operand; returns a future owning the result and a reference
/// to x.
fsdp_future *begin(const char *op, const fsdp_type &r, fsdp_tensor *x) {
  checkOperand(op, r, x);
  auto *f = new fsdp_future;
  f->input = fsdp_retain(x);
  f->result = newTensor(r);
  return f;
}

/// Queues the group's stream after what the compute stream has queued (the
/// operand, the result's and the staging's allocation).
void launch(const Group &g) {
  fsdp_rt_event_record(g.device->ready, nullptr);
  fsdp_rt_stream_wait_event(g.device->stream, g.device->ready);
}

fsdp_future *end(const Group &g, fsdp_future *f) {
  f->done = takeEvent();
  fsdp_rt_event_record(f->done, g.device->stream);
  return f;
}

} // namespace

//===----------------------------------------------------------------------===//
// Starts
//===----------------------------------------------------------------------===//

fsdp_future *fsdp_op_all_gather_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t dim) {
  const char *op = "all_gather";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  checkDim(op, x->type, dim);
  checkScaledDim(op, r, x->type, dim, g.size);
  int64_t bytes = byteSize(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_ALL_GATHER, axis_mask,
      accounting::bytesSent(Collective::AllGather, bytes, g.size));
  // Blocks arrive as [n, x]; along dim d > 0 they are [n, outer, piece] and
  // the result is [outer, n, piece].
  int64_t outer = leadingProduct(x->type.dims, dim);
  void *dst = f->result->data;
  if (accounting::allGatherStaging(byteSize(r), outer).recv)
    dst = f->recv = staging(op, byteSize(r));
  launch(g);
  check(ncclAllGather(x->data, dst, size_t(bytes), ncclUint8, g.device->comm,
                      cudaStreamOf(*g.device)),
        op);
  if (f->recv)
    swapBlocks(g.device->stream, f->recv, f->result->data, g.size, outer,
               outer ? bytes / outer : 0);
  return end(g, f);
}

fsdp_future *fsdp_op_reduce_scatter_start(fsdp_program *p, fsdp_type r,
                                          fsdp_tensor *x, uint32_t axis_mask,
                                          fsdp_reduction reduction,
                                          int64_t dim) {
  const char *op = "reduce_scatter";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  checkDim(op, x->type, dim);
  checkScaledDim(op, x->type, r, dim, g.size);
  fsdp_rt_dtype dtype = x->type.dtype;
  ncclRedOp_t redOp = ncclOp(op, dtype, reduction);
  int64_t bytes = byteSize(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_REDUCE_SCATTER, axis_mask,
      accounting::bytesSent(Collective::ReduceScatter, bytes, g.size));
  // Block i (rank i's part) must be contiguous: [outer, n, piece] ->
  // [n, outer, piece].
  int64_t outer = leadingProduct(r.dims, dim);
  const void *src = x->data;
  if (outer > 1 && bytes)
    f->send = staging(op, bytes);
  launch(g);
  if (f->send) {
    swapBlocks(g.device->stream, x->data, f->send, outer, g.size,
               bytes / (outer * g.size));
    src = f->send;
  }
  check(ncclReduceScatter(src, f->result->data, size_t(numElements(r)),
                          ncclType(dtype), redOp, g.device->comm,
                          cudaStreamOf(*g.device)),
        op);
  return end(g, f);
}

fsdp_future *fsdp_op_all_reduce_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      fsdp_reduction reduction) {
  const char *op = "all_reduce";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  checkScaledDim(op, r, x->type, -1, 1);
  fsdp_rt_dtype dtype = x->type.dtype;
  ncclRedOp_t redOp = ncclOp(op, dtype, reduction);
  fsdp_rt_count_collective(
      FSDP_RT_ALL_REDUCE, axis_mask,
      accounting::bytesSent(Collective::AllReduce, byteSize(x->type), g.size));
  launch(g);
  check(ncclAllReduce(x->data, f->result->data, size_t(numElements(r)),
                      ncclType(dtype), redOp, g.device->comm,
                      cudaStreamOf(*g.device)),
        op);
  return end(g, f);
}

fsdp_future *fsdp_op_all_to_all_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t split_dim, int64_t concat_dim) {
  const char *op = "all_to_all";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  int64_t n = g.size;
  const fsdp_type &in = x->type;
  fsdp_type block = allToAllBlock(op, r, in, n, split_dim, concat_dim);
  int64_t bytes = byteSize(in), blockBytes = bytes / n;
  fsdp_rt_count_collective(
      FSDP_RT_ALL_TO_ALL, axis_mask,
      accounting::bytesSent(Collective::AllToAll, bytes, n));
  // Send side: [outer, n, piece] along split_dim -> [n, outer, piece];
  // receive side: [n, outer, piece] -> [outer, n, piece] along concat_dim.
  int64_t outer = leadingProduct(in.dims, split_dim);
  int64_t outerRecv = leadingProduct(block.dims, concat_dim);
  const accounting::Staging plan =
      accounting::allToAllStaging(bytes, n, outer, outerRecv);
  if (plan.send)
    f->send = staging(op, plan.send);
  if (plan.recv)
    f->recv = staging(op, plan.recv);
  launch(g);
  const char *src = static_cast<const char *>(x->data);
  if (f->send) {
    swapBlocks(g.device->stream, src, f->send, outer, n, blockBytes / outer);
    src = static_cast<const char *>(f->send);
  }
  char *dst = static_cast<char *>(f->recv ? f->recv : f->result->data);
  cudaStream_t s = cudaStreamOf(*g.device);
  check(ncclGroupStart(), op);
  for (int peer = 0; peer < n; ++peer) {
    check(ncclSend(src + peer * blockBytes, size_t(blockBytes), ncclUint8, peer,
                   g.device->comm, s),
          op);
    check(ncclRecv(dst + peer * blockBytes, size_t(blockBytes), ncclUint8, peer,
                   g.device->comm, s),
          op);
  }
  check(ncclGroupEnd(), op);
  if (f->recv)
    swapBlocks(g.device->stream, f->recv, f->result->data, n, outerRecv,
               blockBytes / outerRecv);
  return end(g, f);
}

fsdp_future *fsdp_op_permute_start(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                   uint32_t axis_mask, int64_t offset) {
  const char *op = "permute";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  checkScaledDim(op, r, x->type, -1, 1);
  int64_t bytes = byteSize(x->type), n = g.size;
  fsdp_rt_count_collective(
      FSDP_RT_PERMUTE, axis_mask,
      accounting::bytesSent(Collective::Permute, bytes, n));
  int64_t shift = ((offset % n) + n) % n;
  int to = int((g.rank + shift) % n), from = int((g.rank - shift + n) % n);
  launch(g);
  if (to == g.rank) {
    fsdp_rt_copy_2d(g.device->stream, f->result->data, size_t(bytes), x->data,
                    size_t(bytes), size_t(bytes), 1);
    return end(g, f);
  }
  cudaStream_t s = cudaStreamOf(*g.device);
  check(ncclGroupStart(), op);
  check(ncclRecv(f->result->data, size_t(bytes), ncclUint8, from,
                 g.device->comm, s),
        op);
  check(ncclSend(x->data, size_t(bytes), ncclUint8, to, g.device->comm, s), op);
  check(ncclGroupEnd(), op);
  return end(g, f);
}

fsdp_future *fsdp_op_broadcast_start(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *x, uint32_t axis_mask,
                                     int64_t root) {
  const char *op = "broadcast";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x);
  checkScaledDim(op, r, x->type, -1, 1);
  checkRoot(op, g, root);
  int64_t bytes = byteSize(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_BROADCAST, axis_mask,
      accounting::bytesSent(Collective::Broadcast, bytes, g.size));
  launch(g);
  check(ncclBroadcast(x->data, f->result->data, size_t(bytes), ncclUint8,
                      int(root), g.device->comm, cudaStreamOf(*g.device)),
        op);
  return end(g, f);
}

fsdp_tensor *fsdp_wait(fsdp_program *, fsdp_future *f) {
  if (!f)
    fail("wait", "future is null");
  // The compute stream, not the host, waits for the transfer; what the
  // transfer read or staged is freed after that, in the compute stream's
  // order.
  fsdp_rt_stream_wait_event(nullptr, f->done);
  spareEvents.push_back(f->done);
  fsdp_rt_free(f->send);
  fsdp_rt_free(f->recv);
  fsdp_release(f->input);
  fsdp_tensor *result = f->result;
  delete f;
  return result;
}

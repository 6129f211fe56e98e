//===- NCCL.cpp - The collectives over NCCL -------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The GPU transport of the collectives (Transport.h), linked with the CUDA
// kernels in place of MPI.cpp. Each group of Groups.cpp gets an NCCL
// communicator (its unique id broadcast over the group's MPI communicator,
// so one process needs no MPI library: SerialMPI) and a communication
// stream of its own. A start orders the communication stream after the
// compute stream's work so far (an event), queues the staging copies and
// the NCCL calls there and records a completion event; fsdp_wait makes the
// compute stream wait on that event. Neither blocks the host: a step queues
// all its work without a host synchronization. NCCL reduces 16-bit floats
// itself (in f32 per step, rounded to the storage type in between), where
// the MPI transport widens the whole buffer first. all_to_all_v's counts
// stay on the device: members exchange blocks of a fixed row capacity,
// which kernels pack and unpack by the counts (RowExchange.cuh).
//
//===----------------------------------------------------------------------===//

#include "Transport.h"

#include "../Common/Dtype.h"

#include "fsdp/Runtime/RuntimeCUDA.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <vector>

using namespace fsdp::host;

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
  const char *op;
  const Group *g;
  /// The operands, kept alive until the compute stream is ordered after the
  /// transfer.
  std::vector<fsdp_tensor *> held;
  fsdp_tensor *result = nullptr;
  /// Staging buffers (fsdp_rt_alloc), freed on the compute stream after
  /// the wait.
  std::vector<void *> staging;
  /// Recorded on the communication stream after the transfer.
  fsdp_rt_event done = nullptr;

  ncclComm_t comm() const { return g->device->comm; }
  fsdp_rt_stream stream() const { return g->device->stream; }
  cudaStream_t cudaStream() const { return cudaStreamOf(*g->device); }
};

namespace {

ncclDataType_t ncclType(fsdp_rt_dtype dtype) {
  static constexpr fsdp::rt::DtypeTable<ncclDataType_t> names{
      ncclFloat32, ncclBfloat16, ncclFloat16, ncclInt32, ncclInt64};
  return names[dtype];
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

} // namespace

//===----------------------------------------------------------------------===//
// The transport
//===----------------------------------------------------------------------===//

fsdp_future *fsdp::comm::open(const char *op, const Group &g, uint32_t,
                              const fsdp_type &r, fsdp_tensor *x) {
  auto *f = new fsdp_future;
  f->op = op;
  f->g = &g;
  f->held.push_back(fsdp_retain(x));
  f->result = newTensor(r);
  return f;
}

fsdp_tensor *fsdp::comm::resultOf(fsdp_future *f) { return f->result; }

char *fsdp::comm::stage(fsdp_future *f, int64_t bytes) {
  void *ptr = fsdp_rt_alloc(size_t(bytes ? bytes : 1));
  if (!ptr)
    fail(f->op,
         "out of device memory staging " + std::to_string(bytes) + " bytes");
  f->staging.push_back(ptr);
  return static_cast<char *>(ptr);
}

// Queues the group's stream after what the compute stream has queued (the
// operand, the result's and the staging's allocation).
void fsdp::comm::launch(fsdp_future *f) {
  fsdp_rt_event_record(f->g->device->ready, nullptr);
  fsdp_rt_stream_wait_event(f->stream(), f->g->device->ready);
}

// The group's stream runs the swaps in order with the transfers: one
// strided copy per index of the shorter of a and b.
void fsdp::comm::swapBlocks(fsdp_future *f, bool, const void *src, void *dst,
                            int64_t a, int64_t b, int64_t piece) {
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  auto bytes = [](int64_t n) { return size_t(n); };
  if (a <= b) {
    // Row i of src (b pieces) becomes column i of dst.
    for (int64_t i = 0; i < a; ++i)
      fsdp_rt_copy_2d(f->stream(), d + i * piece, bytes(a * piece),
                      s + i * b * piece, bytes(piece), bytes(piece), bytes(b));
  } else {
    // Column j of src (a pieces) becomes row j of dst.
    for (int64_t j = 0; j < b; ++j)
      fsdp_rt_copy_2d(f->stream(), d + j * a * piece, bytes(piece),
                      s + j * piece, bytes(b * piece), bytes(piece), bytes(a));
  }
}

void fsdp::comm::allGather(fsdp_future *f, const void *src, void *dst,
                           int64_t bytes) {
  check(ncclAllGather(src, dst, size_t(bytes), ncclUint8, f->comm(),
                      f->cudaStream()),
        f->op);
}

void fsdp::comm::broadcast(fsdp_future *f, const void *src, void *dst,
                           int64_t bytes, int root) {
  check(ncclBroadcast(src, dst, size_t(bytes), ncclUint8, root, f->comm(),
                      f->cudaStream()),
        f->op);
}

void fsdp::comm::exchange(fsdp_future *f,
                          const std::vector<PeerBlock> &blocks) {
  // This rank's own block is a copy; the others are one NCCL group.
  bool peers = false;
  for (const PeerBlock &b : blocks) {
    if (b.peer == f->g->rank && b.send && b.recv && b.sendBytes)
      fsdp_rt_copy_2d(f->stream(), b.recv, size_t(b.recvBytes), b.send,
                      size_t(b.sendBytes), size_t(b.sendBytes), 1);
    peers |= b.peer != f->g->rank;
  }
  if (!peers)
    return;
  check(ncclGroupStart(), f->op);
  for (const PeerBlock &b : blocks) {
    if (b.peer == f->g->rank)
      continue;
    if (b.recv && b.recvBytes)
      check(ncclRecv(b.recv, size_t(b.recvBytes), ncclUint8, b.peer, f->comm(),
                     f->cudaStream()),
            f->op);
    if (b.send && b.sendBytes)
      check(ncclSend(b.send, size_t(b.sendBytes), ncclUint8, b.peer, f->comm(),
                     f->cudaStream()),
            f->op);
  }
  check(ncclGroupEnd(), f->op);
}

void fsdp::comm::reduceScatter(fsdp_future *f, const fsdp_tensor *x,
                               int64_t outer, fsdp_reduction reduction) {
  fsdp_rt_dtype dtype = x->type.dtype;
  ncclRedOp_t redOp = ncclOp(f->op, dtype, reduction);
  int64_t bytes = byteSize(x->type), n = f->g->size;
  const void *src = x->data;
  char *send = outer > 1 && bytes ? stage(f, bytes) : nullptr;
  launch(f);
  if (send) {
    swapBlocks(f, false, x->data, send, outer, n, bytes / (outer * n));
    src = send;
  }
  check(ncclReduceScatter(src, f->result->data,
                          size_t(numElements(f->result->type)), ncclType(dtype),
                          redOp, f->comm(), f->cudaStream()),
        f->op);
}

void fsdp::comm::allReduce(fsdp_future *f, const fsdp_tensor *x,
                           fsdp_reduction reduction) {
  fsdp_rt_dtype dtype = x->type.dtype;
  ncclRedOp_t redOp = ncclOp(f->op, dtype, reduction);
  launch(f);
  check(ncclAllReduce(x->data, f->result->data, size_t(numElements(x->type)),
                      ncclType(dtype), redOp, f->comm(), f->cudaStream()),
        f->op);
}

int64_t fsdp::comm::exchangeRows(fsdp_future *f, const fsdp_tensor *x,
                                 const fsdp_tensor *sendCounts,
                                 const fsdp_tensor *recvCounts,
                                 int64_t rowBytes) {
  // Every member sends each other one block of `capacity` rows: no member
  // has more rows to send, and none can take more than its result holds.
  int n = f->g->size;
  int64_t rows = f->result->type.dims[0];
  int64_t capacity = std::min(x->type.dims[0], rows);
  int64_t blockBytes = capacity * rowBytes;
  // The kernels read the counts on the group's stream.
  for (const fsdp_tensor *counts : {sendCounts, recvCounts})
    f->held.push_back(fsdp_retain(const_cast<fsdp_tensor *>(counts)));
  char *send = stage(f, n * blockBytes);
  char *recv = stage(f, n * blockBytes);
  launch(f);
  fsdp_rt_cuda_pack_rows(f->stream(), x->data,
                         static_cast<const int64_t *>(sendCounts->data), n,
                         capacity, rowBytes, send);
  std::vector<PeerBlock> blocks;
  for (int peer = 0; peer < n; ++peer)
    blocks.push_back({peer, send + peer * blockBytes, blockBytes,
                      recv + peer * blockBytes, blockBytes});
  fsdp::comm::exchange(f, blocks);
  fsdp_rt_cuda_unpack_rows(f->stream(), recv,
                           static_cast<const int64_t *>(recvCounts->data), n,
                           capacity, rowBytes, f->result->data, rows);
  return (n - 1) * blockBytes;
}

fsdp_future *fsdp::comm::started(fsdp_program &, fsdp_future *f) {
  f->done = takeEvent();
  fsdp_rt_event_record(f->done, f->stream());
  return f;
}

// Every collective is queued on streams: waiting at once costs nothing
// more than waiting later.
void fsdp::comm::markSynchronous(bool) {}

fsdp_tensor *fsdp_wait(fsdp_program *, fsdp_future *f) {
  if (!f)
    fail("wait", "future is null");
  // The compute stream, not the host, waits for the transfer; what the
  // transfer read or staged is freed after that, in the compute stream's
  // order.
  fsdp_rt_stream_wait_event(nullptr, f->done);
  spareEvents.push_back(f->done);
  for (void *ptr : f->staging)
    fsdp_rt_free(ptr);
  for (fsdp_tensor *t : f->held)
    fsdp_release(t);
  fsdp_tensor *result = f->result;
  delete f;
  return result;
}

//===- Collectives.cpp - dist collectives over MPI ------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The host backend of the collectives, over the groups' MPI communicators
// (Groups.cpp). Every collective is a nonblocking MPI call between a start
// step (checks, staging, rearranging blocks so that MPI sees contiguous
// ones) and a finish step (rearranging back, averaging, narrowing); the
// synchronous form is the start immediately followed by fsdp_wait. 16-bit
// floats are reduced in f32.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "../CPU/Internal.h"

#include "fsdp/Runtime/Accounting.h"

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

using namespace fsdp::host;
using fsdp::accounting::Collective;
namespace accounting = fsdp::accounting;

//===----------------------------------------------------------------------===//
// Futures and staging
//===----------------------------------------------------------------------===//

namespace {

/// A buffer from fsdp_rt_alloc, so staging shows in the memory counters.
struct Staging {
  void *ptr = nullptr;
  Staging() = default;
  explicit Staging(size_t bytes) : ptr(fsdp_rt_alloc(bytes ? bytes : 1)) {
    if (!ptr)
      fail("collective",
           "out of memory staging " + std::to_string(bytes) + " bytes");
  }
  Staging(const Staging &) = delete;
  Staging &operator=(Staging &&o) {
    std::swap(ptr, o.ptr);
    return *this;
  }
  ~Staging() { fsdp_rt_free(ptr); }
  char *get() const { return static_cast<char *>(ptr); }
};

} // namespace

struct fsdp_future {
  const char *op;
  /// The axes of the group, for a timeout's message.
  uint32_t mask = 0;
  /// The input, kept alive until the transfer has finished.
  fsdp_tensor *input = nullptr;
  fsdp_tensor *result = nullptr;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  Staging send, recv;
  std::function<void(fsdp_future &)> finish;
  /// Whether the program started it asynchronously, and whether the
  /// communication thread advances it.
  bool async = false, tracked = false;
  /// Set by the communication thread when every request has finished.
  bool done = false;
  std::chrono::steady_clock::time_point started, finished;
};

namespace {

bool isHalf(fsdp_rt_dtype dtype) {
  return dtype == FSDP_RT_BF16 || dtype == FSDP_RT_F16;
}

/// The type MPI reduces in: f32 for every float type.
MPI_Datatype reduceType(fsdp_rt_dtype dtype) {
  switch (dtype) {
  case FSDP_RT_I32:
    return MPI_INT32_T;
  case FSDP_RT_I64:
    return MPI_INT64_T;
  default:
    return MPI_FLOAT;
  }
}

size_t reduceSize(fsdp_rt_dtype dtype) {
  return isHalf(dtype) ? 4 : fsdp_rt_dtype_size(dtype);
}

int checkedCount(const char *op, int64_t n) {
  if (n > INT_MAX)
    fail(op, "transfer of " + std::to_string(n) +
                 " elements exceeds MPI's int count");
  return int(n);
}

/// Views `src` as [a, b, piece] and writes it as [b, a, piece].
void swapBlocks(const char *src, char *dst, int64_t a, int64_t b,
                int64_t piece) {
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      std::memcpy(dst + (j * a + i) * piece, src + (i * b + j) * piece,
                  size_t(piece));
}

void divide(fsdp_rt_dtype wide, void *data, int64_t n, int divisor) {
  if (wide == FSDP_RT_I32)
    for (int64_t i = 0; i < n; ++i)
      static_cast<int32_t *>(data)[i] /= divisor;
  else if (wide == FSDP_RT_I64)
    for (int64_t i = 0; i < n; ++i)
      static_cast<int64_t *>(data)[i] /= divisor;
  else
    for (int64_t i = 0; i < n; ++i)
      static_cast<float *>(data)[i] /= float(divisor);
}

/// Common checks; returns a future owning the result and a reference to x.
fsdp_future *begin(const char *op, const fsdp_type &r, fsdp_tensor *x,
                   uint32_t mask) {
  checkOperand(op, r, x);
  auto *f = new fsdp_future;
  f->op = op;
  f->mask = mask;
  f->input = fsdp_retain(x);
  f->result = newTensor(r);
  f->started = std::chrono::steady_clock::now();
  return f;
}

MPI_Op mpiOp(fsdp_reduction reduction) {
  return reduction == FSDP_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

} // namespace

//===----------------------------------------------------------------------===//
// The communication thread
//===----------------------------------------------------------------------===//

namespace {

/// MPI's non-blocking collectives advance only inside MPI calls, so while
/// the rank computes, this thread tests the collectives the program started
/// asynchronously until they finish. A tracked future belongs to the thread
/// until then; fsdp_wait blocks on its completion. Collectives run
/// synchronously (a start immediately waited) are not tracked.
class CommThread {
public:
  static CommThread &get() {
    static CommThread thread;
    return thread;
  }
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    work.notify_all();
    if (worker.joinable())
      worker.join();
  }

  void track(fsdp_future *f) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!worker.joinable())
      worker = std::thread([this] { run(); });
    f->tracked = true;
    pending.push_back(f);
    work.notify_all();
  }

  /// Blocks until `f` has finished or `timeout` seconds (0: none) passed;
  /// false on a timeout.
  bool await(fsdp_future *f, double timeout) {
    std::unique_lock<std::mutex> lock(mutex);
    auto ready = [f] { return f->done; };
    if (timeout <= 0) {
      finished.wait(lock, ready);
      return true;
    }
    return finished.wait_for(lock, std::chrono::duration<double>(timeout),
                             ready);
  }

private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      if (pending.empty()) {
        work.wait(lock);
        continue;
      }
      bool any = false;
      for (size_t i = 0; i < pending.size();) {
        int complete = 0;
        MPI_Testall(2, pending[i]->requests, &complete, MPI_STATUSES_IGNORE);
        if (!complete) {
          ++i;
          continue;
        }
        pending[i]->finished = std::chrono::steady_clock::now();
        pending[i]->done = true;
        pending.erase(pending.begin() + i);
        any = true;
      }
      if (any)
        finished.notify_all();
      // Let the rank compute between tests.
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
    }
  }

  std::mutex mutex;
  std::condition_variable work, finished;
  std::vector<fsdp_future *> pending;
  bool stop = false;
  std::thread worker;
};

std::map<uint32_t, OverlapStats> overlap;
/// Set while a synchronous collective starts: it is waited at once.
thread_local bool startingSync = false;

/// Hands a started asynchronous collective to the communication thread.
fsdp_future *track(fsdp_program *p, fsdp_future *f) {
  if (startingSync)
    return f;
  f->async = true;
  if (p->commThread)
    CommThread::get().track(f);
  return f;
}

} // namespace

// The MPI backend needs nothing beyond the groups' communicators.
void fsdp::host::startCommunication(fsdp_program &) {}
void fsdp::host::stopCommunication(fsdp_program &) {}

// A synchronous collective is waited at once, without the communication
// thread.
void fsdp::host::markSynchronous(bool on) { startingSync = on; }

const std::map<uint32_t, OverlapStats> &fsdp::host::overlapStats() {
  return overlap;
}

fsdp_future *fsdp_op_all_gather_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t dim) {
  const char *op = "all_gather";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  checkDim(op, x->type, dim);
  checkScaledDim(op, r, x->type, dim, g.size);
  int64_t bytes = byteSize(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_ALL_GATHER, axis_mask,
      accounting::bytesSent(Collective::AllGather, bytes, g.size));
  // Blocks arrive as [n, x]; along dim d > 0 they are [n, outer, piece] and
  // the result is [outer, n, piece].
  int64_t outer = leadingProduct(x->type.dims, dim);
  char *dst = static_cast<char *>(f->result->data);
  if (accounting::Staging s = accounting::allGatherStaging(byteSize(r), outer);
      s.recv) {
    f->recv = Staging(size_t(s.recv));
    dst = f->recv.get();
    int64_t n = g.size, piece = outer ? bytes / outer : 0;
    f->finish = [n, outer, piece](fsdp_future &f) {
      swapBlocks(f.recv.get(), static_cast<char *>(f.result->data), n, outer,
                 piece);
    };
  }
  int count = checkedCount(op, bytes);
  MPI_Iallgather(x->data, count, MPI_BYTE, dst, count, MPI_BYTE, g.comm,
                 &f->requests[0]);
  return track(p, f);
}

fsdp_future *fsdp_op_reduce_scatter_start(fsdp_program *p, fsdp_type r,
                                          fsdp_tensor *x, uint32_t axis_mask,
                                          fsdp_reduction reduction,
                                          int64_t dim) {
  const char *op = "reduce_scatter";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  checkDim(op, x->type, dim);
  checkScaledDim(op, x->type, r, dim, g.size);
  fsdp_rt_dtype dtype = x->type.dtype;
  int64_t numel = numElements(x->type);
  fsdp_rt_count_collective(FSDP_RT_REDUCE_SCATTER, axis_mask,
                           accounting::bytesSent(Collective::ReduceScatter,
                                                 byteSize(x->type), g.size));
  // Widen 16-bit floats, then make block i (rank i's part) contiguous:
  // [outer, n, piece] -> [n, outer, piece].
  size_t esize = reduceSize(dtype);
  int64_t outer = leadingProduct(r.dims, dim);
  const accounting::Staging staging = accounting::reduceScatterStaging(
      numel, numElements(r), fsdp_rt_dtype_size(dtype), isHalf(dtype), outer);
  const char *src = static_cast<const char *>(x->data);
  Staging wide;
  if (staging.widen) {
    wide = Staging(size_t(staging.widen));
    fsdp::rt::toFloat(dtype, x->data, numel,
                      reinterpret_cast<float *>(wide.get()));
    src = wide.get();
  }
  if (staging.send) {
    f->send = Staging(size_t(staging.send));
    swapBlocks(src, f->send.get(), outer, g.size,
               int64_t(numel * esize) / (outer * g.size));
    src = f->send.get();
  } else if (isHalf(dtype)) {
    f->send = std::move(wide);
  }
  int64_t count = numElements(r);
  void *dst = f->result->data;
  if (staging.recv) {
    f->recv = Staging(size_t(staging.recv));
    dst = f->recv.get();
  }
  int n = g.size;
  f->finish = [dtype, count, n, reduction](fsdp_future &f) {
    void *out = isHalf(dtype) ? f.recv.ptr : f.result->data;
    fsdp_rt_dtype wideType = isHalf(dtype) ? FSDP_RT_F32 : dtype;
    if (reduction == FSDP_REDUCE_AVG)
      divide(wideType, out, count, n);
    if (isHalf(dtype))
      fsdp::rt::fromFloat(dtype, static_cast<float *>(out), count,
                          f.result->data);
  };
  MPI_Ireduce_scatter_block(src, dst, checkedCount(op, count),
                            reduceType(dtype), mpiOp(reduction), g.comm,
                            &f->requests[0]);
  return track(p, f);
}

fsdp_future *fsdp_op_all_reduce_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      fsdp_reduction reduction) {
  const char *op = "all_reduce";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  checkScaledDim(op, r, x->type, -1, 1);
  fsdp_rt_dtype dtype = x->type.dtype;
  int64_t count = numElements(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_ALL_REDUCE, axis_mask,
      accounting::bytesSent(Collective::AllReduce, byteSize(x->type), g.size));
  const void *src = x->data;
  void *dst = f->result->data;
  if (accounting::Staging s =
          accounting::allReduceStaging(count, isHalf(dtype));
      s.send) {
    f->send = Staging(size_t(s.send));
    f->recv = Staging(size_t(s.recv));
    fsdp::rt::toFloat(dtype, x->data, count,
                      reinterpret_cast<float *>(f->send.get()));
    src = f->send.ptr;
    dst = f->recv.ptr;
  }
  int n = g.size;
  f->finish = [dtype, count, n, reduction](fsdp_future &f) {
    void *out = isHalf(dtype) ? f.recv.ptr : f.result->data;
    if (reduction == FSDP_REDUCE_AVG)
      divide(isHalf(dtype) ? FSDP_RT_F32 : dtype, out, count, n);
    if (isHalf(dtype))
      fsdp::rt::fromFloat(dtype, static_cast<float *>(out), count,
                          f.result->data);
  };
  MPI_Iallreduce(src, dst, checkedCount(op, count), reduceType(dtype),
                 mpiOp(reduction), g.comm, &f->requests[0]);
  return track(p, f);
}

fsdp_future *fsdp_op_all_to_all_start(fsdp_program *p, fsdp_type r,
                                      fsdp_tensor *x, uint32_t axis_mask,
                                      int64_t split_dim, int64_t concat_dim) {
  const char *op = "all_to_all";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  int64_t n = g.size;
  const fsdp_type &in = x->type;
  // The block each rank sends to one peer.
  fsdp_type block = allToAllBlock(op, r, in, n, split_dim, concat_dim);
  int64_t bytes = byteSize(in), blockBytes = bytes / n;
  fsdp_rt_count_collective(
      FSDP_RT_ALL_TO_ALL, axis_mask,
      accounting::bytesSent(Collective::AllToAll, bytes, n));
  // Send side: [outer, n, piece] along split_dim -> [n, outer, piece].
  const char *src = static_cast<const char *>(x->data);
  int64_t outer = leadingProduct(in.dims, split_dim);
  int64_t outerRecv = leadingProduct(block.dims, concat_dim);
  const accounting::Staging staging =
      accounting::allToAllStaging(bytes, n, outer, outerRecv);
  if (staging.send) {
    f->send = Staging(size_t(staging.send));
    swapBlocks(src, f->send.get(), outer, n, blockBytes / outer);
    src = f->send.get();
  }
  // Receive side: [n, outer, piece] -> [outer, n, piece] along concat_dim.
  char *dst = static_cast<char *>(f->result->data);
  if (staging.recv) {
    f->recv = Staging(size_t(staging.recv));
    dst = f->recv.get();
    int64_t piece = blockBytes / outerRecv;
    f->finish = [n, outerRecv, piece](fsdp_future &f) {
      swapBlocks(f.recv.get(), static_cast<char *>(f.result->data), n,
                 outerRecv, piece);
    };
  }
  int count = checkedCount(op, blockBytes);
  MPI_Ialltoall(src, count, MPI_BYTE, dst, count, MPI_BYTE, g.comm,
                &f->requests[0]);
  return track(p, f);
}

fsdp_future *fsdp_op_permute_start(fsdp_program *p, fsdp_type r, fsdp_tensor *x,
                                   uint32_t axis_mask, int64_t offset) {
  const char *op = "permute";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  checkScaledDim(op, r, x->type, -1, 1);
  int64_t bytes = byteSize(x->type), n = g.size;
  fsdp_rt_count_collective(
      FSDP_RT_PERMUTE, axis_mask,
      accounting::bytesSent(Collective::Permute, bytes, n));
  int64_t shift = ((offset % n) + n) % n;
  int to = int((g.rank + shift) % n), from = int((g.rank - shift + n) % n);
  int count = checkedCount(op, bytes);
  // Matching is by (peer, tag, communicator) in issue order, which every
  // rank shares, so one tag serves all permutes in flight.
  const int tag = 7;
  MPI_Irecv(f->result->data, count, MPI_BYTE, from, tag, g.comm,
            &f->requests[0]);
  MPI_Isend(x->data, count, MPI_BYTE, to, tag, g.comm, &f->requests[1]);
  return track(p, f);
}

fsdp_future *fsdp_op_broadcast_start(fsdp_program *p, fsdp_type r,
                                     fsdp_tensor *x, uint32_t axis_mask,
                                     int64_t root) {
  const char *op = "broadcast";
  const Group &g = groupOf(*p, op, axis_mask);
  fsdp_future *f = begin(op, r, x, axis_mask);
  checkScaledDim(op, r, x->type, -1, 1);
  checkRoot(op, g, root);
  int64_t bytes = byteSize(x->type);
  fsdp_rt_count_collective(
      FSDP_RT_BROADCAST, axis_mask,
      accounting::bytesSent(Collective::Broadcast, bytes, g.size));
  if (g.rank == root)
    std::memcpy(f->result->data, x->data, size_t(bytes));
  MPI_Ibcast(f->result->data, checkedCount(op, bytes), MPI_BYTE, int(root),
             g.comm, &f->requests[0]);
  return track(p, f);
}

namespace {
[[noreturn]] void timedOut(const fsdp_program &p, const fsdp_future &f) {
  fail(f.op, "step " + std::to_string(p.step) + ": the " + f.op + " over " +
                 groupName(p, f.mask) + " did not complete within " +
                 std::to_string(int64_t(p.collectiveTimeout)) +
                 " s (--collective-timeout): a rank of the group is stuck or "
                 "gone; stopping every rank");
}
} // namespace

fsdp_tensor *fsdp_wait(fsdp_program *p, fsdp_future *f) {
  if (!f)
    fail("wait", "future is null");
  auto before = std::chrono::steady_clock::now();
  if (f->tracked) {
    if (!CommThread::get().await(f, p->collectiveTimeout))
      timedOut(*p, *f);
  } else if (p->collectiveTimeout > 0) {
    // Poll, so that a stuck or dead rank stops the others instead of
    // hanging them: spin briefly, then sleep between tests.
    auto start = std::chrono::steady_clock::now();
    for (int spins = 0;; ++spins) {
      int done = 0;
      MPI_Testall(2, f->requests, &done, MPI_STATUSES_IGNORE);
      if (done)
        break;
      if (spins > 1000)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      if (waited > p->collectiveTimeout)
        timedOut(*p, *f);
    }
  }
  if (!f->tracked)
    MPI_Waitall(2, f->requests, MPI_STATUSES_IGNORE);
  {
    // Without the thread, a collective is known finished when its wait
    // returns; a synchronous one is exposed whole.
    auto now = std::chrono::steady_clock::now();
    auto ns = [](auto d) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    };
    OverlapStats &stats = overlap[f->mask];
    ++stats.calls;
    stats.inFlightNs += ns((f->tracked ? f->finished : now) - f->started);
    stats.blockedNs += ns(now - before);
  }
  if (f->finish)
    f->finish(*f);
  fsdp_release(f->input);
  fsdp_tensor *result = f->result;
  delete f;
  return result;
}

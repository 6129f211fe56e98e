//===- MPI.cpp - The collectives over MPI ---------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The host transport of the collectives (Transport.h), over the groups' MPI
// communicators (Groups.cpp), linked into the CPU runtime. Every transfer
// is a nonblocking MPI call made at the start; what follows the transfer
// (rearranging blocks back, averaging, narrowing) runs in fsdp_wait, and a
// communication thread advances the asynchronous ones meanwhile. 16-bit
// floats are reduced in f32.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"

#include "../Common/Dtype.h"
#include "../Common/Float.h"

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
  Staging(Staging &&o) { std::swap(ptr, o.ptr); }
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
  const Group *g;
  /// The axes of the group, for a timeout's message.
  uint32_t mask = 0;
  /// The input, kept alive until the transfer has finished.
  fsdp_tensor *input = nullptr;
  fsdp_tensor *result = nullptr;
  std::vector<MPI_Request> requests;
  /// Staging buffers, in the order they were allocated.
  std::vector<Staging> staging;
  /// What runs once the transfers have finished, in order.
  std::vector<std::function<void(fsdp_future &)>> finish;
  /// Whether the program started it asynchronously, and whether the
  /// communication thread advances it.
  bool async = false, tracked = false;
  /// Set by the communication thread when every request has finished.
  bool done = false;
  std::chrono::steady_clock::time_point started, finished;

  MPI_Request *request() {
    requests.push_back(MPI_REQUEST_NULL);
    return &requests.back();
  }
  int testAll() {
    int complete = 0;
    MPI_Testall(int(requests.size()), requests.data(), &complete,
                MPI_STATUSES_IGNORE);
    return complete;
  }
};

namespace {

bool isHalf(fsdp_rt_dtype dtype) {
  return dtype == FSDP_RT_BF16 || dtype == FSDP_RT_F16;
}

/// The type MPI reduces in: f32 for every float type.
MPI_Datatype reduceType(fsdp_rt_dtype dtype) {
  const fsdp::rt::DtypeTable<MPI_Datatype> names{
      MPI_FLOAT, MPI_FLOAT, MPI_FLOAT, MPI_INT32_T, MPI_INT64_T};
  return names[dtype];
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
void swapInto(const char *src, char *dst, int64_t a, int64_t b, int64_t piece) {
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

MPI_Op mpiOp(fsdp_reduction reduction) {
  return reduction == FSDP_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

/// After a reduction of `count` elements into `out` (f32 for 16-bit
/// floats, else the result): the average's division, the narrowing.
void finishReduction(fsdp_future &f, void *out, fsdp_rt_dtype dtype,
                     int64_t count, fsdp_reduction reduction) {
  if (reduction == FSDP_REDUCE_AVG)
    divide(isHalf(dtype) ? FSDP_RT_F32 : dtype, out, count, f.g->size);
  if (isHalf(dtype))
    fsdp::rt::fromFloat(dtype, static_cast<float *>(out), count,
                        f.result->data);
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
        if (!pending[i]->testAll()) {
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

} // namespace

// The MPI transport needs nothing beyond the groups' communicators.
void fsdp::host::startCommunication(fsdp_program &) {}
void fsdp::host::stopCommunication(fsdp_program &) {}

const std::map<uint32_t, OverlapStats> &fsdp::host::overlapStats() {
  return overlap;
}

//===----------------------------------------------------------------------===//
// The transport
//===----------------------------------------------------------------------===//

fsdp_future *fsdp::comm::open(const char *op, const Group &g, uint32_t mask,
                              const fsdp_type &r, fsdp_tensor *x) {
  auto *f = new fsdp_future;
  f->op = op;
  f->g = &g;
  f->mask = mask;
  f->input = fsdp_retain(x);
  f->result = newTensor(r);
  f->started = std::chrono::steady_clock::now();
  return f;
}

fsdp_tensor *fsdp::comm::resultOf(fsdp_future *f) { return f->result; }

char *fsdp::comm::stage(fsdp_future *f, int64_t bytes) {
  f->staging.emplace_back(size_t(bytes));
  return f->staging.back().get();
}

// The host moves data in program order already.
void fsdp::comm::launch(fsdp_future *) {}

void fsdp::comm::swapBlocks(fsdp_future *f, bool afterTransfer, const void *src,
                            void *dst, int64_t a, int64_t b, int64_t piece) {
  auto s = static_cast<const char *>(src);
  auto d = static_cast<char *>(dst);
  if (!afterTransfer)
    return swapInto(s, d, a, b, piece);
  f->finish.push_back([=](fsdp_future &) { swapInto(s, d, a, b, piece); });
}

void fsdp::comm::allGather(fsdp_future *f, const void *src, void *dst,
                           int64_t bytes) {
  int count = checkedCount(f->op, bytes);
  MPI_Iallgather(src, count, MPI_BYTE, dst, count, MPI_BYTE, f->g->comm,
                 f->request());
}

void fsdp::comm::broadcast(fsdp_future *f, const void *src, void *dst,
                           int64_t bytes, int root) {
  if (f->g->rank == root)
    std::memcpy(dst, src, size_t(bytes));
  MPI_Ibcast(dst, checkedCount(f->op, bytes), MPI_BYTE, root, f->g->comm,
             f->request());
}

void fsdp::comm::exchange(fsdp_future *f,
                          const std::vector<PeerBlock> &blocks) {
  // Matching is by (peer, tag, communicator) in issue order, which every
  // rank shares, so one tag serves all exchanges in flight.
  const int tag = 7;
  for (const PeerBlock &b : blocks)
    if (b.recv)
      MPI_Irecv(b.recv, checkedCount(f->op, b.recvBytes), MPI_BYTE, b.peer, tag,
                f->g->comm, f->request());
  for (const PeerBlock &b : blocks)
    if (b.send)
      MPI_Isend(b.send, checkedCount(f->op, b.sendBytes), MPI_BYTE, b.peer, tag,
                f->g->comm, f->request());
}

void fsdp::comm::reduceScatter(fsdp_future *f, const fsdp_tensor *x,
                               int64_t outer, fsdp_reduction reduction) {
  // Widen 16-bit floats, then make block i (rank i's part) contiguous:
  // [outer, n, piece] -> [n, outer, piece].
  fsdp_rt_dtype dtype = x->type.dtype;
  int64_t numel = numElements(x->type), count = numElements(f->result->type);
  int n = f->g->size;
  const accounting::Staging staging = accounting::reduceScatterStaging(
      numel, count, fsdp_rt_dtype_size(dtype), isHalf(dtype), outer);
  const char *src = static_cast<const char *>(x->data);
  Staging wide;
  if (staging.widen) {
    wide = Staging(size_t(staging.widen));
    fsdp::rt::toFloat(dtype, x->data, numel,
                      reinterpret_cast<float *>(wide.get()));
    src = wide.get();
  }
  if (staging.send) {
    char *send = stage(f, staging.send);
    swapInto(src, send, outer, n,
             int64_t(numel * reduceSize(dtype)) / (outer * n));
    src = send;
  } else if (isHalf(dtype)) {
    f->staging.push_back(std::move(wide));
  }
  void *dst = staging.recv ? stage(f, staging.recv) : f->result->data;
  f->finish.push_back([=](fsdp_future &f) {
    finishReduction(f, dst, dtype, count, reduction);
  });
  MPI_Ireduce_scatter_block(src, dst, checkedCount(f->op, count),
                            reduceType(dtype), mpiOp(reduction), f->g->comm,
                            f->request());
}

void fsdp::comm::allReduce(fsdp_future *f, const fsdp_tensor *x,
                           fsdp_reduction reduction) {
  fsdp_rt_dtype dtype = x->type.dtype;
  int64_t count = numElements(x->type);
  const void *src = x->data;
  void *dst = f->result->data;
  if (accounting::Staging s =
          accounting::allReduceStaging(count, isHalf(dtype));
      s.send) {
    char *send = stage(f, s.send);
    dst = stage(f, s.recv);
    fsdp::rt::toFloat(dtype, x->data, count, reinterpret_cast<float *>(send));
    src = send;
  }
  f->finish.push_back([=](fsdp_future &f) {
    finishReduction(f, dst, dtype, count, reduction);
  });
  MPI_Iallreduce(src, dst, checkedCount(f->op, count), reduceType(dtype),
                 mpiOp(reduction), f->g->comm, f->request());
}

int64_t fsdp::comm::exchangeRows(fsdp_future *f, const fsdp_tensor *x,
                                 const fsdp_tensor *sendCounts,
                                 const fsdp_tensor *recvCounts,
                                 int64_t rowBytes) {
  // Host memory: the counts are read where the program wrote them.
  int n = f->g->size;
  auto counts = [&](const fsdp_tensor *t, const char *what, int64_t rows) {
    const auto *c = static_cast<const int64_t *>(t->data);
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      if (c[i] < 0)
        fail(f->op, std::string(what) + "[" + std::to_string(i) + "] is " +
                        std::to_string(c[i]));
      total += c[i];
    }
    if (total > rows)
      fail(f->op, std::string(what) + " add up to " + std::to_string(total) +
                      " rows, more than the " + std::to_string(rows) +
                      " of the " + (t == sendCounts ? "operand" : "result"));
    return c;
  };
  const int64_t *send = counts(sendCounts, "send_counts", x->type.dims[0]);
  const int64_t *recv =
      counts(recvCounts, "recv_counts", f->result->type.dims[0]);
  std::vector<PeerBlock> blocks;
  const char *src = static_cast<const char *>(x->data);
  char *dst = static_cast<char *>(f->result->data);
  int64_t sentToOthers = 0;
  for (int peer = 0; peer < n; ++peer) {
    blocks.push_back(
        {peer, src, send[peer] * rowBytes, dst, recv[peer] * rowBytes});
    src += send[peer] * rowBytes;
    dst += recv[peer] * rowBytes;
    if (peer != f->g->rank)
      sentToOthers += send[peer] * rowBytes;
  }
  std::memset(dst, 0,
              size_t(static_cast<char *>(f->result->data) +
                     byteSize(f->result->type) - dst));
  fsdp::comm::exchange(f, blocks);
  return sentToOthers;
}

fsdp_future *fsdp::comm::started(fsdp_program &p, fsdp_future *f) {
  if (startingSync)
    return f;
  f->async = true;
  if (p.commThread)
    CommThread::get().track(f);
  return f;
}

// A synchronous collective is waited at once, without the communication
// thread.
void fsdp::comm::markSynchronous(bool on) { startingSync = on; }

//===----------------------------------------------------------------------===//
// Waits
//===----------------------------------------------------------------------===//

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
    for (int spins = 0; !f->testAll(); ++spins) {
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
    MPI_Waitall(int(f->requests.size()), f->requests.data(),
                MPI_STATUSES_IGNORE);
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
  for (auto &finish : f->finish)
    finish(*f);
  fsdp_release(f->input);
  fsdp_tensor *result = f->result;
  delete f;
  return result;
}

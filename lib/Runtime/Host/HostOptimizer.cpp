//===- HostOptimizer.cpp - CPU offload's optimizer on the host's cores ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// FSDP2's CPUOffloadPolicy steps the optimizer on the CPU, over the state
// and gradients in host memory. A backend kernel that reads pinned memory
// could do it too, but would stream every byte of the state across the
// host link twice per step; here the host's cores do it, and the link
// carries only the placement copies. Each call is queued in the compute
// stream's order (fsdp_rt_host_call), so it runs once the gradients it
// reads have arrived, before any later copy reads the parameters it
// writes, and the host thread that queues the step never waits.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "../Common/OptimizerMath.h"
#include "../Common/Profile.h"
#include "../Common/Threads.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

using namespace fsdp::host;
using namespace fsdp::rt;

namespace {
int hostThreads = 0;

/// Threads that stay for the process and take the pieces of one call at a
/// time, the calling thread among them: a step queues a host call per
/// optimizer tensor, and starting a team of threads per call would cost
/// more than a small tensor's work. Calls come from one thread at a time
/// (the stream's host-function thread, or the step's on a backend whose
/// host calls run at once); a mutex keeps a second caller waiting.
class Team {
public:
  /// Calls piece(c) for c in [0, pieces): piece 0 on this thread, the
  /// others on the team's; returns when all are done.
  void run(int64_t pieces, const std::function<void(int64_t)> &piece) {
    std::lock_guard<std::mutex> call(callMutex);
    while (size < pieces - 1)
      std::thread(&Team::work, this, ++size).detach();
    {
      std::lock_guard<std::mutex> lock(mutex);
      job = &piece;
      taking = pieces;
      pending = pieces - 1;
      ++generation;
    }
    start.notify_all();
    piece(0);
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return pending == 0; });
  }

private:
  /// Thread `index` (from 1) takes piece `index` of every call that has
  /// that many.
  void work(int64_t index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      start.wait(lock, [&] { return generation != seen; });
      seen = generation;
      if (index >= taking)
        continue;
      const std::function<void(int64_t)> &piece = *job;
      lock.unlock();
      piece(index);
      lock.lock();
      if (--pending == 0)
        done.notify_one();
    }
  }

  std::mutex callMutex, mutex;
  std::condition_variable start, done;
  /// Threads started so far, besides the caller's.
  int64_t size = 0;
  const std::function<void(int64_t)> *job = nullptr;
  uint64_t generation = 0;
  int64_t taking = 0, pending = 0;
};

/// Calls fn over [0, n) in one piece per thread, this thread among them.
void onThreads(int64_t n, const std::function<void(int64_t, int64_t)> &fn) {
  int64_t pieces = std::min<int64_t>(hostThreadCount(), n);
  if (pieces <= 1) {
    fn(0, n);
    return;
  }
  // Never destroyed: its threads wait for work until the process exits.
  static Team *team = new Team;
  team->run(pieces,
            [&](int64_t c) { fn(n * c / pieces, n * (c + 1) / pieces); });
}

struct HostWork {
  const char *name;
  std::function<void()> body;
};

void runWork(void *arg) {
  auto *work = static_cast<HostWork *>(arg);
  auto start = std::chrono::steady_clock::now();
  work->body();
  profileAdd(work->name, std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count());
}

void releaseWork(void *arg) { delete static_cast<HostWork *>(arg); }

/// Queues `body` on the compute stream, to run on the host; `name` is its
/// row in the kernel profile.
void queue(const char *name, std::function<void()> body) {
  fsdp_rt_host_call(nullptr, runWork, new HostWork{name, std::move(body)},
                    releaseWork);
}
} // namespace

bool fsdp::host::onHostCores(const fsdp_program &p, const fsdp_tensor *t) {
  return p.optimizerOnHostCores && t->host && !fsdp_rt_host_addressable();
}

void fsdp::host::setHostThreads(int localRanks) {
  if (const char *omp = std::getenv("OMP_NUM_THREADS"))
    hostThreads = std::max(1, std::atoi(omp));
  else
    hostThreads = threadsPerRank(localRanks);
}

int fsdp::host::hostThreadCount() {
  return hostThreads > 0 ? hostThreads : threadsPerRank(1);
}

void fsdp::host::queueHostSumSquares(fsdp_rt_dtype dtype, const void *x,
                                     int64_t numel, float *out) {
  queue("sum_squares (host cores)",
        [=] { out[0] = optimizer::sumSquares(onThreads, dtype, x, numel); });
}

void fsdp::host::queueHostAdamW(std::vector<fsdp_rt_adamw_tensor> tensors,
                                fsdp_rt_dtype gradDtype, double lr,
                                double beta1, double beta2, double eps,
                                double weightDecay, const float *step,
                                const float *gradScale, const float *lrScale) {
  // The step count and the scales are read when the call runs: the step
  // (the clip coefficient, the schedule) may have just written them.
  queue("adamw (host cores)", [=, tensors = std::move(tensors)] {
    optimizer::adamw(
        onThreads, int64_t(tensors.size()), tensors.data(), gradDtype,
        optimizer::adamwCoefficients(optimizer::scaledLr(lr, lrScale), beta1,
                                     beta2, eps, weightDecay, step[0],
                                     gradScale[0]));
  });
}

void fsdp::host::queueHostSgd(float *param, float *momentumBuffer,
                              fsdp_rt_dtype gradDtype, const void *grad,
                              int64_t numel, double lr, double momentum,
                              double weightDecay, const float *step,
                              const float *gradScale, const float *lrScale) {
  queue("sgd (host cores)", [=] {
    optimizer::sgd(onThreads, param, momentumBuffer, gradDtype, grad, numel,
                   {optimizer::scaledLr(lr, lrScale), momentum, weightDecay,
                    gradScale[0], step[0] == 1.0f});
  });
}

//===- Support.cpp - Memory, streams, counters and conversions ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "../Common/Counters.h"
#include "../Common/Profile.h"
#include "../Common/Threads.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <malloc.h>

using namespace fsdp::rt;

void fsdp_rt_set_threads(int local_ranks) {
  if (std::getenv("OMP_NUM_THREADS"))
    return;
  omp_set_num_threads(threadsPerRank(local_ranks));
}

std::vector<int64_t> fsdp::rt::stridesOf(const int64_t *shape, int rank) {
  std::vector<int64_t> strides(rank);
  stridesOf(shape, rank, strides.data());
  return strides;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

// Each allocation is preceded by a 64-byte header holding its size, so that
// free can update the byte count and the data stays 64-byte aligned.
static constexpr size_t kHeader = 64;
static std::atomic<int64_t> currentBytes{0};
static std::atomic<int64_t> peakBytes{0};

namespace {
/// Keeps freed blocks in the process for the next step's buffers of the
/// same sizes instead of returning them to the system (glibc's default for
/// blocks over its adaptive mmap threshold), which would make every step
/// fault its activation pages in again.
struct KeepFreedMemory {
  KeepFreedMemory() {
#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
#endif
  }
} keepFreedMemory;
} // namespace

void *fsdp_rt_alloc(size_t bytes) {
  size_t total = (bytes + kHeader + 63) / 64 * 64;
  auto *base = static_cast<char *>(std::aligned_alloc(64, total));
  if (!base)
    return nullptr;
  *reinterpret_cast<size_t *>(base) = bytes;
  int64_t now = currentBytes.fetch_add(bytes) + int64_t(bytes);
  int64_t peak = peakBytes.load();
  while (now > peak && !peakBytes.compare_exchange_weak(peak, now))
    ;
  return base + kHeader;
}

void fsdp_rt_free(void *ptr) {
  if (!ptr)
    return;
  char *base = static_cast<char *>(ptr) - kHeader;
  currentBytes.fetch_sub(int64_t(*reinterpret_cast<size_t *>(base)));
  std::free(base);
}

void fsdp_rt_zero(fsdp_rt_stream, void *ptr, size_t bytes) {
  std::memset(ptr, 0, bytes);
}

int64_t fsdp_rt_memory_current(void) { return currentBytes.load(); }

void fsdp_rt_copy_to_device(fsdp_rt_stream, void *dst, const void *host_src,
                            size_t bytes) {
  if (bytes)
    std::memcpy(dst, host_src, bytes);
}

// Host syncs are counted where the CUDA backend blocks the host, so that
// the host-sync count of a step is the same on both backends.
void fsdp_rt_copy_to_host(fsdp_rt_stream, void *host_dst, const void *src,
                          size_t bytes) {
  fsdp::rt::counters::addHostSync();
  if (bytes)
    std::memcpy(host_dst, src, bytes);
}
void *fsdp_rt_host_alloc(size_t bytes) {
  return std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
}

void fsdp_rt_host_free(void *ptr) { std::free(ptr); }

int64_t fsdp_rt_memory_peak(void) { return peakBytes.load(); }
void fsdp_rt_memory_reset_peak(void) { peakBytes.store(currentBytes.load()); }

// Without a pool the held memory is what callers asked for; never reset.
static std::atomic<int64_t> reservedPeak{0};
int64_t fsdp_rt_memory_reserved_peak(void) {
  int64_t peak = peakBytes.load(), seen = reservedPeak.load();
  while (peak > seen && !reservedPeak.compare_exchange_weak(seen, peak))
    ;
  return reservedPeak.load();
}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

// CPU kernels finish before they return, so a stream or event carries no
// state; the structs only give each handle a distinct address.
struct fsdp_rt_stream_impl {
  char unused;
};
struct fsdp_rt_event_impl {
  char unused;
};

fsdp_rt_stream fsdp_rt_stream_create(void) { return new fsdp_rt_stream_impl; }
void fsdp_rt_stream_destroy(fsdp_rt_stream stream) { delete stream; }
void fsdp_rt_stream_synchronize(fsdp_rt_stream) {
  fsdp::rt::counters::addHostSync();
}
void fsdp_rt_stream_wait_event(fsdp_rt_stream, fsdp_rt_event) {}
fsdp_rt_event fsdp_rt_event_create(void) { return new fsdp_rt_event_impl; }
void fsdp_rt_event_destroy(fsdp_rt_event event) { delete event; }
void fsdp_rt_event_record(fsdp_rt_event, fsdp_rt_stream) {}
void fsdp_rt_event_synchronize(fsdp_rt_event) {
  fsdp::rt::counters::addHostSync();
}

void fsdp_rt_host_call(fsdp_rt_stream, void (*fn)(void *), void *arg,
                       void (*release)(void *)) {
  fn(arg);
  if (release)
    release(arg);
}

// The CPU backend runs each call as it comes: it has nothing to record. The
// host layer asks fsdp_rt_graph_supported first and reports the option.
int fsdp_rt_graph_supported(void) { return 0; }

[[noreturn]] static void noGraphs(const char *call) {
  std::fprintf(stderr,
               "fsdp runtime error: %s: the CPU backend does not record "
               "steps (CUDA graphs need fsdp-compile --target cuda)\n",
               call);
  std::abort();
}

void fsdp_rt_graph_begin(void) { noGraphs("fsdp_rt_graph_begin"); }
void fsdp_rt_graph_end(void) { noGraphs("fsdp_rt_graph_end"); }
void fsdp_rt_graph_launch(void) { noGraphs("fsdp_rt_graph_launch"); }
void fsdp_rt_graph_destroy(void) {}

//===----------------------------------------------------------------------===//
// Counters (Common/Counters.cpp keeps them)
//===----------------------------------------------------------------------===//

int64_t fsdp_rt_kernel_time_ns(fsdp_rt_kernel_class cls) {
  return fsdp::rt::counters::kernelTime(cls);
}

int fsdp_rt_kernel_profile(int max, const char **names, int64_t *calls,
                           int64_t *time_ns) {
  return fsdp::rt::profileRead(max, names, calls, time_ns);
}

void fsdp_rt_counters_reset(void) { fsdp::rt::counters::reset(); }

KernelTimer::~KernelTimer() {
  auto elapsed = std::chrono::steady_clock::now() - start;
  int64_t nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  fsdp::rt::counters::addKernelCall(cls);
  fsdp::rt::counters::addKernelTime(cls, name, nanos);
}

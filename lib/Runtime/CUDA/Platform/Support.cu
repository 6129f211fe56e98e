//===- Support.cu - Errors, streams, events, copies and counters ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Kernel time is measured on the GPU: each call records a timing event
// before and after its work on its stream, and the elapsed times are only
// collected when fsdp_rt_kernel_time_ns is read (a report outside the
// step), which waits for them. Until then completed pairs are harvested
// without waiting whenever many have piled up, so a run that never reads
// the times does not grow without bound.
//
//===----------------------------------------------------------------------===//

#include "../Internal.cuh"

#include "../../Common/Counters.h"
#include "../../Common/Profile.h"

#include "fsdp/Runtime/RuntimeCUDA.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

using namespace fsdp::rt::cuda;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

void fsdp::rt::cuda::fail(const char *where, const char *what) {
  std::fprintf(stderr, "fsdp runtime error: %s: %s\n", where, what);
  std::abort();
}

void fsdp::rt::cuda::check(cudaError_t err, const char *where) {
  if (err == cudaSuccess)
    return;
  std::fprintf(stderr, "fsdp runtime error: %s: CUDA error %s: %s\n", where,
               cudaGetErrorName(err), cudaGetErrorString(err));
  std::abort();
}

void fsdp::rt::cuda::check(cublasStatus_t status, const char *where) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return;
  std::fprintf(stderr, "fsdp runtime error: %s: cuBLAS error %s: %s\n", where,
               cublasGetStatusName(status), cublasGetStatusString(status));
  std::abort();
}

// Threads are how the CPU backend shares a node's cores among its ranks;
// CUDA kernels run on the rank's GPU, so there is nothing to share.
void fsdp_rt_set_threads(int) {}

//===----------------------------------------------------------------------===//
// Streams and events
//===----------------------------------------------------------------------===//

namespace {
/// The stream NULL names, created on first use and kept for the process:
/// destroying it at exit would race the CUDA context's own teardown.
fsdp_rt_stream_impl &computeStream() {
  static fsdp_rt_stream_impl *impl = [] {
    auto *s = new fsdp_rt_stream_impl;
    check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
          "compute stream");
    return s;
  }();
  return *impl;
}

fsdp_rt_stream_impl &implOf(fsdp_rt_stream stream) {
  return stream ? *stream : computeStream();
}

std::mutex blasMutex;
} // namespace

cudaStream_t fsdp::rt::cuda::streamOf(fsdp_rt_stream stream) {
  return implOf(stream).stream;
}

cudaStream_t fsdp_rt_cuda_stream(fsdp_rt_stream stream) {
  return streamOf(stream);
}

cublasHandle_t fsdp::rt::cuda::blasOf(fsdp_rt_stream stream) {
  fsdp_rt_stream_impl &impl = implOf(stream);
  std::lock_guard<std::mutex> lock(blasMutex);
  if (!impl.blas) {
    check(cublasCreate(&impl.blas), "cublasCreate");
    check(cublasSetStream(impl.blas, impl.stream), "cublasSetStream");
    // Split-K partial sums of a 16-bit product stay in f32, so a product is
    // rounded once, as on the CPU backend.
    check(cublasSetMathMode(
              impl.blas,
              cublasMath_t(CUBLAS_DEFAULT_MATH |
                           CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          "cublasSetMathMode");
  }
  return impl.blas;
}

void fsdp::rt::cuda::countHostSync() { fsdp::rt::counters::addHostSync(); }

fsdp_rt_stream fsdp_rt_stream_create(void) {
  auto *s = new fsdp_rt_stream_impl;
  check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
        "fsdp_rt_stream_create");
  return s;
}

void fsdp_rt_stream_destroy(fsdp_rt_stream stream) {
  if (!stream)
    return;
  if (stream->blas)
    check(cublasDestroy(stream->blas), "fsdp_rt_stream_destroy");
  check(cudaStreamDestroy(stream->stream), "fsdp_rt_stream_destroy");
  delete stream;
}

void fsdp_rt_stream_synchronize(fsdp_rt_stream stream) {
  countHostSync();
  check(cudaStreamSynchronize(streamOf(stream)), "fsdp_rt_stream_synchronize");
}

void fsdp_rt_stream_wait_event(fsdp_rt_stream stream, fsdp_rt_event event) {
  check(cudaStreamWaitEvent(streamOf(stream), event->event, 0),
        "fsdp_rt_stream_wait_event");
}

fsdp_rt_event fsdp_rt_event_create(void) {
  auto *e = new fsdp_rt_event_impl;
  check(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming),
        "fsdp_rt_event_create");
  return e;
}

void fsdp_rt_event_destroy(fsdp_rt_event event) {
  if (!event)
    return;
  check(cudaEventDestroy(event->event), "fsdp_rt_event_destroy");
  delete event;
}

void fsdp_rt_event_record(fsdp_rt_event event, fsdp_rt_stream stream) {
  check(cudaEventRecord(event->event, streamOf(stream)),
        "fsdp_rt_event_record");
}

void fsdp_rt_event_synchronize(fsdp_rt_event event) {
  countHostSync();
  check(cudaEventSynchronize(event->event), "fsdp_rt_event_synchronize");
}

namespace {
struct HostCall {
  void (*fn)(void *);
  void *arg;
  void (*release)(void *);
};

void CUDART_CB runHostCall(void *call) {
  auto *c = static_cast<HostCall *>(call);
  c->fn(c->arg);
  if (c->release)
    c->release(c->arg);
  delete c;
}

void CUDART_CB runRecordedHostCall(void *call) {
  auto *c = static_cast<const HostCall *>(call);
  c->fn(c->arg);
}
} // namespace

void fsdp_rt_host_call(fsdp_rt_stream stream, void (*fn)(void *), void *arg,
                       void (*release)(void *)) {
  // A recorded call runs again at every replay: it and its argument stay
  // for the process.
  bool recorded = recordingGraph();
  check(cudaLaunchHostFunc(streamOf(stream),
                           recorded ? runRecordedHostCall : runHostCall,
                           new HostCall{fn, arg, release}),
        "fsdp_rt_host_call");
}

int fsdp_rt_host_addressable(void) { return 0; }

const char *fsdp_rt_kernel_isa(void) {
  static const std::string isa = [] {
    int device = 0, major = 0, minor = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    return "CUDA sm_" + std::to_string(major) + std::to_string(minor);
  }();
  return isa.c_str();
}

namespace {
struct HostCopy {
  void *dst;
  const void *src;
  size_t dstPitch, srcPitch, width, rows;
  /// The source as it was when the copy was queued, for a snapshot.
  std::vector<char> source;
};

void runHostCopy(void *arg) {
  auto *c = static_cast<const HostCopy *>(arg);
  for (size_t r = 0; r < c->rows; ++r)
    std::memcpy(static_cast<char *>(c->dst) + r * c->dstPitch,
                static_cast<const char *>(c->src) + r * c->srcPitch, c->width);
}

void releaseHostCopy(void *arg) { delete static_cast<HostCopy *>(arg); }
} // namespace

void fsdp::rt::cuda::queueHostCopy(fsdp_rt_stream stream, void *dst,
                                   size_t dstPitch, const void *src,
                                   size_t srcPitch, size_t width, size_t rows,
                                   bool snapshot) {
  auto *c = new HostCopy{dst, src, dstPitch, srcPitch, width, rows, {}};
  if (snapshot) {
    c->source.resize(width * rows);
    for (size_t r = 0; r < rows; ++r)
      std::memcpy(c->source.data() + r * width,
                  static_cast<const char *>(src) + r * srcPitch, width);
    c->src = c->source.data();
    c->srcPitch = width;
  }
  fsdp_rt_host_call(stream, runHostCopy, c, releaseHostCopy);
}

//===----------------------------------------------------------------------===//
// Host/device copies
//===----------------------------------------------------------------------===//

// cudaMemcpyDefault lets the driver infer the direction from the pointers
// (unified addressing), so a host layer that copies between two runtime
// buffers through these functions still gets a correct copy.

/// The largest copy into host memory queued with a snapshot of its source.
static constexpr size_t kHostSnapshotBytes = size_t(1) << 20;

void fsdp_rt_copy_to_device(fsdp_rt_stream stream, void *dst,
                            const void *host_src, size_t bytes) {
  // From pageable memory the driver stages the source before returning, so
  // the caller may reuse it at once, as on the CPU backend. A runtime
  // buffer in host memory (CPU offload's) is written in stream order, after
  // the work that may still read it (the last step's optimizer).
  // A small copy (a step's inputs) is queued with a snapshot of its source;
  // a large one (a parameter's initial values, before the first step)
  // waits for the stream rather than hold a second copy of the source.
  if (!bytes)
    return;
  if (hostMemory(dst)) {
    if (recordingGraph())
      fail("fsdp_rt_copy_to_device",
           "a copy into host memory cannot be recorded in a step graph: "
           "each replay would write the source as it was when recorded");
    if (bytes <= kHostSnapshotBytes)
      return queueHostCopy(stream, dst, bytes, host_src, bytes, bytes, 1,
                           /*snapshot=*/true);
    countHostSync();
    check(cudaStreamSynchronize(streamOf(stream)), "fsdp_rt_copy_to_device");
    std::memcpy(dst, host_src, bytes);
    return;
  }
  check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault,
                        streamOf(stream)),
        "fsdp_rt_copy_to_device");
}

void fsdp_rt_copy_to_host(fsdp_rt_stream stream, void *host_dst,
                          const void *src, size_t bytes) {
  // A copy into pageable memory blocks the host anyway; synchronizing
  // makes the data complete on return for pinned memory too, which is
  // stronger than the documented contract (complete after
  // fsdp_rt_stream_synchronize) and counts as the host sync it is.
  // A runtime buffer in host memory is read once the work queued before
  // has written it (the last step's optimizer, on the host's cores).
  cudaStream_t s = streamOf(stream);
  bool fromHost = bytes && hostMemory(src);
  if (bytes && !fromHost)
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, s),
          "fsdp_rt_copy_to_host");
  countHostSync();
  check(cudaStreamSynchronize(s), "fsdp_rt_copy_to_host");
  if (fromHost)
    std::memcpy(host_dst, src, bytes);
}

//===----------------------------------------------------------------------===//
// Counters (Common/Counters.cpp keeps them)
//===----------------------------------------------------------------------===//

namespace {
/// A call whose stop event may not have completed yet.
struct TimedCall {
  fsdp_rt_kernel_class cls;
  const char *name;
  cudaEvent_t start, stop;
};

/// The timing events: pairs in flight and pairs free for the next call.
class Timing {
public:
  static Timing &get() {
    static Timing *timing = new Timing;
    return *timing;
  }

  void take(cudaEvent_t &start, cudaEvent_t &stop) {
    std::lock_guard<std::mutex> lock(mutex);
    if (freeEvents.size() >= 2) {
      stop = freeEvents.back();
      freeEvents.pop_back();
      start = freeEvents.back();
      freeEvents.pop_back();
      return;
    }
    check(cudaEventCreate(&start), "timing event");
    check(cudaEventCreate(&stop), "timing event");
  }

  void add(TimedCall call) {
    std::lock_guard<std::mutex> lock(mutex);
    pending.push_back(call);
    if (pending.size() >= harvestAt) {
      collect(/*wait=*/false);
      // Amortize: scan again only once as many more calls are pending.
      harvestAt = std::max<size_t>(kHarvest, 2 * pending.size());
    }
  }

  /// Waits for every pending call and adds its time (reading the counter).
  void flush() {
    std::lock_guard<std::mutex> lock(mutex);
    if (pending.empty())
      return;
    countHostSync();
    collect(/*wait=*/true);
  }

  /// Drops the pending calls: they belong to before the reset.
  void discard() {
    std::lock_guard<std::mutex> lock(mutex);
    for (const TimedCall &call : pending) {
      freeEvents.push_back(call.start);
      freeEvents.push_back(call.stop);
    }
    pending.clear();
    harvestAt = kHarvest;
  }

private:
  static constexpr size_t kHarvest = 4096;

  /// Adds the time of each pending call whose stop event completed
  /// (waiting for it when `wait`) and frees its events.
  void collect(bool wait) {
    std::vector<TimedCall> left;
    for (const TimedCall &call : pending) {
      cudaError_t state =
          wait ? cudaEventSynchronize(call.stop) : cudaEventQuery(call.stop);
      if (state == cudaErrorNotReady) {
        left.push_back(call);
        continue;
      }
      check(state, "fsdp_rt_kernel_time_ns");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, call.start, call.stop),
            "fsdp_rt_kernel_time_ns");
      fsdp::rt::counters::addKernelTime(call.cls, call.name,
                              int64_t(double(ms) * 1e6));
      freeEvents.push_back(call.start);
      freeEvents.push_back(call.stop);
    }
    pending.swap(left);
  }

  std::mutex mutex;
  std::vector<TimedCall> pending;
  std::vector<cudaEvent_t> freeEvents;
  size_t harvestAt = kHarvest;
};
} // namespace

KernelScope::KernelScope(fsdp_rt_kernel_class cls, fsdp_rt_stream stream,
                         const char *name)
    : cls(cls), cudaStream(streamOf(stream)), callName(name) {
  fsdp::rt::counters::addKernelCall(cls);
  // A call recorded into a graph is not timed: its events could not be
  // read.
  if (recordingGraph())
    return;
  Timing::get().take(start, stop);
  check(cudaEventRecord(start, cudaStream), name);
}

KernelScope::~KernelScope() {
  // A launch error is reported by the next runtime call; name this one.
  // cudaErrorNotReady is a query's answer, never a failure.
  cudaError_t err = cudaGetLastError();
  if (err != cudaErrorNotReady)
    check(err, callName);
  if (recordingGraph())
    return;
  check(cudaEventRecord(stop, cudaStream), callName);
  Timing::get().add({cls, callName, start, stop});
}

int64_t fsdp_rt_kernel_time_ns(fsdp_rt_kernel_class cls) {
  Timing::get().flush();
  return fsdp::rt::counters::kernelTime(cls);
}

int fsdp_rt_kernel_profile(int max, const char **names, int64_t *calls,
                           int64_t *time_ns) {
  Timing::get().flush();
  return fsdp::rt::profileRead(max, names, calls, time_ns);
}

void fsdp_rt_counters_reset(void) {
  Timing::get().discard();
  fsdp::rt::counters::reset();
}

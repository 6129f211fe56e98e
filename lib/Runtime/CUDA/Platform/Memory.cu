//===- Memory.cu - Stream-ordered device memory and its counters ----------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Buffers come from one memory pool of the current device, allocated and
// freed in order on the compute stream (cudaMallocFromPoolAsync /
// cudaFreeAsync), so a free followed by an allocation reuses the memory
// without a host synchronization. The pool's release threshold is
// UINT64_MAX: freed memory stays in the pool for the next step's buffers
// instead of going back to the driver at each synchronization, which is
// what PyTorch's caching allocator does too. The byte counters count what
// callers asked for, as the CPU backend does, from a map of live buffers.
//
//===----------------------------------------------------------------------===//

#include "../Internal.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

using namespace fsdp::rt::cuda;

namespace {
class Pool {
public:
  static Pool &get() {
    // Kept for the process: the pool must outlive every static that frees
    // into it.
    static Pool *pool = new Pool;
    return *pool;
  }

  cudaMemPool_t handle() const { return pool; }

  void added(void *ptr, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    sizes[ptr] = bytes;
    current += int64_t(bytes);
    peak = std::max(peak, current);
  }

  /// Forgets `ptr`; false if fsdp_rt_alloc did not return it.
  bool removed(void *ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(ptr);
    if (it == sizes.end())
      return false;
    current -= int64_t(it->second);
    sizes.erase(it);
    return true;
  }

  int64_t currentBytes() {
    std::lock_guard<std::mutex> lock(mutex);
    return current;
  }
  int64_t peakBytes() {
    std::lock_guard<std::mutex> lock(mutex);
    return peak;
  }
  void resetPeak() {
    std::lock_guard<std::mutex> lock(mutex);
    peak = current;
  }

private:
  Pool() {
    int device = 0;
    check(cudaGetDevice(&device), "memory pool");
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&pool, &props), "memory pool");
    uint64_t keepAll = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                  &keepAll),
          "memory pool");
  }

  cudaMemPool_t pool = nullptr;
  std::mutex mutex;
  std::unordered_map<void *, size_t> sizes;
  int64_t current = 0, peak = 0;
};
} // namespace

void *fsdp_rt_alloc(size_t bytes) {
  Pool &pool = Pool::get();
  void *ptr = nullptr;
  // A zero-byte request still gets a distinct pointer, as on the CPU.
  cudaError_t err = cudaMallocFromPoolAsync(&ptr, std::max<size_t>(bytes, 1),
                                            pool.handle(), streamOf(nullptr));
  if (err == cudaErrorMemoryAllocation) {
    // Out of memory is the caller's to report (NULL); clear the error so
    // that the next kernel does not take it for its own.
    (void)cudaGetLastError();
    return nullptr;
  }
  check(err, "fsdp_rt_alloc");
  pool.added(ptr, bytes);
  return ptr;
}

void fsdp_rt_free(void *ptr) {
  if (!ptr)
    return;
  if (!Pool::get().removed(ptr))
    fail("fsdp_rt_free", "the pointer does not come from fsdp_rt_alloc");
  check(cudaFreeAsync(ptr, streamOf(nullptr)), "fsdp_rt_free");
}

namespace {
/// Pinned host blocks (cudaMallocHost: mapped, so kernels read them),
/// kept for reuse by size once freed. cudaFreeHost would synchronize the
/// device; reuse does not need to, because every access to these blocks is
/// queued on the compute stream (kernels, copies, the host layer's uploads)
/// and a new owner's work is queued after the old owner's.
class PinnedCache {
public:
  static PinnedCache &get() {
    static PinnedCache *cache = new PinnedCache;
    return *cache;
  }

  void *take(size_t bytes) {
    size_t size = roundUp(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = spare.find(size);
      if (it != spare.end()) {
        void *ptr = it->second;
        spare.erase(it);
        sizes[ptr] = size;
        return ptr;
      }
    }
    void *ptr = nullptr;
    if (cudaMallocHost(&ptr, size) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mutex);
    sizes[ptr] = size;
    return ptr;
  }

  /// Whether `ptr` points into a block that is handed out.
  bool contains(const void *ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.upper_bound(const_cast<void *>(ptr));
    if (it == sizes.begin())
      return false;
    --it;
    return static_cast<const char *>(ptr) <
           static_cast<const char *>(it->first) + it->second;
  }

  void give(void *ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(ptr);
    if (it == sizes.end())
      fail("fsdp_rt_host_free",
           "the pointer does not come from fsdp_rt_host_alloc");
    // A block freed while a step is recorded stays the recording's: its
    // copies, memsets and host functions write it again at every replay,
    // so it is never handed out again.
    if (!recordingGraph())
      spare.emplace(it->second, ptr);
    sizes.erase(it);
  }

private:
  static size_t roundUp(size_t bytes) {
    return (std::max<size_t>(bytes, 1) + 511) / 512 * 512;
  }
  std::mutex mutex;
  std::unordered_multimap<size_t, void *> spare;
  /// The blocks handed out, by address.
  std::map<void *, size_t> sizes;
};
} // namespace

void *fsdp_rt_host_alloc(size_t bytes) {
  return PinnedCache::get().take(bytes);
}

bool fsdp::rt::cuda::hostMemory(const void *ptr) {
  return PinnedCache::get().contains(ptr);
}

void fsdp_rt_host_free(void *ptr) {
  if (ptr)
    PinnedCache::get().give(ptr);
}

void fsdp_rt_zero(fsdp_rt_stream stream, void *ptr, size_t bytes) {
  if (bytes)
    check(cudaMemsetAsync(ptr, 0, bytes, streamOf(stream)), "fsdp_rt_zero");
}

int64_t fsdp_rt_memory_current(void) { return Pool::get().currentBytes(); }
int64_t fsdp_rt_memory_peak(void) { return Pool::get().peakBytes(); }
void fsdp_rt_memory_reset_peak(void) { Pool::get().resetPeak(); }

int64_t fsdp_rt_memory_reserved_peak(void) {
  uint64_t high = 0, graphHigh = 0;
  check(cudaMemPoolGetAttribute(Pool::get().handle(),
                                cudaMemPoolAttrReservedMemHigh, &high),
        "fsdp_rt_memory_reserved_peak");
  // A recorded step's buffers come from the graph's memory, not the pool.
  int device = 0;
  check(cudaGetDevice(&device), "fsdp_rt_memory_reserved_peak");
  check(cudaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrReservedMemHigh,
                                       &graphHigh),
        "fsdp_rt_memory_reserved_peak");
  return int64_t(high + graphHigh);
}

void fsdp::rt::cuda::trimPool() {
  check(cudaMemPoolTrimTo(Pool::get().handle(), 0), "memory pool trim");
}

void *fsdp::rt::cuda::allocTemp(size_t bytes, cudaStream_t stream,
                                const char *where) {
  void *ptr = nullptr;
  check(cudaMallocFromPoolAsync(&ptr, bytes, Pool::get().handle(), stream),
        where);
  return ptr;
}

void fsdp::rt::cuda::freeTemp(void *ptr, cudaStream_t stream) {
  check(cudaFreeAsync(ptr, stream), "temporary buffer");
}

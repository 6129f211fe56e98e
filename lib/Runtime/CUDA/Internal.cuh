//===- Internal.cuh - Shared helpers of the CUDA runtime --------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The CUDA backend implements Runtime.h with the semantics of the CPU backend
// (lib/Runtime/CPU, which is the specification) on device pointers:
//
// - A stream is a cudaStream_t plus the cuBLAS handle used on it; NULL is
//   the runtime's compute stream, a non-blocking stream created on first
//   use (never the legacy default stream, which would serialize with every
//   other stream). Kernels launch on the stream they are given and never
//   wait on the host.
// - Memory comes from one stream-ordered pool that keeps what it is given
//   back (release threshold UINT64_MAX), so steady-state steps do not call
//   cudaMalloc. Temporaries of the kernels come from the same pool, ordered
//   on the kernel's stream.
// - Every kernel computes in f32 whatever the storage type, converting
//   bf16/f16 bit patterns exactly as the CPU backend does (round to nearest
//   even, NaN kept quiet), and accumulates where the CPU accumulates in
//   double in double.
// - Each ABI call opens a KernelScope: it counts the call, brackets the
//   call's work on its stream with a pair of timing events, and turns a
//   launch error into an abort naming the call.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_INTERNAL_CUH
#define FSDP_LIB_RUNTIME_CUDA_INTERNAL_CUH

#include "../Common/Dtype.h"
#include "../Common/FloatBits.h"
#include "../Common/Shape.h"
#include "Portable.cuh"
#include "fsdp/Runtime/Runtime.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

/// A stream of the ABI: the CUDA stream and, created on the first product
/// that runs on it, a cuBLAS handle bound to it.
struct fsdp_rt_stream_impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

/// An event of the ABI (created without timing, the cheap kind).
struct fsdp_rt_event_impl {
  cudaEvent_t event = nullptr;
};

namespace fsdp::rt::cuda {

//===----------------------------------------------------------------------===//
// Errors, streams, temporaries and timing (host side)
//===----------------------------------------------------------------------===//

/// Prints `fsdp runtime error: <where>: <what>` and aborts, as the CPU
/// backend does on a failure.
[[noreturn]] void fail(const char *where, const char *what);
/// Aborts naming `where` and the CUDA error string unless `err` is success.
void check(cudaError_t err, const char *where);
/// Aborts naming `where` and the cuBLAS status unless it is success.
void check(cublasStatus_t status, const char *where);

/// The CUDA stream behind an ABI stream; NULL is the compute stream.
cudaStream_t streamOf(fsdp_rt_stream stream);
/// The cuBLAS handle bound to `stream` (NULL: the compute stream's).
cublasHandle_t blasOf(fsdp_rt_stream stream);

/// `bytes` of device memory from the runtime's pool, usable in order on
/// `stream`; aborts naming `where` when the pool cannot grow. Temporaries
/// are not counted by fsdp_rt_memory_current (neither are the CPU
/// backend's).
void *allocTemp(size_t bytes, cudaStream_t stream, const char *where);
/// Returns a temporary to the pool once `stream` has done with it.
void freeTemp(void *ptr, cudaStream_t stream);

/// Typed temporary owning `n` elements for the lifetime of the scope,
/// released in order on the stream that allocated it.
template <typename T> class Temp {
public:
  Temp(int64_t n, cudaStream_t stream, const char *where)
      : stream(stream),
        ptr(static_cast<T *>(
            allocTemp(size_t(n > 0 ? n : 1) * sizeof(T), stream, where))) {}
  ~Temp() { freeTemp(ptr, stream); }
  Temp(const Temp &) = delete;
  Temp &operator=(const Temp &) = delete;
  T *get() const { return ptr; }

private:
  cudaStream_t stream;
  T *ptr;
};

/// One ABI call: counts it in `cls`, records timing events around the
/// work queued inside the scope on the call's stream (read lazily by
/// fsdp_rt_kernel_time_ns), and aborts naming `name` if a launch failed.
class KernelScope {
public:
  KernelScope(fsdp_rt_kernel_class cls, fsdp_rt_stream stream,
              const char *name);
  ~KernelScope();
  KernelScope(const KernelScope &) = delete;
  KernelScope &operator=(const KernelScope &) = delete;

  cudaStream_t stream() const { return cudaStream; }
  const char *name() const { return callName; }

private:
  fsdp_rt_kernel_class cls;
  cudaStream_t cudaStream;
  const char *callName;
  cudaEvent_t start, stop;
};

/// Counts a call that blocks the host (fsdp_rt_host_syncs).
void countHostSync();

/// Whether fsdp_rt_graph_begin is recording the compute stream's work.
bool recordingGraph();
/// Returns the memory pool's free memory to the device (after a wait).
void trimPool();

/// Whether `ptr` points into a runtime buffer in host memory (one from
/// fsdp_rt_host_alloc), not into device memory or the caller's memory.
bool hostMemory(const void *ptr);
/// Copies `rows` rows of `width` bytes between two host buffers in
/// `stream`'s order, as a host function: the driver runs a host-to-host
/// cudaMemcpyAsync when it is called, not when the stream reaches it. With
/// `snapshot` the source is read now (the caller may reuse it at once);
/// otherwise when the copy runs.
void queueHostCopy(fsdp_rt_stream stream, void *dst, size_t dstPitch,
                   const void *src, size_t srcPitch, size_t width, size_t rows,
                   bool snapshot);

//===----------------------------------------------------------------------===//
// Launch geometry
//===----------------------------------------------------------------------===//

/// Threads of the one-dimensional kernels and of the row kernels (one block
/// per row, block reductions).
constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over `n` items: enough to fill the GPU,
/// capped so that a grid dimension never overflows. Never called with 0
/// (an empty grid is a launch error); callers return early instead.
inline unsigned gridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < (1 << 20) ? blocks : (1 << 20));
}

/// Tensors reach at most rank 8 (Runtime.h, fsdp_type); shapes and strides
/// travel to the device by value in a struct of this capacity.
constexpr int kMaxRank = 8;

using fsdp::rt::AxisView;
using fsdp::rt::isTrailing;
using fsdp::rt::numElements;
using fsdp::rt::stridesOf;
using fsdp::rt::viewAround;

//===----------------------------------------------------------------------===//
// Element types (device side)
//===----------------------------------------------------------------------===//

// bf16/f16 conversions bit for bit as the CPU backend's: the same
// definitions (Common/FloatBits.h), compiled for the device.
using namespace fsdp::rt::bits;

/// The float element types as kernel template arguments: `T` is the
/// storage, load widens element i to f32, store rounds to it.
struct F32 {
  using T = float;
  __device__ static float load(const T *p, int64_t i) { return p[i]; }
  __device__ static void store(T *p, int64_t i, float v) { p[i] = v; }
};
/// bf16 (`IsF16` false) or f16, stored as their bits.
template <bool IsF16> struct Float16Bits {
  using T = uint16_t;
  __device__ static float load(const T *p, int64_t i) {
    return IsF16 ? f16ToFloat(p[i]) : bf16ToFloat(p[i]);
  }
  __device__ static void store(T *p, int64_t i, float v) {
    p[i] = IsF16 ? floatToF16(v) : floatToBf16(v);
  }
};
using BF16 = Float16Bits<false>;
using F16 = Float16Bits<true>;

/// The same element type for the kernels written against Portable.cuh
/// (which use CUDA's bf16/f16 types rather than raw bits).
template <typename E> struct PortableOf;
template <> struct PortableOf<F32> { using type = portable::F32; };
template <> struct PortableOf<BF16> { using type = portable::BF16; };
template <> struct PortableOf<F16> { using type = portable::F16; };
template <typename E> using Portable = typename PortableOf<E>::type;
template <typename E> const typename Portable<E>::T *asPortable(const void *p) {
  return static_cast<const typename Portable<E>::T *>(p);
}
template <typename E> typename Portable<E>::T *asPortable(void *p) {
  return static_cast<typename Portable<E>::T *>(p);
}

/// Calls fn(F32{}), fn(BF16{}) or fn(F16{}) for a float dtype; aborts naming
/// `where` for any other.
template <typename Fn>
void dispatchFloat(fsdp_rt_dtype dtype, const char *where, Fn &&fn) {
  switch (dtype) {
  case FSDP_RT_F32:
    fn(F32{});
    return;
  case FSDP_RT_BF16:
    fn(BF16{});
    return;
  case FSDP_RT_F16:
    fn(F16{});
    return;
  default:
    fail(where, "expected a float element type (f32, bf16 or f16)");
  }
}

/// The frame of most ABI kernel calls: in the scope of call `name` (class
/// `cls`), unless the tensors are `empty`, `launch(element, scope)` for the
/// element type of `dtype` (F32{}, BF16{} or F16{}).
template <typename Launch>
void launchFloat(fsdp_rt_kernel_class cls, fsdp_rt_stream stream,
                 const char *name, fsdp_rt_dtype dtype, bool empty,
                 Launch &&launch) {
  KernelScope scope(cls, stream, name);
  if (empty)
    return;
  dispatchFloat(dtype, name, [&](auto e) { launch(e, scope); });
}

/// The cuBLAS element type of a float dtype (f32 for any other).
inline cudaDataType blasType(fsdp_rt_dtype dtype) {
  constexpr DtypeTable<cudaDataType> names{CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F,
                                           CUDA_R_32F, CUDA_R_32F};
  return names[dtype];
}

/// Typed views of an untyped ABI pointer.
template <typename E> const typename E::T *asIn(const void *p) {
  return static_cast<const typename E::T *>(p);
}
template <typename E> typename E::T *asOut(void *p) {
  return static_cast<typename E::T *>(p);
}

//===----------------------------------------------------------------------===//
// Packed element maps
//===----------------------------------------------------------------------===//

/// Elements per thread of a packed map: 16 bytes of a 16-bit type, two
/// 16-byte accesses of f32.
constexpr int kPack = 8;

/// kPack elements of storage type T, aligned for vector loads and stores.
template <typename T> struct alignas(sizeof(T) * kPack) Packed { T v[kPack]; };

/// Whether every pointer allows Packed access to elements of `bytes` bytes.
inline bool packable(size_t bytes, const void *a, const void *b) {
  return (uintptr_t(a) | uintptr_t(b)) % (bytes * kPack) == 0;
}

/// out[i] = fn(x[i]) (one input) or fn(x[i], y[i]) (two), In widened to f32
/// and the result rounded to Out, for i < n. With `packed` each thread of
/// the grid-stride loop moves kPack consecutive elements as Packed vectors
/// and the last n % kPack elements go one per thread; else one element per
/// thread. Indices and operands stay in registers: no local memory.
template <bool packed, typename In, typename Out, typename Fn>
__global__ void mapKernel(const typename In::T *x, const typename In::T *y,
                          int64_t n, typename Out::T *out, Fn fn) {
  constexpr bool twoInputs = std::is_invocable_v<Fn, float, float>;
  int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x,
          stride = int64_t(gridDim.x) * blockDim.x, done = 0;
  auto apply = [&](const typename In::T *xs, const typename In::T *ys,
                   int64_t i) {
    if constexpr (twoInputs)
      return fn(In::load(xs, i), In::load(ys, i));
    else
      return fn(In::load(xs, i));
  };
  if constexpr (packed) {
    using PIn = Packed<typename In::T>;
    using POut = Packed<typename Out::T>;
    int64_t packs = n / kPack;
    for (int64_t p = first; p < packs; p += stride) {
      PIn a = reinterpret_cast<const PIn *>(x)[p], b = a;
      if constexpr (twoInputs)
        b = reinterpret_cast<const PIn *>(y)[p];
      POut o;
#pragma unroll
      for (int j = 0; j < kPack; ++j)
        Out::store(o.v, j, apply(a.v, b.v, j));
      reinterpret_cast<POut *>(out)[p] = o;
    }
    done = packs * kPack;
  }
  for (int64_t i = done + first; i < n; i += stride)
    Out::store(out, i, apply(x, y, i));
}

/// Launches mapKernel on `stream` over `n` elements, packed when every
/// pointer allows it.
template <typename In, typename Out, typename Fn>
void launchMap(cudaStream_t stream, const void *x, const void *y, int64_t n,
               void *out, Fn fn) {
  if (n == 0)
    return;
  const auto *xs = static_cast<const typename In::T *>(x);
  const auto *ys = static_cast<const typename In::T *>(y);
  auto *os = static_cast<typename Out::T *>(out);
  if (packable(sizeof(typename In::T), x, y) &&
      packable(sizeof(typename Out::T), out, nullptr))
    mapKernel<true, In, Out>
        <<<gridFor((n + kPack - 1) / kPack), kThreads, 0, stream>>>(xs, ys, n,
                                                                    os, fn);
  else
    mapKernel<false, In, Out>
        <<<gridFor(n), kThreads, 0, stream>>>(xs, ys, n, os, fn);
}

/// The value unchanged: a cast's map (the conversion is In's load and
/// Out's store).
struct Identity {
  __device__ float operator()(float v) const { return v; }
};

/// out[i] = x[i] converted from Src to Dst, for i < n, on `stream`.
template <typename Src, typename Dst>
void launchCast(cudaStream_t stream, const void *x, int64_t n, void *out) {
  launchMap<Src, Dst>(stream, x, nullptr, n, out, Identity{});
}

/// Reads index `i` of an i32 or i64 buffer.
__device__ inline int64_t loadIndex(fsdp_rt_dtype dtype, const void *p,
                                    int64_t i) {
  if (dtype == FSDP_RT_I32)
    return static_cast<const int32_t *>(p)[i];
  return static_cast<const int64_t *>(p)[i];
}

/// e^x with the range of the CPU backend's fastExp (0 below -87.3, x
/// clamped at 88), computed with CUDA's accurate expf: the activations of
/// Activations.def call it by this name.
__device__ inline float fastExp(float x) {
  return x < -87.3f ? 0.0f : expf(fminf(x, 88.0f));
}

//===----------------------------------------------------------------------===//
// Reductions (device side)
//===----------------------------------------------------------------------===//

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduces `v` over a warp with a butterfly: every lane ends with the same
/// bits (each step adds the same two values in either order, and + and max
/// commute), so lanes can branch on the result together.
template <typename T, typename Op> __device__ T warpReduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Reduces `v` over the block (blockDim.x a multiple of 32, at most 1024)
/// and returns the result to every thread. The order is fixed by the block
/// size, so the result is deterministic. Starts with a barrier, so it can
/// be called again in the same kernel.
template <typename T, typename Op> __device__ T blockReduce(T v, Op op) {
  __shared__ T partial[32];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warpReduce(v, op);
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  T result = partial[0];
  for (int w = 1; w < warps; ++w)
    result = op(result, partial[w]);
  return result;
}

//===----------------------------------------------------------------------===//
// Deterministic column sums
//===----------------------------------------------------------------------===//

/// Chunks of the reduced index for a column sum over `reduced` terms of
/// `cols` columns: enough (chunk, column) threads to fill the GPU, at
/// least 16 terms each, and a grid dimension below 65536. Depends only on
/// the shape, so the summation order, and the result, are reproducible.
inline int64_t columnChunks(int64_t reduced, int64_t cols) {
  int64_t want = (int64_t(1) << 18) / (cols > 0 ? cols : 1);
  int64_t most = (reduced + 15) / 16;
  int64_t chunks = want < most ? want : most;
  if (chunks > 65535)
    chunks = 65535;
  return chunks > 0 ? chunks : 1;
}

/// partial[c, o] = Σ term(q, o) in double over q in chunk c of [0, reduced),
/// q ascending; grid (columns / blockDim.x, chunks).
template <typename Term>
__global__ void columnPartials(int64_t reduced, int64_t cols, int64_t chunk,
                               Term term, double *partial) {
  int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= cols)
    return;
  int64_t begin = int64_t(blockIdx.y) * chunk;
  int64_t end = begin + chunk < reduced ? begin + chunk : reduced;
  double sum = 0;
  for (int64_t q = begin; q < end; ++q)
    sum += term(q, o);
  partial[int64_t(blockIdx.y) * cols + o] = sum;
}

/// out[o] = Σ_c partial[c, o] in chunk order, rounded to E.
template <typename E>
__global__ void columnFinish(const double *partial, int64_t chunks,
                             int64_t cols, typename E::T *out) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < cols;
       o += int64_t(gridDim.x) * blockDim.x) {
    double sum = 0;
    for (int64_t c = 0; c < chunks; ++c)
      sum += partial[c * cols + o];
    E::store(out, o, float(sum));
  }
}

/// out[o] = Σ_q term(q, o) for o < cols, summed in double in a fixed order
/// (chunks of q in parallel, then the chunks in order) and rounded to E:
/// the weight-gradient-like sums, without float atomics.
template <typename E, typename Term>
void columnSum(int64_t reduced, int64_t cols, Term term, typename E::T *out,
               cudaStream_t stream, const char *where) {
  if (cols == 0)
    return;
  int64_t chunks = columnChunks(reduced, cols);
  int64_t chunk = (reduced + chunks - 1) / chunks;
  Temp<double> partial(chunks * cols, stream, where);
  dim3 grid(unsigned((cols + kThreads - 1) / kThreads), unsigned(chunks));
  columnPartials<<<grid, kThreads, 0, stream>>>(reduced, cols, chunk, term,
                                                partial.get());
  columnFinish<E><<<gridFor(cols), kThreads, 0, stream>>>(partial.get(), chunks,
                                                          cols, out);
}

} // namespace fsdp::rt::cuda

#endif // FSDP_LIB_RUNTIME_CUDA_INTERNAL_CUH

//===- Elementwise.cu - Broadcasting binary, unary kernels, reduce_sum_to -===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Computing in f32. Unary maps and binary ops on operands of the output's
// shape go through Internal.cuh's packed map (kPack elements per thread,
// 16-byte accesses). Otherwise one thread per output element (grid-stride)
// reads a broadcast operand through the output's flat index: modulo its
// size when it is a block of the output's trailing dims (a bias, a scalar),
// else through its strides in the output's index space (zero along its
// size-1 or missing dims), in 32-bit arithmetic when the output has fewer
// than 2^31 elements. The loops over dimensions are unrolled to kMaxRank,
// so shapes and strides stay in registers: indexing the kernel's parameter
// structs with a runtime dimension made every thread copy them to local
// memory (232 bytes per element), which made add and mul 30-40x slower
// than the memory bandwidth on the H200. reduce_sum_to sums in double in a
// fixed order (Internal.cuh's columnSum), so its result is reproducible.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

using namespace fsdp::rt::cuda;

namespace {
/// The output shape of a broadcasting op.
struct Shape {
  int rank;
  int64_t dims[kMaxRank];
};

/// How an operand's element is found from the output's flat index.
struct Operand {
  /// Elements of the operand; with `strided` false it repeats with this
  /// period over the output.
  int64_t numel;
  bool strided;
  /// The operand's strides in the output's index space.
  int64_t strides[kMaxRank];

  /// The operand's element for output element `i`, in Index arithmetic.
  template <typename Index>
  __device__ Index offset(const Shape &shape, Index i) const {
    if (!strided)
      return numel == 1 ? 0 : i % Index(numel);
    Index off = 0;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d < shape.rank) {
        Index dim = Index(shape.dims[d]);
        off += (i % dim) * Index(strides[d]);
        i /= dim;
      }
    }
    return off;
  }
};


Operand operandOf(const int64_t *shape, int rank, const Shape &out,
                  const char *where) {
  Operand op = {};
  op.numel = numElements(shape, rank);
  // A trailing block (leading 1s allowed, even beyond the result's rank)
  // needs no strides.
  op.strided = !isTrailing(shape, rank, out.dims, out.rank);
  if (!op.strided)
    return op;
  if (rank > out.rank)
    fail(where, "an operand has a higher rank than the result");
  int64_t own[kMaxRank];
  stridesOf(shape, rank, own);
  for (int i = 0; i < rank; ++i)
    if (shape[i] != 1)
      op.strides[out.rank - rank + i] = own[i];
  return op;
}

Shape shapeOf(const int64_t *dims, int rank, const char *where) {
  if (rank < 0 || rank > kMaxRank)
    fail(where, "rank above 8");
  Shape shape = {};
  shape.rank = rank;
  for (int i = 0; i < rank; ++i)
    shape.dims[i] = dims[i];
  return shape;
}

struct Add {
  __device__ float operator()(float p, float q) const { return p + q; }
};
struct Sub {
  __device__ float operator()(float p, float q) const { return p - q; }
};
struct Mul {
  __device__ float operator()(float p, float q) const { return p * q; }
};
struct Div {
  __device__ float operator()(float p, float q) const { return p / q; }
};

/// A broadcasting binary op, Index wide enough for n.
template <typename E, typename Index, typename Op>
__global__ void binaryKernel(const typename E::T *x, Operand xo,
                             const typename E::T *y, Operand yo, Shape shape,
                             Index n, typename E::T *out, Op op) {
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += Index(gridDim.x) * blockDim.x)
    E::store(out, i,
             op(E::load(x, xo.offset<Index>(shape, i)),
                E::load(y, yo.offset<Index>(shape, i))));
}

template <typename Op>
void binary(const char *name, Op op, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
            const void *x, const int64_t *xShape, int xRank, const void *y,
            const int64_t *yShape, int yRank, const int64_t *outShape,
            int outRank, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_ELEMENTWISE, stream, name);
  Shape shape = shapeOf(outShape, outRank, name);
  Operand xo = operandOf(xShape, xRank, shape, name),
          yo = operandOf(yShape, yRank, shape, name);
  int64_t n = numElements(outShape, outRank);
  if (n == 0)
    return;
  bool sameShape = !xo.strided && !yo.strided && xo.numel == n && yo.numel == n;
  dispatchFloat(dtype, name, [&](auto e) {
    using E = decltype(e);
    cudaStream_t s = scope.stream();
    if (sameShape)
      launchMap<E, E>(s, x, y, n, out, op);
    else if (n <= int64_t(INT32_MAX))
      binaryKernel<E, uint32_t><<<gridFor(n), kThreads, 0, s>>>(
          asIn<E>(x), xo, asIn<E>(y), yo, shape, uint32_t(n), asOut<E>(out),
          op);
    else
      binaryKernel<E, int64_t><<<gridFor(n), kThreads, 0, s>>>(
          asIn<E>(x), xo, asIn<E>(y), yo, shape, n, asOut<E>(out), op);
  });
}

/// out = fn(x) over `n` elements.
template <typename Fn>
void unary(const char *name, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
           const void *x, int64_t n, void *out, Fn fn) {
  KernelScope scope(FSDP_RT_KERNEL_ELEMENTWISE, stream, name);
  if (n == 0)
    return;
  dispatchFloat(dtype, name, [&](auto e) {
    using E = decltype(e);
    launchMap<E, E>(scope.stream(), x, nullptr, n, out, fn);
  });
}

/// dx = fn(x, dy) over `n` element pairs.
template <typename Fn>
void unaryGrad(const char *name, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
               const void *x, const void *dy, int64_t n, void *dx, Fn fn) {
  KernelScope scope(FSDP_RT_KERNEL_ELEMENTWISE, stream, name);
  if (n == 0)
    return;
  dispatchFloat(dtype, name, [&](auto e) {
    using E = decltype(e);
    launchMap<E, E>(scope.stream(), x, dy, n, dx, fn);
  });
}

struct Neg {
  __device__ float operator()(float v) const { return -v; }
};
struct Scale {
  float factor;
  __device__ float operator()(float v) const { return v * factor; }
};

// The constants of the CPU backend's GELU, in f32.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kRsqrt2 = 0.7071067811865476f;
constexpr float kRsqrt2Pi = 0.3989422804014327f;

struct GeluTanh {
  __device__ float operator()(float v) const {
    return 0.5f * v *
           (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
};
struct GeluErf {
  __device__ float operator()(float v) const {
    return 0.5f * v * (1.0f + erff(v * kRsqrt2));
  }
};
struct GeluTanhGrad {
  __device__ float operator()(float v, float g) const {
    float t = tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v));
    float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * v * v);
    return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
};
struct GeluErfGrad {
  __device__ float operator()(float v, float g) const {
    return g * (0.5f * (1.0f + erff(v * kRsqrt2)) +
                v * kRsqrt2Pi * expf(-0.5f * v * v));
  }
};

template <typename E>
__global__ void fillKernel(int64_t n, float value, typename E::T *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    E::store(out, i, value);
}

template <typename I>
__global__ void fillIndexKernel(int64_t n, I value, I *out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}
} // namespace

void fsdp_rt_add(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary("fsdp_rt_add", Add{}, stream, dtype, x, x_shape, x_rank, y, y_shape,
         y_rank, out_shape, out_rank, out);
}

void fsdp_rt_sub(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary("fsdp_rt_sub", Sub{}, stream, dtype, x, x_shape, x_rank, y, y_shape,
         y_rank, out_shape, out_rank, out);
}

void fsdp_rt_mul(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary("fsdp_rt_mul", Mul{}, stream, dtype, x, x_shape, x_rank, y, y_shape,
         y_rank, out_shape, out_rank, out);
}

void fsdp_rt_div(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary("fsdp_rt_div", Div{}, stream, dtype, x, x_shape, x_rank, y, y_shape,
         y_rank, out_shape, out_rank, out);
}

void fsdp_rt_fill(fsdp_rt_stream stream, fsdp_rt_dtype dtype, int64_t numel,
                  double value, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_ELEMENTWISE, stream, "fsdp_rt_fill");
  if (numel == 0)
    return;
  cudaStream_t s = scope.stream();
  // Integer tensors get the value converted to their type (the CPU
  // backend only fills float tensors).
  if (dtype == FSDP_RT_I32) {
    fillIndexKernel<<<gridFor(numel), kThreads, 0, s>>>(
        numel, int32_t(value), static_cast<int32_t *>(out));
    return;
  }
  if (dtype == FSDP_RT_I64) {
    fillIndexKernel<<<gridFor(numel), kThreads, 0, s>>>(
        numel, int64_t(value), static_cast<int64_t *>(out));
    return;
  }
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    fillKernel<E><<<gridFor(numel), kThreads, 0, s>>>(numel, float(value),
                                                      asOut<E>(out));
  });
}

// The activations of Activations.def: the bodies become the call operators
// of device functors, forward and gradient.
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  namespace {                                                                  \
  struct name##Forward {                                                       \
    __device__ float operator()(float v) const forward                         \
  };                                                                           \
  struct name##Gradient {                                                      \
    __device__ float operator()(float v, float g) const gradient               \
  };                                                                           \
  }                                                                            \
  void fsdp_rt_##name(fsdp_rt_stream stream, fsdp_rt_dtype dtype,              \
                      const void *x, int64_t numel, void *out) {               \
    unary("fsdp_rt_" #name, stream, dtype, x, numel, out, name##Forward{});    \
  }                                                                            \
  void fsdp_rt_##name##_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,       \
                             const void *x, const void *dy, int64_t numel,     \
                             void *dx) {                                       \
    unaryGrad("fsdp_rt_" #name "_grad", stream, dtype, x, dy, numel, dx,       \
              name##Gradient{});                                               \
  }
#include "fsdp/Runtime/Activations.def"

void fsdp_rt_neg(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                 int64_t numel, void *out) {
  unary("fsdp_rt_neg", stream, dtype, x, numel, out, Neg{});
}

void fsdp_rt_scale(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                   int64_t numel, double factor, void *out) {
  unary("fsdp_rt_scale", stream, dtype, x, numel, out, Scale{float(factor)});
}

void fsdp_rt_gelu(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, int approximate_tanh, void *out) {
  if (approximate_tanh)
    unary("fsdp_rt_gelu", stream, dtype, x, numel, out, GeluTanh{});
  else
    unary("fsdp_rt_gelu", stream, dtype, x, numel, out, GeluErf{});
}

void fsdp_rt_gelu_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                       const void *x, const void *dy, int64_t numel,
                       int approximate_tanh, void *dx) {
  if (approximate_tanh)
    unaryGrad("fsdp_rt_gelu_grad", stream, dtype, x, dy, numel, dx,
              GeluTanhGrad{});
  else
    unaryGrad("fsdp_rt_gelu_grad", stream, dtype, x, dy, numel, dx,
              GeluErfGrad{});
}

//===----------------------------------------------------------------------===//
// reduce_sum_to
//===----------------------------------------------------------------------===//

namespace {
/// x seen as [reduced, cols] rows: out is a block of x's trailing dims.
template <typename E> struct TrailingTerm {
  const typename E::T *x;
  int64_t cols;
  __device__ double operator()(int64_t q, int64_t o) const {
    return double(E::load(x, q * cols + o));
  }
};

/// Any NumPy broadcast: output element o sits at offset(o) in x along the
/// kept dims, reduction index q at offset(q) along the summed dims.
template <typename E> struct StridedTerm {
  const typename E::T *x;
  /// Out's shape, and x's strides along the dims they align with.
  Shape outShape;
  int64_t outStrides[kMaxRank];
  /// The summed dims' sizes (1 for kept dims) and x's strides.
  Shape reducedShape;
  int64_t reducedStrides[kMaxRank];

  __device__ static int64_t offset(const Shape &shape, const int64_t *strides,
                                   int64_t i) {
    int64_t off = 0;
    for (int d = shape.rank - 1; d >= 0; --d) {
      off += (i % shape.dims[d]) * strides[d];
      i /= shape.dims[d];
    }
    return off;
  }
  __device__ double operator()(int64_t q, int64_t o) const {
    return double(E::load(x, offset(outShape, outStrides, o) +
                                 offset(reducedShape, reducedStrides, q)));
  }
};
} // namespace

void fsdp_rt_reduce_sum_to(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *x, const int64_t *in_shape, int in_rank,
                           const int64_t *out_shape, int out_rank, void *out) {
  const char *name = "fsdp_rt_reduce_sum_to";
  KernelScope scope(FSDP_RT_KERNEL_ELEMENTWISE, stream, name);
  Shape inShape = shapeOf(in_shape, in_rank, name),
        outShape = shapeOf(out_shape, out_rank, name);
  int64_t n = numElements(in_shape, in_rank),
          outN = numElements(out_shape, out_rank);
  if (outN == 0)
    return;
  int64_t reduced = n / outN;
  dispatchFloat(dtype, name, [&](auto e) {
    using E = decltype(e);
    if (isTrailing(out_shape, out_rank, in_shape, in_rank)) {
      columnSum<E>(reduced, outN, TrailingTerm<E>{asIn<E>(x), outN},
                   asOut<E>(out), scope.stream(), name);
      return;
    }
    if (out_rank > in_rank)
      fail(name, "the result has a higher rank than the operand");
    StridedTerm<E> term = {};
    term.x = asIn<E>(x);
    term.outShape = outShape;
    int64_t inStrides[kMaxRank];
    stridesOf(in_shape, in_rank, inStrides);
    int lead = in_rank - out_rank;
    for (int i = 0; i < out_rank; ++i)
      term.outStrides[i] = out_shape[i] == 1 ? 0 : inStrides[lead + i];
    term.reducedShape.rank = in_rank;
    for (int d = 0; d < in_rank; ++d) {
      bool kept = d >= lead && out_shape[d - lead] != 1;
      term.reducedShape.dims[d] = kept ? 1 : inShape.dims[d];
      term.reducedStrides[d] = kept ? 0 : inStrides[d];
    }
    columnSum<E>(reduced, outN, term, asOut<E>(out), scope.stream(), name);
  });
}

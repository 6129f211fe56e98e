//===- Elementwise.cpp - Broadcasting binary and unary kernels ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cmath>

using namespace fsdp::rt;

/// Strides of an operand in the output's index space: aligned at the last
/// dim, zero where the operand has size 1 or lacks the dim.
static std::vector<int64_t> broadcastStrides(const int64_t *shape, int rank,
                                             int outRank) {
  std::vector<int64_t> own = stridesOf(shape, rank);
  std::vector<int64_t> strides(outRank, 0);
  for (int i = 0; i < rank; ++i)
    if (shape[i] != 1)
      strides[outRank - rank + i] = own[i];
  return strides;
}

namespace {
enum class BinaryKind { Add, Sub, Mul, Div };

/// An operand of a broadcasting op read in f32 blocks of the output's flat
/// index space. The common shapes are read in place: one of the output's
/// size, a scalar, or a block of the output's trailing dims repeated over
/// the leading ones (a bias, a norm weight). Any other broadcast is
/// expanded once into an f32 copy of the output's size.
class Operand {
public:
  Operand(fsdp_rt_dtype dtype, const void *data, const int64_t *shape, int rank,
          const int64_t *outShape, int outRank)
      : dtype(dtype), data(data), numel(numElements(shape, rank)) {
    if (isTrailing(shape, rank, outShape, outRank))
      return;
    expanded = expand(shape, rank, outShape, outRank);
    this->dtype = FSDP_RT_F32;
    this->data = expanded.data();
    numel = int64_t(expanded.size());
  }

  /// Elements [begin, begin + len) (len <= kBlock) as f32: in place when
  /// they are contiguous f32, else converted into `scratch`.
  const float *block(int64_t begin, int64_t len, float *scratch) const {
    int64_t pos = begin % numel;
    if (dtype == FSDP_RT_F32 && pos + len <= numel)
      return static_cast<const float *>(data) + pos;
    if (numel == 1) {
      float v;
      toFloat(dtype, data, 1, &v);
      std::fill(scratch, scratch + len, v);
      return scratch;
    }
    for (int64_t done = 0; done < len; pos = 0) {
      int64_t take = std::min(len - done, numel - pos);
      toFloat(dtype,
              static_cast<const char *>(data) + pos * fsdp_rt_dtype_size(dtype),
              take, scratch + done);
      done += take;
    }
    return scratch;
  }

private:
  /// The operand broadcast to the output's shape, walking the output like
  /// an odometer.
  std::vector<float> expand(const int64_t *shape, int rank,
                            const int64_t *outShape, int outRank) const {
    FloatInput fx(dtype, data, numel);
    std::vector<int64_t> strides = broadcastStrides(shape, rank, outRank);
    int64_t n = numElements(outShape, outRank);
    std::vector<float> out(n);
    std::vector<int64_t> index(outRank, 0);
    int64_t xi = 0;
    for (int64_t i = 0; i < n; ++i) {
      out[i] = fx.get()[xi];
      advance(index, outShape, strides, xi);
    }
    return out;
  }

  fsdp_rt_dtype dtype;
  const void *data;
  int64_t numel;
  std::vector<float> expanded;
};

/// Applies fn(i) -> float to out[0, len) in f32, once per x86-64 level.
template <typename Fn>
FSDP_VECTORIZE void applyBlock(float *out, int64_t len, Fn fn) {
  for (int64_t i = 0; i < len; ++i)
    out[i] = fn(i);
}

/// Computes the `n` elements of `out` block by block, threaded:
/// fn(in, result, len) fills result[0, len) from in[i], input i's f32
/// block of the same output elements.
template <size_t N, typename Fn>
void mapBlocks(fsdp_rt_dtype dtype, const Operand *const (&inputs)[N],
               int64_t n, void *out, Fn fn) {
  parallelFor(n, 32 * kBlock, [&](int64_t begin, int64_t end) {
    float scratch[N][kBlock], result[kBlock];
    for (int64_t b = begin; b < end; b += kBlock) {
      int64_t len = std::min(kBlock, end - b);
      const float *in[N];
      for (size_t i = 0; i < N; ++i)
        in[i] = inputs[i]->block(b, len, scratch[i]);
      float *o = dtype == FSDP_RT_F32 ? static_cast<float *>(out) + b : result;
      fn(in, o, len);
      if (dtype != FSDP_RT_F32)
        fromFloat(dtype, result, len, static_cast<uint16_t *>(out) + b);
    }
  });
}

/// out = f(x) elementwise over `n` contiguous elements.
template <typename Fn>
void mapUnary(fsdp_rt_dtype dtype, const void *x, int64_t n, void *out, Fn fn) {
  int64_t shape[1] = {n};
  Operand a(dtype, x, shape, 1, shape, 1);
  const Operand *const inputs[1] = {&a};
  mapBlocks(dtype, inputs, n, out,
            [&](const float *const *in, float *o, int64_t len) {
              const float *v = in[0];
              applyBlock(o, len, [&](int64_t i) { return fn(v[i]); });
            });
}

/// out = f(x, dy) elementwise over `n` contiguous element pairs.
template <typename Fn>
void mapBinary(fsdp_rt_dtype dtype, const void *x, const void *dy, int64_t n,
               void *out, Fn fn) {
  int64_t shape[1] = {n};
  Operand a(dtype, x, shape, 1, shape, 1), b(dtype, dy, shape, 1, shape, 1);
  const Operand *const inputs[2] = {&a, &b};
  mapBlocks(dtype, inputs, n, out,
            [&](const float *const *in, float *o, int64_t len) {
              const float *v = in[0], *g = in[1];
              applyBlock(o, len, [&](int64_t i) { return fn(v[i], g[i]); });
            });
}
} // namespace

static void binary(BinaryKind kind, fsdp_rt_dtype dtype, const void *x,
                   const int64_t *xShape, int xRank, const void *y,
                   const int64_t *yShape, int yRank, const int64_t *outShape,
                   int outRank, void *out,
                   const char *name = __builtin_FUNCTION()) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE, name);
  Operand a(dtype, x, xShape, xRank, outShape, outRank),
      b(dtype, y, yShape, yRank, outShape, outRank);
  const Operand *const inputs[2] = {&a, &b};
  mapBlocks(
      dtype, inputs, numElements(outShape, outRank), out,
      [kind](const float *const *in, float *o, int64_t len) {
        const float *p = in[0], *q = in[1];
        switch (kind) {
        case BinaryKind::Add:
          return applyBlock(o, len, [&](int64_t i) { return p[i] + q[i]; });
        case BinaryKind::Sub:
          return applyBlock(o, len, [&](int64_t i) { return p[i] - q[i]; });
        case BinaryKind::Mul:
          return applyBlock(o, len, [&](int64_t i) { return p[i] * q[i]; });
        case BinaryKind::Div:
          return applyBlock(o, len, [&](int64_t i) { return p[i] / q[i]; });
        }
      });
}

void fsdp_rt_add(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary(BinaryKind::Add, dtype, x, x_shape, x_rank, y, y_shape, y_rank,
         out_shape, out_rank, out);
}

void fsdp_rt_sub(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary(BinaryKind::Sub, dtype, x, x_shape, x_rank, y, y_shape, y_rank,
         out_shape, out_rank, out);
}

void fsdp_rt_mul(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary(BinaryKind::Mul, dtype, x, x_shape, x_rank, y, y_shape, y_rank,
         out_shape, out_rank, out);
}

void fsdp_rt_div(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 const int64_t *x_shape, int x_rank, const void *y,
                 const int64_t *y_shape, int y_rank, const int64_t *out_shape,
                 int out_rank, void *out) {
  binary(BinaryKind::Div, dtype, x, x_shape, x_rank, y, y_shape, y_rank,
         out_shape, out_rank, out);
}

void fsdp_rt_fill(fsdp_rt_stream, fsdp_rt_dtype dtype, int64_t numel,
                  double value, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE);
  float v[kBlock];
  std::fill(v, v + kBlock, static_cast<float>(value));
  for (int64_t b = 0; b < numel; b += kBlock)
    fromFloat(dtype, v, std::min(kBlock, numel - b),
              static_cast<char *>(out) + b * fsdp_rt_dtype_size(dtype));
}

/// Applies `fn` to each of `n` elements in f32; the profile counts the time
/// under the calling ABI function's name, as binary and unaryGrad do.
template <typename Fn>
static void unary(fsdp_rt_dtype dtype, const void *x, int64_t n, void *out,
                  Fn fn, const char *name = __builtin_FUNCTION()) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE, name);
  mapUnary(dtype, x, n, out, fn);
}

/// Applies `fn(x, dy)` to each of `n` element pairs in f32.
template <typename Fn>
static void unaryGrad(fsdp_rt_dtype dtype, const void *x, const void *dy,
                      int64_t n, void *dx, Fn fn,
                      const char *name = __builtin_FUNCTION()) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE, name);
  mapBinary(dtype, x, dy, n, dx, fn);
}

// The activations of Activations.def, forward and gradient.
#define FSDP_ACTIVATION(name, forward, gradient)                               \
  void fsdp_rt_##name(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,      \
                      int64_t numel, void *out) {                              \
    unary(dtype, x, numel, out, [](float v) -> float forward);                 \
  }                                                                            \
  void fsdp_rt_##name##_grad(fsdp_rt_stream, fsdp_rt_dtype dtype,              \
                             const void *x, const void *dy, int64_t numel,     \
                             void *dx) {                                       \
    unaryGrad(dtype, x, dy, numel, dx,                                         \
              [](float v, float g) -> float gradient);                         \
  }
#include "fsdp/Runtime/Activations.def"

void fsdp_rt_neg(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                 int64_t numel, void *out) {
  unary(dtype, x, numel, out, [](float v) { return -v; });
}

void fsdp_rt_scale(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                   int64_t numel, double factor, void *out) {
  float f = float(factor);
  unary(dtype, x, numel, out, [f](float v) { return v * f; });
}

void fsdp_rt_gelu(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                  int64_t numel, int approximate_tanh, void *out) {
  if (approximate_tanh) {
    const float c = 0.7978845608028654f; // sqrt(2 / pi)
    unary(dtype, x, numel, out, [c](float v) {
      return 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
    });
    return;
  }
  const float rsqrt2 = 0.7071067811865476f;
  unary(dtype, x, numel, out,
        [rsqrt2](float v) { return 0.5f * v * (1.0f + std::erf(v * rsqrt2)); });
}

void fsdp_rt_gelu_grad(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                       const void *dy, int64_t numel, int approximate_tanh,
                       void *dx) {
  if (approximate_tanh) {
    const float c = 0.7978845608028654f; // sqrt(2 / pi)
    unaryGrad(dtype, x, dy, numel, dx, [c](float v, float g) {
      float t = std::tanh(c * (v + 0.044715f * v * v * v));
      float du = c * (1.0f + 3.0f * 0.044715f * v * v);
      return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    });
    return;
  }
  const float rsqrt2 = 0.7071067811865476f, rsqrt2pi = 0.3989422804014327f;
  unaryGrad(dtype, x, dy, numel, dx, [=](float v, float g) {
    return g * (0.5f * (1.0f + std::erf(v * rsqrt2)) +
                v * rsqrt2pi * std::exp(-0.5f * v * v));
  });
}

void fsdp_rt_reduce_sum_to(fsdp_rt_stream, fsdp_rt_dtype dtype, const void *x,
                           const int64_t *in_shape, int in_rank,
                           const int64_t *out_shape, int out_rank, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE);
  int64_t n = numElements(in_shape, in_rank),
          outN = numElements(out_shape, out_rank);
  FloatInput fx(dtype, x, n);
  std::vector<double> sums(outN, 0.0);
  const float *px = fx.get();
  if (isTrailing(out_shape, out_rank, in_shape, in_rank)) {
    // Rows of outN elements summed column-wise, row after row.
    for (int64_t r = 0; r < n / std::max<int64_t>(outN, 1); ++r)
      for (int64_t j = 0; j < outN; ++j)
        sums[j] += px[r * outN + j];
  } else {
    // The broadcast walk run backwards: out's strides in x's index space
    // are zero along the summed dims.
    std::vector<int64_t> os = broadcastStrides(out_shape, out_rank, in_rank);
    std::vector<int64_t> index(in_rank, 0);
    int64_t oi = 0;
    for (int64_t i = 0; i < n; ++i) {
      sums[oi] += px[i];
      advance(index, in_shape, os, oi);
    }
  }
  FloatOutput fo(dtype, out, outN);
  for (int64_t i = 0; i < outN; ++i)
    fo.get()[i] = float(sums[i]);
  fo.finish();
}

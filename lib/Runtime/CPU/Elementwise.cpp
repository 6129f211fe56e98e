//===- Elementwise.cpp - Broadcasting binary and unary kernels ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cmath>

using namespace fsdp::rt;

namespace {
enum class BinaryKind { Add, Sub, Mul, Div };
} // namespace

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

static void binary(BinaryKind kind, fsdp_rt_dtype dtype, const void *x,
                   const int64_t *xShape, int xRank, const void *y,
                   const int64_t *yShape, int yRank, const int64_t *outShape,
                   int outRank, void *out) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE);
  FloatInput fx(dtype, x, numElements(xShape, xRank)),
      fy(dtype, y, numElements(yShape, yRank));
  int64_t n = numElements(outShape, outRank);
  FloatOutput fo(dtype, out, n);
  std::vector<int64_t> xs = broadcastStrides(xShape, xRank, outRank);
  std::vector<int64_t> ys = broadcastStrides(yShape, yRank, outRank);
  std::vector<int64_t> index(outRank, 0);
  const float *px = fx.get(), *py = fy.get();
  float *po = fo.get();
  int64_t xi = 0, yi = 0;
  for (int64_t i = 0; i < n; ++i) {
    float a = px[xi], b = py[yi];
    po[i] = kind == BinaryKind::Add   ? a + b
            : kind == BinaryKind::Sub ? a - b
            : kind == BinaryKind::Mul ? a * b
                                      : a / b;
    // Advance the multi-index like an odometer, keeping both offsets.
    for (int d = outRank - 1; d >= 0; --d) {
      xi += xs[d];
      yi += ys[d];
      if (++index[d] < outShape[d])
        break;
      xi -= xs[d] * outShape[d];
      yi -= ys[d] * outShape[d];
      index[d] = 0;
    }
  }
  fo.finish();
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
  std::vector<float> v(static_cast<size_t>(numel), static_cast<float>(value));
  fsdp::rt::fromFloat(dtype, v.data(), numel, out);
}

/// Applies `fn` to each of `n` elements in f32.
template <typename Fn>
static void unary(fsdp_rt_dtype dtype, const void *x, int64_t n, void *out,
                  Fn fn) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE);
  FloatInput fx(dtype, x, n);
  FloatOutput fo(dtype, out, n);
  const float *px = fx.get();
  float *po = fo.get();
  for (int64_t i = 0; i < n; ++i)
    po[i] = fn(px[i]);
  fo.finish();
}

/// Applies `fn(x, dy)` to each of `n` element pairs in f32.
template <typename Fn>
static void unaryGrad(fsdp_rt_dtype dtype, const void *x, const void *dy,
                      int64_t n, void *dx, Fn fn) {
  KernelTimer timer(FSDP_RT_KERNEL_ELEMENTWISE);
  FloatInput fx(dtype, x, n), fdy(dtype, dy, n);
  FloatOutput fo(dtype, dx, n);
  const float *px = fx.get(), *pdy = fdy.get();
  float *po = fo.get();
  for (int64_t i = 0; i < n; ++i)
    po[i] = fn(px[i], pdy[i]);
  fo.finish();
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
  // The broadcast walk of `binary` run backwards: out's strides in x's index
  // space are zero along the summed dims.
  std::vector<int64_t> os = broadcastStrides(out_shape, out_rank, in_rank);
  std::vector<int64_t> index(in_rank, 0);
  std::vector<double> sums(outN, 0.0);
  const float *px = fx.get();
  int64_t oi = 0;
  for (int64_t i = 0; i < n; ++i) {
    sums[oi] += px[i];
    for (int d = in_rank - 1; d >= 0; --d) {
      oi += os[d];
      if (++index[d] < in_shape[d])
        break;
      oi -= os[d] * in_shape[d];
      index[d] = 0;
    }
  }
  FloatOutput fo(dtype, out, outN);
  for (int64_t i = 0; i < outN; ++i)
    fo.get()[i] = float(sums[i]);
  fo.finish();
}

//===- Rotary.cu - Rotary position embedding (rotate-half) and its grad ---===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One thread per (token, pair i): it computes the pair's angle, cosine and
// sine once, in double as the CPU backend does (positions reach tens of
// thousands and an f32 angle would lose the digits the sine depends on),
// and turns the pair (x[i], x[i + d/2]) of every head of the token. The
// frequencies are computed on the host exactly as on the CPU (or taken
// from `inv_freq`, a host table of the program) and travel to the kernel
// as an argument, so no copy or synchronization is needed.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

#include <cmath>

using namespace fsdp::rt::cuda;

namespace {
/// Pairs the kernel argument holds: head dims up to 512, 2 KiB of
/// frequencies, within the 4 KiB every launch accepts.
constexpr int64_t kMaxPairs = 256;

struct Frequencies {
  double inv[kMaxPairs];
};

/// For token t = (batch, position) and pair i: c = scaling·cos(pos·f_i),
/// s = sign·scaling·sin(pos·f_i) (f32), then per head
/// out[i] = x[i]·c - x[i+half]·s, out[i+half] = x[i+half]·c + x[i]·s.
template <typename E>
__global__ void rotaryKernel(const typename E::T *x,
                             fsdp_rt_dtype positionsDtype,
                             const void *positions, int64_t tokens,
                             int64_t heads, int64_t d, Frequencies freq,
                             double scaling, double sign, typename E::T *out) {
  int64_t half = d / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       e < tokens * half; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t t = e / half, i = e % half;
    double angle =
        double(loadIndex(positionsDtype, positions, t)) * freq.inv[i];
    float c = float(scaling * cos(angle)),
          s = float(sign * scaling * sin(angle));
    for (int64_t h = 0; h < heads; ++h) {
      int64_t base = (t * heads + h) * d;
      float x1 = E::load(x, base + i), x2 = E::load(x, base + i + half);
      E::store(out, base + i, x1 * c - x2 * s);
      E::store(out, base + i + half, x2 * c + x1 * s);
    }
  }
}

void rotate(const char *name, fsdp_rt_stream stream, fsdp_rt_dtype dtype,
            const void *x, fsdp_rt_dtype positionsDtype, const void *positions,
            int64_t b, int64_t s, int64_t heads, int64_t d, double theta,
            const double *invFreq, double scaling, double sign, void *out) {
  KernelScope scope(FSDP_RT_KERNEL_ROTARY, stream, name);
  int64_t half = d / 2;
  if (half > kMaxPairs)
    fail(name, "head dims above 512 are not supported by the CUDA backend");
  Frequencies freq = {};
  for (int64_t i = 0; i < half; ++i)
    freq.inv[i] =
        invFreq ? invFreq[i] : std::pow(theta, -2.0 * double(i) / double(d));
  int64_t tokens = b * s;
  if (tokens * half == 0 || heads == 0)
    return;
  dispatchFloat(dtype, name, [&](auto e) {
    using E = decltype(e);
    rotaryKernel<E><<<gridFor(tokens * half), kThreads, 0, scope.stream()>>>(
        asIn<E>(x), positionsDtype, positions, tokens, heads, d, freq, scaling,
        sign, asOut<E>(out));
  });
}
} // namespace

void fsdp_rt_rotary(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                    fsdp_rt_dtype positions_dtype, const void *positions,
                    int64_t b, int64_t s, int64_t heads, int64_t d,
                    double theta, const double *inv_freq, double scaling,
                    void *out) {
  rotate("fsdp_rt_rotary", stream, dtype, x, positions_dtype, positions, b, s,
         heads, d, theta, inv_freq, scaling, 1.0, out);
}

void fsdp_rt_rotary_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                         const void *dy, fsdp_rt_dtype positions_dtype,
                         const void *positions, int64_t b, int64_t s,
                         int64_t heads, int64_t d, double theta,
                         const double *inv_freq, double scaling, void *dx) {
  rotate("fsdp_rt_rotary_grad", stream, dtype, dy, positions_dtype, positions,
         b, s, heads, d, theta, inv_freq, scaling, -1.0, dx);
}

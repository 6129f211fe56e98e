//===- Norm.cu - rms_norm and layer_norm, and their grads -----------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// rms_norm: a warp per row (NormRows.cuh). layer_norm: one thread block
// per row of x [rows, h]. The row statistics are sums in double, as the CPU
// backend sums them. The weight and bias
// gradients are sums over the rows: the row kernel leaves each row's
// statistics (double) in a temporary and Internal.cuh's columnSum adds the
// rows in a fixed order, so the gradients are reproducible bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "NormRows.cuh"

using namespace fsdp::rt::cuda;

namespace {
/// Blocks of the row kernels, which loop over the rows by this stride.
unsigned rowGrid(int64_t rows) {
  return unsigned(rows < (1 << 20) ? rows : (1 << 20));
}

/// The mean of row `xr` and 1 / sqrt(biased variance + eps), in double,
/// the variance from centred squares (two passes, no cancellation).
template <typename E>
__device__ void meanAndInv(const typename E::T *xr, int64_t h, double eps,
                           double &mean, double &inv) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
    sum += E::load(xr, i);
  mean = blockReduce(sum, SumOp{}) / double(h);
  double sumSq = 0;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    double c = double(E::load(xr, i)) - mean;
    sumSq += c * c;
  }
  inv = 1.0 / sqrt(blockReduce(sumSq, SumOp{}) / double(h) + eps);
}

/// out[r, i] = (x[r, i] - mean_r) · inv_r · w[i] + bias[i].
template <typename E>
__global__ void layerNormKernel(const typename E::T *x, const typename E::T *w,
                                const typename E::T *bias, int64_t rows,
                                int64_t h, double eps, typename E::T *out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::T *xr = x + r * h;
    double mean, inv;
    meanAndInv<E>(xr, h, eps, mean, inv);
    float fInv = float(inv), m = float(mean);
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
      E::store(out + r * h, i,
               (E::load(xr, i) - m) * fInv * E::load(w, i) +
                   (bias ? E::load(bias, i) : 0.0f));
  }
}

/// dweight[i] of rms_norm: Σ_r dy[r, i] · x[r, i] · inv_r.
template <typename E> struct RmsWeightTerm {
  const typename E::T *x, *dy;
  const double *rowInv;
  int64_t h;
  __device__ double operator()(int64_t r, int64_t i) const {
    return double(E::load(dy, r * h + i)) * double(E::load(x, r * h + i)) *
           rowInv[r];
  }
};

/// dx of layer_norm per row, and the row's mean and inv (double):
/// dx = inv·(g - mean(g) - x̂·mean(g·x̂)) with g = dy·w.
template <typename E>
__global__ void layerNormGradKernel(const typename E::T *x,
                                    const typename E::T *w,
                                    const typename E::T *dy, int64_t rows,
                                    int64_t h, double eps, typename E::T *dx,
                                    double *rowMean, double *rowInv) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::T *xr = x + r * h, *dyr = dy + r * h;
    double mean, inv;
    meanAndInv<E>(xr, h, eps, mean, inv);
    double sumG = 0, sumGX = 0;
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      float xhat = float((double(E::load(xr, i)) - mean) * inv);
      double g = double(E::load(dyr, i)) * double(E::load(w, i));
      sumG += g;
      sumGX += g * double(xhat);
    }
    sumG = blockReduce(sumG, SumOp{});
    sumGX = blockReduce(sumGX, SumOp{});
    float fInv = float(inv), meanG = float(sumG / double(h)),
          meanGX = float(sumGX / double(h));
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      float xhat = float((double(E::load(xr, i)) - mean) * inv);
      E::store(dx + r * h, i,
               fInv *
                   (E::load(dyr, i) * E::load(w, i) - meanG - xhat * meanGX));
    }
    if (threadIdx.x == 0) {
      rowMean[r] = mean;
      rowInv[r] = inv;
    }
  }
}

/// dweight[i] of layer_norm: Σ_r dy[r, i] · x̂[r, i], x̂ rounded to f32 as
/// the CPU backend keeps it.
template <typename E> struct LayerWeightTerm {
  const typename E::T *x, *dy;
  const double *rowMean, *rowInv;
  int64_t h;
  __device__ double operator()(int64_t r, int64_t i) const {
    float xhat =
        float((double(E::load(x, r * h + i)) - rowMean[r]) * rowInv[r]);
    return double(E::load(dy, r * h + i)) * double(xhat);
  }
};

/// dbias[i]: Σ_r dy[r, i].
template <typename E> struct BiasTerm {
  const typename E::T *dy;
  int64_t h;
  __device__ double operator()(int64_t r, int64_t i) const {
    return double(E::load(dy, r * h + i));
  }
};
} // namespace

void fsdp_rt_rms_norm(fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *x,
                      const void *weight, int64_t rows, int64_t h, double eps,
                      void *out) {
  launchFloat(
      FSDP_RT_KERNEL_NORM, stream, "fsdp_rt_rms_norm", dtype,
      rows == 0 || h == 0, [&](auto e, const KernelScope &scope) {
        using E = decltype(e);
        norm::rmsNormRows<Portable<E>>
            <<<norm::normGrid(rows), norm::kNormThreads, 0, scope.stream()>>>(
                asPortable<E>(x), asPortable<E>(weight), rows, h, eps,
                asPortable<E>(out));
      });
}

void fsdp_rt_layer_norm(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                        const void *x, const void *weight, const void *bias,
                        int64_t rows, int64_t h, double eps, void *out) {
  launchFloat(FSDP_RT_KERNEL_NORM, stream, "fsdp_rt_layer_norm", dtype,
              rows == 0 || h == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                layerNormKernel<E>
                    <<<rowGrid(rows), kThreads, 0, scope.stream()>>>(
                        asIn<E>(x), asIn<E>(weight), asIn<E>(bias), rows, h,
                        eps, asOut<E>(out));
              });
}

void fsdp_rt_rms_norm_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *x, const void *weight, const void *dy,
                           int64_t rows, int64_t h, double eps, void *dx,
                           void *dweight) {
  launchFloat(
      FSDP_RT_KERNEL_NORM, stream, "fsdp_rt_rms_norm_grad", dtype, h == 0,
      [&](auto e, const KernelScope &scope) {
        using E = decltype(e);
        Temp<double> rowInv(rows, scope.stream(), scope.name());
        if (rows > 0)
          norm::rmsNormGradRows<Portable<E>>
              <<<norm::normGrid(rows), norm::kNormThreads, 0, scope.stream()>>>(
                  asPortable<E>(x), asPortable<E>(weight), asPortable<E>(dy),
                  rows, h, eps, asPortable<E>(dx), rowInv.get());
        columnSum<E>(rows, h,
                     RmsWeightTerm<E>{asIn<E>(x), asIn<E>(dy), rowInv.get(), h},
                     asOut<E>(dweight), scope.stream(), scope.name());
      });
}

void fsdp_rt_layer_norm_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                             const void *x, const void *weight, const void *dy,
                             int64_t rows, int64_t h, double eps, void *dx,
                             void *dweight, void *dbias) {
  launchFloat(FSDP_RT_KERNEL_NORM, stream, "fsdp_rt_layer_norm_grad", dtype,
              h == 0, [&](auto e, const KernelScope &scope) {
                using E = decltype(e);
                Temp<double> rowMean(rows, scope.stream(), scope.name()),
                    rowInv(rows, scope.stream(), scope.name());
                if (rows > 0)
                  layerNormGradKernel<E>
                      <<<rowGrid(rows), kThreads, 0, scope.stream()>>>(
                          asIn<E>(x), asIn<E>(weight), asIn<E>(dy), rows, h,
                          eps, asOut<E>(dx), rowMean.get(), rowInv.get());
                columnSum<E>(rows, h,
                             LayerWeightTerm<E>{asIn<E>(x), asIn<E>(dy),
                                                rowMean.get(), rowInv.get(), h},
                             asOut<E>(dweight), scope.stream(), scope.name());
                if (dbias)
                  columnSum<E>(rows, h, BiasTerm<E>{asIn<E>(dy), h},
                               asOut<E>(dbias), scope.stream(), scope.name());
              });
}

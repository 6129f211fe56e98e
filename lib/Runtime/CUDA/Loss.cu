//===- Loss.cu - cross_entropy, its partial/combine forms and grads -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A thread block per row of logits [rows, vocab]: the row maximum and
// Σ exp(x - max) (f32, as the CPU backend sums them) are block reductions.
// Row losses are double; the SUM/MEAN total and the count of rows whose
// label is not ignore_index are reduced by one block in a fixed order, so
// the loss is reproducible. Every result stays on the device: `out`,
// `count`, `dloss`, `sum_exp`, `target`, ... are device pointers like all
// data pointers of this backend, and a MEAN's token count is computed on
// the device rather than read back.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"

#include <cmath>

using namespace fsdp::rt::cuda;

namespace {
unsigned rowGrid(int64_t rows) {
  return unsigned(rows < (1 << 20) ? rows : (1 << 20));
}

/// Threads of the one-block reductions over the rows.
constexpr int kReduceThreads = 1024;

/// The number of labels different from `ignore`, into count[0] and/or
/// asFloat[0] (one block).
__global__ void countLabelsKernel(fsdp_rt_dtype labelsDtype, const void *labels,
                                  int64_t n, int64_t ignore, int64_t *count,
                                  float *asFloat) {
  long long c = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    c += loadIndex(labelsDtype, labels, i) != ignore;
  c = blockReduce(c, SumOp{});
  if (threadIdx.x != 0)
    return;
  if (count)
    count[0] = c;
  if (asFloat)
    asFloat[0] = float(c);
}

/// The row maximum and Σ exp(x - max) of row xr (every thread gets both).
template <typename E>
__device__ void rowStats(const typename E::T *xr, int64_t n, float &m,
                         float &sum) {
  m = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    m = fmaxf(m, E::load(xr, i));
  m = blockReduce(m, MaxOp{});
  float s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += fastExp(E::load(xr, i) - m);
  sum = blockReduce(s, SumOp{});
}

/// losses[r] = max + log Σ exp(x - max) - x[label] (double; 0 and not
/// counted for an ignored row); with `none`, also out[r] in f32.
template <typename E>
__global__ void
crossEntropyRowsKernel(const typename E::T *logits, fsdp_rt_dtype labelsDtype,
                       const void *labels, int64_t rows, int64_t vocab,
                       int64_t ignore, double *losses, float *none) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = loadIndex(labelsDtype, labels, r);
    double loss = 0;
    if (label != ignore) {
      const typename E::T *xr = logits + r * vocab;
      float m, sum;
      rowStats<E>(xr, vocab, m, sum);
      loss = double(m) + log(double(sum)) - double(E::load(xr, label));
    }
    if (threadIdx.x == 0) {
      losses[r] = loss;
      if (none)
        none[r] = float(loss);
    }
  }
}

/// The SUM or MEAN of `losses` into out[0] (f32; a mean over no counted row
/// is 0/0 = NaN, as in PyTorch), and the count into `count` when given
/// (one block).
__global__ void totalKernel(const double *losses, fsdp_rt_dtype labelsDtype,
                            const void *labels, int64_t rows, int64_t ignore,
                            fsdp_rt_reduction reduction, float *out,
                            int64_t *count) {
  double total = 0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    total += losses[r];
    counted += loadIndex(labelsDtype, labels, r) != ignore;
  }
  total = blockReduce(total, SumOp{});
  counted = blockReduce(counted, SumOp{});
  if (threadIdx.x != 0)
    return;
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    out[0] = float(total / double(counted));
  else if (reduction == FSDP_RT_REDUCTION_SUM)
    out[0] = float(total);
  if (count)
    count[0] = counted;
}

/// The loss gradient g_r of a row: dloss[r] for NONE, dloss[0] for SUM,
/// dloss[0] / count for MEAN.
__device__ double lossGradient(fsdp_rt_reduction reduction, const float *dloss,
                               const int64_t *count, int64_t r) {
  if (reduction == FSDP_RT_REDUCTION_NONE)
    return dloss[r];
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    return double(dloss[0]) / double(count[0]);
  return dloss[0];
}

/// dlogits[r] = g_r · (softmax(logits[r]) - onehot(label)), zero for an
/// ignored row.
template <typename E>
__global__ void crossEntropyGradKernel(
    const typename E::T *logits, fsdp_rt_dtype labelsDtype, const void *labels,
    int64_t rows, int64_t vocab, int64_t ignore, fsdp_rt_reduction reduction,
    const float *dloss, const int64_t *count, typename E::T *dlogits) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = loadIndex(labelsDtype, labels, r);
    typename E::T *dr = dlogits + r * vocab;
    if (label == ignore) {
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
        E::store(dr, i, 0.0f);
      continue;
    }
    double g = lossGradient(reduction, dloss, count, r);
    const typename E::T *xr = logits + r * vocab;
    float m, sum;
    rowStats<E>(xr, vocab, m, sum);
    float factor = float(g / double(sum)), fg = float(g);
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      float value = fastExp(E::load(xr, i) - m) * factor;
      E::store(dr, i, i == label ? value - fg : value);
    }
  }
}

/// The classes of a block [first, first + vocab) below `numClasses` (all
/// when it is <= 0): the others are a padded vocabulary's.
int64_t validClasses(int64_t vocab, int64_t first, int64_t numClasses) {
  if (numClasses <= 0)
    return vocab;
  int64_t valid = numClasses - first < vocab ? numClasses - first : vocab;
  return valid > 0 ? valid : 0;
}

/// sum_exp[r] = Σ_{i < valid} exp(x[r, i] - shift[r]); target[r] =
/// x[r, label - first] - shift[r] when the label is in the block and not
/// ignored, else 0.
template <typename E>
__global__ void partialKernel(const typename E::T *logits,
                              fsdp_rt_dtype labelsDtype, const void *labels,
                              const typename E::T *shift, int64_t rows,
                              int64_t vocab, int64_t valid, int64_t first,
                              int64_t ignore, float *sumExp, float *target) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const typename E::T *xr = logits + r * vocab;
    float m = E::load(shift, r);
    float s = 0;
    for (int64_t i = threadIdx.x; i < valid; i += blockDim.x)
      s += fastExp(E::load(xr, i) - m);
    s = blockReduce(s, SumOp{});
    if (threadIdx.x != 0)
      continue;
    sumExp[r] = s;
    int64_t label = loadIndex(labelsDtype, labels, r), local = label - first;
    target[r] = label != ignore && local >= 0 && local < vocab
                    ? E::load(xr, local) - m
                    : 0.0f;
  }
}

/// dlogits[r, i] = exp(x - shift[r]) · dsum_exp[r] for i < valid, else 0,
/// plus dtarget[r] at the label's column when it is in the block.
template <typename E>
__global__ void
partialGradKernel(const typename E::T *logits, fsdp_rt_dtype labelsDtype,
                  const void *labels, const typename E::T *shift, int64_t rows,
                  int64_t vocab, int64_t valid, int64_t first, int64_t ignore,
                  const float *dsumExp, const float *dtarget,
                  typename E::T *dlogits) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
       e < rows * vocab; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = e / vocab, i = e % vocab;
    float value =
        i < valid ? fastExp(E::load(logits, e) - E::load(shift, r)) * dsumExp[r]
                  : 0.0f;
    int64_t label = loadIndex(labelsDtype, labels, r);
    if (label != ignore && label - first == i)
      value += dtarget[r];
    E::store(dlogits, e, value);
  }
}

/// Losses log(sum_exp[r]) - target[r] of the counted rows, then as
/// totalKernel (one block).
__global__ void combineKernel(const float *sumExp, const float *target,
                              fsdp_rt_dtype labelsDtype, const void *labels,
                              int64_t rows, int64_t ignore,
                              fsdp_rt_reduction reduction, float *out,
                              int64_t *count) {
  double total = 0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    bool counts = loadIndex(labelsDtype, labels, r) != ignore;
    double loss = counts ? log(double(sumExp[r])) - double(target[r]) : 0.0;
    if (reduction == FSDP_RT_REDUCTION_NONE)
      out[r] = float(loss);
    total += loss;
    counted += counts;
  }
  total = blockReduce(total, SumOp{});
  counted = blockReduce(counted, SumOp{});
  if (threadIdx.x != 0)
    return;
  if (count)
    count[0] = counted;
  if (reduction == FSDP_RT_REDUCTION_SUM)
    out[0] = float(total);
  else if (reduction == FSDP_RT_REDUCTION_MEAN)
    out[0] = float(total / double(counted));
}

/// dsum_exp[r] = g_r / sum_exp[r], dtarget[r] = -g_r, g_r = 0 for ignored
/// rows.
__global__ void combineGradKernel(const float *sumExp,
                                  fsdp_rt_dtype labelsDtype, const void *labels,
                                  int64_t rows, int64_t ignore,
                                  fsdp_rt_reduction reduction,
                                  const float *dloss, const int64_t *count,
                                  float *dsumExp, float *dtarget) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    double g = loadIndex(labelsDtype, labels, r) == ignore
                   ? 0.0
                   : lossGradient(reduction, dloss, count, r);
    dsumExp[r] = float(g / double(sumExp[r]));
    dtarget[r] = float(-g);
  }
}
} // namespace

void fsdp_rt_cross_entropy(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                           const void *logits, fsdp_rt_dtype labels_dtype,
                           const void *labels, int64_t rows, int64_t vocab,
                           int64_t ignore_index, fsdp_rt_reduction reduction,
                           float *out, int64_t *count) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_cross_entropy");
  cudaStream_t s = scope.stream();
  Temp<double> losses(rows, s, scope.name());
  bool none = reduction == FSDP_RT_REDUCTION_NONE;
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    if (rows > 0)
      crossEntropyRowsKernel<E><<<rowGrid(rows), kThreads, 0, s>>>(
          asIn<E>(logits), labels_dtype, labels, rows, vocab, ignore_index,
          losses.get(), none ? out : nullptr);
  });
  // Also with no rows: a SUM is 0, a MEAN NaN, the count 0.
  if (!none || count)
    totalKernel<<<1, kReduceThreads, 0, s>>>(losses.get(), labels_dtype, labels,
                                             rows, ignore_index, reduction, out,
                                             count);
}

void fsdp_rt_cross_entropy_grad(fsdp_rt_stream stream, fsdp_rt_dtype dtype,
                                const void *logits, fsdp_rt_dtype labels_dtype,
                                const void *labels, int64_t rows, int64_t vocab,
                                int64_t ignore_index,
                                fsdp_rt_reduction reduction, const float *dloss,
                                void *dlogits) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_cross_entropy_grad");
  if (rows == 0 || vocab == 0)
    return;
  cudaStream_t s = scope.stream();
  Temp<int64_t> count(1, s, scope.name());
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    countLabelsKernel<<<1, kReduceThreads, 0, s>>>(
        labels_dtype, labels, rows, ignore_index, count.get(), nullptr);
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    crossEntropyGradKernel<E><<<rowGrid(rows), kThreads, 0, s>>>(
        asIn<E>(logits), labels_dtype, labels, rows, vocab, ignore_index,
        reduction, dloss, count.get(), asOut<E>(dlogits));
  });
}

void fsdp_rt_cross_entropy_partial(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, float *sum_exp, float *target) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream,
                    "fsdp_rt_cross_entropy_partial");
  if (rows == 0)
    return;
  int64_t valid = validClasses(vocab, first_class, num_classes);
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    partialKernel<E><<<rowGrid(rows), kThreads, 0, scope.stream()>>>(
        asIn<E>(logits), labels_dtype, labels, asIn<E>(shift), rows, vocab,
        valid, first_class, ignore_index, sum_exp, target);
  });
}

void fsdp_rt_cross_entropy_partial_grad(
    fsdp_rt_stream stream, fsdp_rt_dtype dtype, const void *logits,
    fsdp_rt_dtype labels_dtype, const void *labels, const void *shift,
    int64_t rows, int64_t vocab, int64_t first_class, int64_t ignore_index,
    int64_t num_classes, const float *dsum_exp, const float *dtarget,
    void *dlogits) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream,
                    "fsdp_rt_cross_entropy_partial_grad");
  if (rows * vocab == 0)
    return;
  int64_t valid = validClasses(vocab, first_class, num_classes);
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    partialGradKernel<E>
        <<<gridFor(rows * vocab), kThreads, 0, scope.stream()>>>(
            asIn<E>(logits), labels_dtype, labels, asIn<E>(shift), rows, vocab,
            valid, first_class, ignore_index, dsum_exp, dtarget,
            asOut<E>(dlogits));
  });
}

void fsdp_rt_cross_entropy_combine(fsdp_rt_stream stream, const float *sum_exp,
                                   const float *target,
                                   fsdp_rt_dtype labels_dtype,
                                   const void *labels, int64_t rows,
                                   int64_t ignore_index,
                                   fsdp_rt_reduction reduction, float *out,
                                   int64_t *count) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream,
                    "fsdp_rt_cross_entropy_combine");
  combineKernel<<<1, kReduceThreads, 0, scope.stream()>>>(
      sum_exp, target, labels_dtype, labels, rows, ignore_index, reduction, out,
      count);
}

void fsdp_rt_cross_entropy_combine_grad(
    fsdp_rt_stream stream, const float *sum_exp, fsdp_rt_dtype labels_dtype,
    const void *labels, int64_t rows, int64_t ignore_index,
    fsdp_rt_reduction reduction, const float *dloss, float *dsum_exp,
    float *dtarget) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream,
                    "fsdp_rt_cross_entropy_combine_grad");
  if (rows == 0)
    return;
  cudaStream_t s = scope.stream();
  Temp<int64_t> count(1, s, scope.name());
  if (reduction == FSDP_RT_REDUCTION_MEAN)
    countLabelsKernel<<<1, kReduceThreads, 0, s>>>(
        labels_dtype, labels, rows, ignore_index, count.get(), nullptr);
  combineGradKernel<<<gridFor(rows), kThreads, 0, s>>>(
      sum_exp, labels_dtype, labels, rows, ignore_index, reduction, dloss,
      count.get(), dsum_exp, dtarget);
}

void fsdp_rt_count_labels(fsdp_rt_stream stream, fsdp_rt_dtype labels_dtype,
                          const void *labels, int64_t numel,
                          int64_t ignore_index, float *out) {
  KernelScope scope(FSDP_RT_KERNEL_LOSS, stream, "fsdp_rt_count_labels");
  countLabelsKernel<<<1, kReduceThreads, 0, scope.stream()>>>(
      labels_dtype, labels, numel, ignore_index, nullptr, out);
}

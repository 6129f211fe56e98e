//===- Loss.cu - cross_entropy, its partial/combine forms and grads -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A thread block per row of logits [rows, vocab]: the row maximum and
// Σ exp(x - max) in one pass (LossRows.cuh for the whole-vocabulary loss
// and its gradient), block reductions in the partial forms.
// Row losses are double; the SUM/MEAN total and the count of rows whose
// label is not ignore_index are reduced by one block in a fixed order, so
// the loss is reproducible. Every result stays on the device: `out`,
// `count`, `dloss`, `sum_exp`, `target`, ... are device pointers like all
// data pointers of this backend, and a MEAN's token count is computed on
// the device rather than read back.
//
//===----------------------------------------------------------------------===//

#include "Internal.cuh"
#include "LossRows.cuh"

#include <cmath>

using namespace fsdp::rt::cuda;

namespace {
using loss::lossGradient;

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

/// The labels a mean loss divides by, counted on the device (unset and
/// unread under the other reductions).
class LabelCount : public Temp<int64_t> {
public:
  LabelCount(KernelScope &scope, fsdp_rt_dtype labels_dtype, const void *labels,
             int64_t rows, int64_t ignore_index, fsdp_rt_reduction reduction)
      : Temp(1, scope.stream(), scope.name()) {
    if (reduction == FSDP_RT_REDUCTION_MEAN)
      countLabelsKernel<<<1, kReduceThreads, 0, scope.stream()>>>(
          labels_dtype, labels, rows, ignore_index, get(), nullptr);
  }
};

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
      loss::crossEntropyRows<Portable<E>>
          <<<rowGrid(rows), loss::kRowThreads, 0, s>>>(
              asPortable<E>(logits), labels_dtype, labels, rows, vocab,
              ignore_index, losses.get(), none ? out : nullptr);
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
  LabelCount count(scope, labels_dtype, labels, rows, ignore_index, reduction);
  dispatchFloat(dtype, scope.name(), [&](auto e) {
    using E = decltype(e);
    loss::crossEntropyGradRows<Portable<E>>
        <<<rowGrid(rows), loss::kRowThreads, 0, s>>>(
            asPortable<E>(logits), labels_dtype, labels, rows, vocab,
            ignore_index, reduction, dloss, count.get(),
            asPortable<E>(dlogits));
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
  LabelCount count(scope, labels_dtype, labels, rows, ignore_index, reduction);
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

//===- AdamWMulti.cuh - Multi-tensor AdamW, also run emulated ---*- CUDA
//-*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// torch.optim.AdamW over a table of tensors in one launch, as apex's and
// PyTorch's fused multi-tensor AdamW do: each tensor is cut into chunks of
// kAdamWChunk elements, the chunks of all tensors are numbered in order
// (`firstChunk` holds each tensor's first), and a block walks chunks with
// a grid stride, finding each chunk's tensor in the table. The table
// travels as a kernel argument. The step's bias corrections are computed
// once per block from the step count in device memory, in double, as the
// CPU backend computes them, so a launch needs nothing from the host that
// changes from step to step. Element by element the update is the CPU
// backend's, operation for operation in f32. Written against Portable.cuh:
// emulated-kernels.test runs it on the CPU against the CPU backend.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_CUDA_ADAMWMULTI_CUH
#define FSDP_LIB_RUNTIME_CUDA_ADAMWMULTI_CUH

#include "Portable.cuh"

#include "fsdp/Runtime/Runtime.h"

namespace fsdp::rt::cuda::adamw {

using namespace portable;

constexpr int kAdamWThreads = 256;
/// Elements per chunk: 16 per thread.
constexpr int64_t kAdamWChunk = 16 * kAdamWThreads;
constexpr int kTable = FSDP_RT_ADAMW_TABLE;

/// Up to kTable tensors and where their chunks start (firstChunk[count]
/// is the launch's number of chunks).
struct Table {
  fsdp_rt_adamw_tensor tensors[kTable];
  int64_t firstChunk[kTable + 1];
  int count;
};

struct Hyper {
  double lr, beta1, beta2, eps, weightDecay;
};

/// Fills `table` with tensors [first, first + count) of `tensors` (count
/// at most kTable); returns the number of chunks.
inline int64_t fillTable(Table &table, const fsdp_rt_adamw_tensor *tensors,
                         int count) {
  table.count = count;
  table.firstChunk[0] = 0;
  for (int t = 0; t < count; ++t) {
    table.tensors[t] = tensors[t];
    table.firstChunk[t + 1] =
        table.firstChunk[t] +
        (tensors[t].numel + kAdamWChunk - 1) / kAdamWChunk;
  }
  return table.firstChunk[count];
}

inline unsigned adamwGrid(int64_t chunks) {
  return unsigned(chunks < 4096 ? (chunks > 0 ? chunks : 1) : 4096);
}

/// The step's constants, in f32 from double.
struct Coefficients {
  float decay, beta1, beta2, stepSize, correction2Sqrt, eps, gradScale;
};

/// `lrScale`: the schedule's factor of the learning rate (null: 1).
PORTABLE_DEVICE Coefficients coefficients(const Hyper &h, const float *step,
                                          const float *gradScale,
                                          const float *lrScale) {
  double t = step[0];
  double lr = lrScale ? h.lr * double(lrScale[0]) : h.lr;
  Coefficients c;
  c.decay = float(1.0 - lr * h.weightDecay);
  c.beta1 = float(h.beta1);
  c.beta2 = float(h.beta2);
  c.stepSize = float(lr / (1.0 - pow(h.beta1, t)));
  c.correction2Sqrt = float(sqrt(1.0 - pow(h.beta2, t)));
  c.eps = float(h.eps);
  c.gradScale = gradScale[0];
  return c;
}

template <typename E>
PORTABLE_KERNEL(kAdamWThreads)
void adamwMulti(Table table, Hyper hyper, const float *step,
                const float *gradScale, const float *lrScale) {
  PORTABLE_SHARED_ARRAY(Coefficients, shared, 1);
  if (threadIdx.x == 0)
    shared[0] = coefficients(hyper, step, gradScale, lrScale);
  barrier();
  Coefficients c = shared[0];
  int t = 0;
  for (int64_t chunk = blockIdx.x; chunk < table.firstChunk[table.count];
       chunk += gridDim.x) {
    // Chunks increase, so the tensor index only moves forward.
    while (table.firstChunk[t + 1] <= chunk)
      ++t;
    const fsdp_rt_adamw_tensor &x = table.tensors[t];
    const auto *grad = static_cast<const typename E::T *>(x.grad);
    int64_t begin = (chunk - table.firstChunk[t]) * kAdamWChunk;
    int64_t end = begin + kAdamWChunk < x.numel ? begin + kAdamWChunk : x.numel;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float gi = toFloat<E>(grad[i]) * c.gradScale;
      float p = x.param[i] * c.decay;
      float mi = x.exp_avg[i] + (gi - x.exp_avg[i]) * (1.0f - c.beta1);
      float vi = x.exp_avg_sq[i] * c.beta2 + (1.0f - c.beta2) * gi * gi;
      float denom = sqrtf(vi) / c.correction2Sqrt + c.eps;
      x.new_param[i] = p - c.stepSize * (mi / denom);
      x.new_exp_avg[i] = mi;
      x.new_exp_avg_sq[i] = vi;
    }
  }
}

} // namespace fsdp::rt::cuda::adamw

#endif // FSDP_LIB_RUNTIME_CUDA_ADAMWMULTI_CUH

//===- LrSchedule.h - Learning-rate schedules, host and device --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The factor a schedule multiplies the learning rate by, as transformers'
// get_scheduler defines it, for the CPU kernels, the CUDA kernel and the
// host's step line alike (one definition: the three agree bit for bit).
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_LRSCHEDULE_H
#define FSDP_LIB_RUNTIME_COMMON_LRSCHEDULE_H

#include "FloatBits.h"

#include "fsdp/Runtime/Runtime.h"

#include <cmath>

namespace fsdp::rt {

/// The factor of optimizer step `step` (1-based, as the optimizer counts;
/// transformers' scheduler has taken step - 1 steps by then): a linear
/// warmup from 0 over `warmup` steps, then constant, or a linear or
/// half-cosine decay to `minRatio` at step `total` (transformers' linear,
/// cosine and cosine_with_min_lr schedules; min_lr_rate applies to linear
/// the same way), held there after `total`.
FSDP_HOST_DEVICE double lrScheduleFactor(fsdp_rt_lr_schedule_kind schedule,
                                         double step, double warmup,
                                         double total, double minRatio) {
  double s = step - 1;
  if (s < warmup)
    return s / (warmup > 1 ? warmup : 1);
  if (schedule == FSDP_LR_CONSTANT)
    return 1.0;
  double span = total - warmup > 1 ? total - warmup : 1;
  double progress = (s - warmup) / span;
  progress = progress < 1 ? progress : 1;
  double decay = schedule == FSDP_LR_LINEAR
                     ? 1 - progress
                     : 0.5 * (1 + cos(3.14159265358979323846 * progress));
  return minRatio + (1 - minRatio) * decay;
}

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_LRSCHEDULE_H

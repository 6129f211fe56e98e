//===- LrSchedule.h - Learning-rate schedules, host and device --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The factor a schedule multiplies the learning rate by, as transformers'
// get_scheduler defines it, for the CPU kernels and the CUDA kernel alike
// (one definition; the device's cosine is cospi, within an ulp of the
// host's in double, before both round to f32).
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
#ifdef __CUDA_ARCH__
  // cospi: no argument reduction, so no local-memory table (the library's
  // cos keeps one for huge arguments, which progress <= 1 never is).
  double cosine = cospi(progress);
#else
  double cosine = std::cos(3.14159265358979323846 * progress);
#endif
  double decay = schedule == FSDP_LR_LINEAR ? 1 - progress : 0.5 * (1 + cosine);
  return minRatio + (1 - minRatio) * decay;
}

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_LRSCHEDULE_H

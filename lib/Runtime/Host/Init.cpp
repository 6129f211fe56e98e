//===- Init.cpp - Deterministic parameter initialization ------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// Element i of parameter `name` is a pure function of (seed, name, i): a
// counter-based generator (splitmix64 as a mixing function) keyed by the
// FNV-1a hash of the name. A rank that owns a shard of a parameter computes
// exactly the elements the full initialization would have given it.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "../Common/Float.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

using namespace fsdp::host;

namespace {

uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; ++s)
    h = (h ^ uint8_t(*s)) * 0x100000001b3ull;
  return h;
}

/// A double in [0, 1) from the top 53 bits.
double unit(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

} // namespace

void fsdp::host::initFill(fsdp_rt_dtype dtype, fsdp_init_kind init, double a,
                          double b, uint64_t seed, const char *name,
                          int64_t begin, int64_t end, void *out) {
  if (init != FSDP_INIT_ZEROS && init != FSDP_INIT_ONES &&
      init != FSDP_INIT_UNIFORM && init != FSDP_INIT_NORMAL)
    fail("init", "unknown initializer " + std::to_string(int(init)) + " for '" +
                     name + "'");
  uint64_t key = splitmix64(fnv1a(name) ^ splitmix64(seed));
  auto value = [&](int64_t i) -> double {
    switch (init) {
    case FSDP_INIT_ZEROS:
      return 0.0;
    case FSDP_INIT_ONES:
      return 1.0;
    case FSDP_INIT_UNIFORM:
      return a + (b - a) * unit(splitmix64(key ^ uint64_t(2 * i)));
    case FSDP_INIT_NORMAL: {
      // Box-Muller; 1 - u lies in (0, 1], so the log is finite.
      double u1 = 1.0 - unit(splitmix64(key ^ uint64_t(2 * i)));
      double u2 = unit(splitmix64(key ^ uint64_t(2 * i + 1)));
      return a + b * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    }
    }
    return 0.0; // Checked above.
  };
  int64_t n = end - begin;
  if (dtype == FSDP_RT_I32 || dtype == FSDP_RT_I64) {
    for (int64_t i = 0; i < n; ++i) {
      auto v = int64_t(std::llround(value(begin + i)));
      if (dtype == FSDP_RT_I32)
        static_cast<int32_t *>(out)[i] = int32_t(v);
      else
        static_cast<int64_t *>(out)[i] = v;
    }
    return;
  }
  // Each element is a pure function of its index, so large tensors are
  // filled by several threads (a 1B-parameter model's Box-Muller draws take
  // about a minute on one core).
  std::vector<float> values(size_t(n > 0 ? n : 0));
  auto fill = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      values[i] = float(value(begin + i));
  };
  constexpr int64_t kPerThread = int64_t(1) << 20;
  int64_t threads = std::min<int64_t>(
      std::max(1u, std::thread::hardware_concurrency()), n / kPerThread);
  if (threads <= 1) {
    fill(0, n);
  } else {
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t)
      pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
    for (std::thread &th : pool)
      th.join();
  }
  fsdp::rt::fromFloat(dtype, values.data(), n, out);
}

void fsdp::host::initParams(fsdp_program &p, uint64_t seed) {
  for (Param &param : p.params) {
    param.tensor = newTensor(param.type, param.host);
    param.tensor->borrowed = true;
    // Each run of this rank's block is a run of the whole tensor; padding
    // stays zero.
    std::vector<char> image(size_t(byteSize(param.type)));
    size_t esize = fsdp_rt_dtype_size(param.type.dtype);
    for (const Run &run : runsOf(layoutOf(p, param)))
      initFill(param.type.dtype, param.init, param.a, param.b, seed,
               param.name.c_str(), run.global, run.global + run.count,
               image.data() + size_t(run.local) * esize);
    upload(param.tensor, image.data());
  }
}

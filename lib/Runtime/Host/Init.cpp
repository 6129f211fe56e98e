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

#include "../CPU/Internal.h"

#include <cmath>
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
    fail("init", "unknown initializer " + std::to_string(int(init)) + " for '" +
                     name + "'");
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
  std::vector<float> values(size_t(n > 0 ? n : 0));
  for (int64_t i = 0; i < n; ++i)
    values[i] = float(value(begin + i));
  fsdp::rt::fromFloat(dtype, values.data(), n, out);
}

namespace {
/// Fills this rank's block of a sharded parameter: each run of the last
/// local dim within one group is a contiguous run of the whole tensor.
void initBlock(const fsdp_program &p, const Param &param, uint64_t seed,
               char *out) {
  int64_t rank = param.type.rank;
  // This rank's block index along each dim: its coordinates on the dim's
  // axes, row-major in the listed order.
  std::vector<int64_t> block(size_t(rank), 0);
  for (int64_t d = 0; d < rank; ++d)
    block[d] = blockIndex(p, param.dimOrder[d]);
  // Local index i of dim d is element g·(global/groups) + block·piece + j
  // of the whole dim, where piece = local/groups, g = i / piece, j = i % piece.
  auto global = [&](int64_t d, int64_t i) {
    int64_t groups = param.dimGroups[d];
    int64_t piece = param.type.dims[d] / groups;
    return (i / piece) * (param.globalDims[d] / groups) + block[d] * piece +
           i % piece;
  };
  int64_t last = rank ? param.type.dims[rank - 1] : 1;
  int64_t runs = rank ? param.dimGroups[rank - 1] : 1;
  int64_t run = last / runs;
  int64_t rows = last ? numElements(param.type) / last : 0;
  size_t esize = fsdp_rt_dtype_size(param.type.dtype);
  std::vector<int64_t> coord(size_t(rank), 0);
  for (int64_t r = 0; r < rows; ++r) {
    // Local coordinates of row r (all dims but the last).
    for (int64_t d = rank - 2, rest = r; d >= 0; --d) {
      coord[d] = rest % param.type.dims[d];
      rest /= param.type.dims[d];
    }
    // Rows past the whole tensor's end are FSDP's padding: they stay zero.
    bool padding = false;
    for (int64_t d = 0; d + 1 < rank; ++d)
      padding |= global(d, coord[d]) >= param.globalDims[d];
    if (padding)
      continue;
    for (int64_t k = 0; k < runs; ++k) {
      int64_t begin = 0, first = rank ? global(rank - 1, k * run) : 0;
      for (int64_t d = 0; d < rank; ++d)
        begin = begin * param.globalDims[d] +
                (d == rank - 1 ? first : global(d, coord[d]));
      int64_t count =
          rank ? std::min(run, param.globalDims[rank - 1] - first) : run;
      if (count > 0)
        initFill(param.type.dtype, param.init, param.a, param.b, seed,
                 param.name.c_str(), begin, begin + count,
                 out + size_t(r * last + k * run) * esize);
    }
  }
}
} // namespace

void fsdp::host::initParams(fsdp_program &p, uint64_t seed) {
  for (Param &param : p.params) {
    param.tensor = newTensor(param.type);
    param.tensor->borrowed = true;
    std::vector<char> image(size_t(byteSize(param.type)));
    if (!param.globalDims.empty())
      initBlock(p, param, seed, image.data());
    else
      initFill(param.type.dtype, param.init, param.a, param.b, seed,
               param.name.c_str(), 0, numElements(param.type), image.data());
    upload(param.tensor, image.data());
  }
}

//===- Shape.h - Shapes, as both backends walk them -------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_COMMON_SHAPE_H
#define FSDP_LIB_RUNTIME_COMMON_SHAPE_H

#include <cstdint>

namespace fsdp::rt {

/// Product of `shape` (1 for rank 0).
inline int64_t numElements(const int64_t *shape, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i)
    n *= shape[i];
  return n;
}

/// `shape` seen as [outer, len, inner] around its dim `dim` (negative from
/// the back): the elements before the dim, the dim, those after it.
struct AxisView {
  int64_t outer, len, inner;
};
inline AxisView viewAround(const int64_t *shape, int rank, int dim) {
  if (dim < 0)
    dim += rank;
  return {numElements(shape, dim), shape[dim],
          numElements(shape + dim + 1, rank - dim - 1)};
}

/// Row-major strides of `shape`, into `strides`.
inline void stridesOf(const int64_t *shape, int rank, int64_t *strides) {
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
}

/// Whether `shape`, less its leading 1s, is the trailing dims of `outShape`:
/// its elements then repeat with period numElements(shape) over the output.
inline bool isTrailing(const int64_t *shape, int rank, const int64_t *outShape,
                       int outRank) {
  int lead = 0;
  while (lead < rank && shape[lead] == 1)
    ++lead;
  if (rank - lead > outRank)
    return false;
  for (int i = lead; i < rank; ++i)
    if (shape[i] != outShape[outRank - rank + i])
      return false;
  return true;
}

} // namespace fsdp::rt

#endif // FSDP_LIB_RUNTIME_COMMON_SHAPE_H

//===- Checks.h - Operand checks of the host ops ----------------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What Ops.cpp and MoEOps.cpp check of an op's operands before they call a
// kernel: each failure aborts naming the op.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_LIB_RUNTIME_HOST_CHECKS_H
#define FSDP_LIB_RUNTIME_HOST_CHECKS_H

#include "Host.h"

namespace fsdp::host {

/// Checks on the operands of one op; each failure aborts with the op's name.
struct Check {
  const char *op;

  [[noreturn]] void fail(const std::string &what) const {
    fsdp::host::fail(op, what);
  }
  void that(bool ok, const std::string &what) const {
    if (!ok)
      fail(what);
  }
  void present(const fsdp_tensor *t, const char *what) const {
    that(t != nullptr, std::string(what) + " is null");
  }
  void isFloat(const fsdp_type &t, const char *what) const {
    that(t.dtype == FSDP_RT_F32 || t.dtype == FSDP_RT_BF16 ||
             t.dtype == FSDP_RT_F16,
         std::string(what) + " is " + typeString(t) + ", expected a float");
  }
  void isIndex(const fsdp_type &t, const char *what) const {
    that(t.dtype == FSDP_RT_I32 || t.dtype == FSDP_RT_I64,
         std::string(what) + " is " + typeString(t) + ", expected i32 or i64");
  }
  void sameDtype(const fsdp_type &t, const fsdp_type &want,
                 const char *what) const {
    that(t.dtype == want.dtype, std::string(what) + " is " + typeString(t) +
                                    ", expected element type " +
                                    dtypeName(want.dtype));
  }
  /// Float operands `lhs` and `rhs` and result type `r` of one element
  /// type.
  void floatOperands(const fsdp_tensor *a, const fsdp_tensor *b,
                     const fsdp_type &r) const {
    present(a, "lhs");
    present(b, "rhs");
    isFloat(a->type, "lhs");
    sameDtype(b->type, a->type, "rhs");
    sameDtype(r, a->type, "result");
  }
  void rankAtLeast(const fsdp_type &t, int64_t rank, const char *what) const {
    that(t.rank >= rank, std::string(what) + " is " + typeString(t) +
                             ", expected rank >= " + std::to_string(rank));
  }
  /// `t` must have exactly `dims`.
  void shape(const fsdp_type &t, const std::vector<int64_t> &dims,
             const char *what) const {
    bool ok = t.rank == int64_t(dims.size());
    for (int64_t i = 0; ok && i < t.rank; ++i)
      ok = t.dims[i] == dims[i];
    if (ok)
      return;
    fsdp_type want = t;
    want.rank = int64_t(dims.size());
    for (int64_t i = 0; i < want.rank && i < 8; ++i)
      want.dims[i] = dims[i];
    fail(std::string(what) + " is " + typeString(t) + ", expected " +
         typeString(want));
  }
  void sameShape(const fsdp_type &t, const fsdp_type &want,
                 const char *what) const {
    shape(t, dimsOf(want), what);
  }
  static std::vector<int64_t> dimsOf(const fsdp_type &t) {
    return std::vector<int64_t>(t.dims, t.dims + t.rank);
  }
};

} // namespace fsdp::host

#endif // FSDP_LIB_RUNTIME_HOST_CHECKS_H

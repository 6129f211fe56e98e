//===- Accounting.h - What a collective sends and stages --------*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One definition of the bytes a collective sends and the staging buffers it
// allocates, read by the runtime (which counts and allocates by it) and by
// the compiler's communication and memory reports (which predict by it), so
// the two cannot drift apart; likewise the slots of the memory plan, which
// the compiler places and the runtime checks. Plain C++17, no dependencies.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_RUNTIME_ACCOUNTING_H
#define FSDP_RUNTIME_ACCOUNTING_H

#include <cstdint>

namespace fsdp::accounting {

/// The collectives of Collectives.def, in its order.
enum class Collective {
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS) Kind,
#include "fsdp/Runtime/Collectives.def"
};

/// How a collective over n ranks moves its input, by the ring convention.
enum class Traffic {
  /// Every member's input reaches n - 1 peers (all_gather).
  Gather,
  /// (n - 1)/n of the input leaves each member (reduce_scatter,
  /// all_to_all).
  Scatter,
  /// Twice that: a reduce-scatter, then an all-gather (all_reduce).
  Reduce,
  /// All of it to one peer (permute).
  Shift,
  /// All of it from the root to the others (broadcast).
  Root,
  /// Rows routed by counts known only at run time (all_to_all_v): (n - 1)/n
  /// of the rows when the routing is balanced, which is what the compiler
  /// predicts (of the smaller of input and result: a combine returns rows
  /// from a buffer sized for the worst routing); the runtime counts the
  /// rows it sent to other members.
  Routed,
};

/// The traffic of `kind`.
constexpr Traffic trafficOf(Collective kind) {
  switch (kind) {
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic_, PARAMS, ARGS)              \
  case Collective::Kind:                                                       \
    return Traffic::Traffic_;
#include "fsdp/Runtime/Collectives.def"
  }
  return Traffic::Gather;
}

/// The name of `kind` (`all_gather`): the dist op's mnemonic, the runtime's
/// and the reports'.
constexpr const char *nameOf(Collective kind) {
  switch (kind) {
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS)               \
  case Collective::Kind:                                                       \
    return #name;
#include "fsdp/Runtime/Collectives.def"
  }
  return "";
}

/// The number of collective kinds.
constexpr int kNumCollectives = 0
#define FSDP_COLLECTIVE(Kind, name, NAME, Traffic, PARAMS, ARGS) +1
#include "fsdp/Runtime/Collectives.def"
    ;

/// The bytes one rank sends in a collective over `n` ranks whose input is
/// `inputBytes`, by its traffic.
constexpr int64_t bytesSent(Collective kind, int64_t inputBytes, int64_t n) {
  switch (trafficOf(kind)) {
  case Traffic::Gather:
    return inputBytes * (n - 1);
  case Traffic::Scatter:
  case Traffic::Routed:
    return inputBytes * (n - 1) / n;
  case Traffic::Reduce:
    return 2 * inputBytes * (n - 1) / n;
  case Traffic::Shift:
  case Traffic::Root:
    return inputBytes;
  }
  return 0;
}

/// The buffers a collective allocates while it runs, in bytes (0: none):
/// 16-bit floats are widened to f32 to be reduced, and blocks that are not
/// contiguous along the gathered or scattered dim go through a copy.
struct Staging {
  int64_t widen = 0, send = 0, recv = 0;
  constexpr int64_t total() const { return widen + send + recv; }
};

/// all_gather with a result of `resultBytes` whose gather dim has `outer`
/// elements before it: blocks arrive as [n, outer, piece] and are
/// rearranged from a receive buffer.
constexpr Staging allGatherStaging(int64_t resultBytes, int64_t outer) {
  return {0, 0, outer > 1 ? resultBytes : 0};
}

/// reduce_scatter of `inputNumel` elements of `elementBytes` each (`half`:
/// a 16-bit float) to `resultNumel`, with `outer` result elements before
/// the scatter dim: a widened copy, a rearranged send buffer, and an f32
/// receive buffer for 16-bit floats.
constexpr Staging reduceScatterStaging(int64_t inputNumel, int64_t resultNumel,
                                       int64_t elementBytes, bool half,
                                       int64_t outer) {
  return {half ? inputNumel * 4 : 0,
          outer > 1 ? inputNumel * (half ? 4 : elementBytes) : 0,
          half ? resultNumel * 4 : 0};
}

/// all_reduce of `numel` elements: f32 send and receive buffers for 16-bit
/// floats.
constexpr Staging allReduceStaging(int64_t numel, bool half) {
  return {0, half ? numel * 4 : 0, half ? numel * 4 : 0};
}

/// all_to_all of `bytes` in `n` blocks, with `outerSend` elements before the
/// split dim and `outerReceive` before the concat dim (of one block):
/// rearranged send and receive buffers.
constexpr Staging allToAllStaging(int64_t bytes, int64_t n, int64_t outerSend,
                                  int64_t outerReceive) {
  bool blocks = bytes / n > 0;
  return {0, outerSend > 1 && blocks ? bytes : 0,
          outerReceive > 1 && blocks ? bytes : 0};
}

/// The staging an asynchronous collective keeps from its start to its
/// wait: all of it, but for a reduce_scatter's widened copy when a
/// rearranged send buffer replaces it (the start frees that copy).
constexpr int64_t heldUntilWait(Collective kind, Staging s) {
  return kind == Collective::ReduceScatter && s.send ? s.send + s.recv
                                                     : s.total();
}

/// The memory plan's slots (fsdp_prog_memory_plan): offsets are multiples
/// of kPlanAlignment (what cuBLAS and vectorized kernels want of a buffer's
/// start), and a buffer of `bytes` takes max(bytes, 1) rounded up to it.
constexpr int64_t kPlanAlignment = 256;
constexpr int64_t planSlotBytes(int64_t bytes) {
  return ((bytes > 1 ? bytes : 1) + kPlanAlignment - 1) / kPlanAlignment *
         kPlanAlignment;
}

} // namespace fsdp::accounting

#endif // FSDP_RUNTIME_ACCOUNTING_H

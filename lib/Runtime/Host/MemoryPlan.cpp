//===- MemoryPlan.cpp - The step's buffers at the compiler's offsets ------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The compiler plans where each device buffer of a step lives in one arena
// (StepBuffers.h); the host layer allocates the arena once and hands the
// step's allocations out at the planned offsets, in the order the plan
// lists them. Nothing trusts the plan blindly: each allocation must have
// the planned size, and its slot must not overlap a planned buffer that is
// still live, so a plan that disagrees with the program stops the run
// instead of corrupting a tensor. On a GPU a slot is reused in the compute
// stream's order, as the stream-ordered pool reuses freed memory.
//
//===----------------------------------------------------------------------===//

#include "Host.h"

#include "fsdp/Runtime/Accounting.h"

#include <mutex>

using namespace fsdp::host;
using fsdp::accounting::kPlanAlignment;
using fsdp::accounting::planSlotBytes;

namespace {
/// The program whose step is running under its plan, and the one that has
/// a plan (one program per process).
fsdp_program *running = nullptr, *owner = nullptr;
std::mutex planMutex;
} // namespace

void fsdp_prog_memory_plan(fsdp_program *p, int64_t arena_bytes, int64_t count,
                           const int64_t *table) {
  const char *op = "fsdp_prog_memory_plan";
  if (arena_bytes < 0 || count < 0)
    fail(op, "a negative arena or count");
  MemoryPlan &plan = p->memoryPlan;
  plan.arena = arena_bytes;
  owner = p;
  for (int64_t i = 0; i < count; ++i) {
    int64_t bytes = table[2 * i], offset = table[2 * i + 1];
    bool placed = offset >= 0;
    if (bytes < 0 || offset < -1 ||
        (placed && (offset % kPlanAlignment ||
                    offset + planSlotBytes(bytes) > arena_bytes)))
      fail(op, "allocation #" + std::to_string(i) + " (" +
                   std::to_string(bytes) + " bytes at offset " +
                   std::to_string(offset) + ") does not fit an arena of " +
                   std::to_string(arena_bytes) + " bytes");
    plan.bytes.push_back(bytes);
    plan.offsets.push_back(offset);
  }
}

void fsdp::host::beginStepMemory(fsdp_program &p) {
  MemoryPlan &plan = p.memoryPlan;
  if (plan.bytes.empty())
    return;
  if (!plan.base && plan.arena > 0) {
    plan.base = static_cast<char *>(fsdp_rt_alloc(size_t(plan.arena)));
    if (!plan.base)
      fail("memory plan", "out of memory allocating the arena of " +
                              std::to_string(plan.arena) + " bytes");
  }
  std::lock_guard<std::mutex> lock(planMutex);
  plan.next = 0;
  running = &p;
}

void fsdp::host::endStepMemory(fsdp_program &p) {
  MemoryPlan &plan = p.memoryPlan;
  if (plan.bytes.empty())
    return;
  std::lock_guard<std::mutex> lock(planMutex);
  running = nullptr;
  if (plan.next != plan.bytes.size())
    fail("memory plan", "step " + std::to_string(p.step) + " made " +
                            std::to_string(plan.next) + " of the " +
                            std::to_string(plan.bytes.size()) +
                            " device allocations the compiler planned");
  if (!plan.live.empty())
    fail("memory plan", "the planned buffer at offset " +
                            std::to_string(plan.live.begin()->first) +
                            " outlives step " + std::to_string(p.step));
}

void *fsdp::host::takePlanned(const fsdp_type &type) {
  std::lock_guard<std::mutex> lock(planMutex);
  if (!running)
    return nullptr;
  MemoryPlan &plan = running->memoryPlan;
  size_t k = plan.next++;
  int64_t bytes = byteSize(type);
  std::string which = "allocation #" + std::to_string(k) + " of step " +
                      std::to_string(running->step) + " (" + typeString(type) +
                      ", " + std::to_string(bytes) + " bytes)";
  if (k >= plan.bytes.size())
    fail("memory plan", which + " is beyond the " +
                            std::to_string(plan.bytes.size()) +
                            " the compiler planned");
  if (plan.bytes[k] != bytes)
    fail("memory plan", which + ": the compiler planned " +
                            std::to_string(plan.bytes[k]) +
                            " bytes; was the program compiled for another "
                            "runtime?");
  ++plan.checked;
  int64_t offset = plan.offsets[k];
  if (offset < 0)
    return nullptr;
  int64_t end = offset + planSlotBytes(bytes);
  auto after = plan.live.lower_bound(offset);
  bool overlaps =
      (after != plan.live.end() && after->first < end) ||
      (after != plan.live.begin() && std::prev(after)->second > offset);
  if (overlaps)
    fail("memory plan", which + " at offset " + std::to_string(offset) +
                            " overlaps a planned buffer that is still live: "
                            "the step frees a buffer later than the "
                            "compiler's plan has it");
  plan.live.emplace(offset, end);
  return plan.base + offset;
}

void fsdp::host::releasePlanned(void *data) {
  std::lock_guard<std::mutex> lock(planMutex);
  MemoryPlan &plan = owner->memoryPlan;
  if (!plan.live.erase(static_cast<char *>(data) - plan.base))
    fail("memory plan", "a planned buffer was released twice");
}

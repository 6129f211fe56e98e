//===- Profile.cpp - Kernel time per ABI function -------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "Profile.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace {
struct Row {
  int64_t calls = 0, nanos = 0;
};

std::mutex &profileMutex() {
  static std::mutex *mutex = new std::mutex;
  return *mutex;
}

/// By name; looked up by string_view, so a call to an existing row (every
/// kernel call on the CPU backend) allocates nothing.
using Rows = std::map<std::string, Row, std::less<>>;

Rows &profileRows() {
  static auto *rows = new Rows;
  return *rows;
}
} // namespace

void fsdp::rt::profileAdd(const char *name, int64_t nanos) {
  std::lock_guard<std::mutex> lock(profileMutex());
  Rows &rows = profileRows();
  auto it = rows.find(std::string_view(name));
  if (it == rows.end())
    it = rows.emplace(name, Row{}).first;
  Row &row = it->second;
  row.calls += 1;
  row.nanos += nanos;
}

void fsdp::rt::profileReset() {
  std::lock_guard<std::mutex> lock(profileMutex());
  profileRows().clear();
}

int fsdp::rt::profileRead(int max, const char **names, int64_t *calls,
                          int64_t *timeNs) {
  std::lock_guard<std::mutex> lock(profileMutex());
  std::vector<const std::pair<const std::string, Row> *> order;
  for (const auto &entry : profileRows())
    order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [](auto *a, auto *b) {
    return a->second.nanos > b->second.nanos;
  });
  for (int i = 0; i < max && i < int(order.size()); ++i) {
    // The map's keys stay put until profileReset.
    names[i] = order[i]->first.c_str();
    calls[i] = order[i]->second.calls;
    timeNs[i] = order[i]->second.nanos;
  }
  return int(order.size());
}

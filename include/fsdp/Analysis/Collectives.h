//===- Collectives.h - What a step's collectives send and stage -*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The compiler's side of the collectives' accounting (Accounting.h): the
// group a collective op runs over on its mesh and the staging it holds
// (each op's kind, bytes sent and staging are CollectiveOpInterface's). The
// communication and memory reports, the memory replay and the simulator
// read them.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_COLLECTIVES_H
#define FSDP_ANALYSIS_COLLECTIVES_H

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Runtime/Accounting.h"

#include <string>

namespace fsdp {

/// The mesh axes `op` communicates over, as a mask (bit i: axis i of
/// `mesh`), views expanded.
uint32_t axisMask(dist::CollectiveOpInterface op, dist::MeshOp mesh);

/// The group of the axes in `mask`, as the reports name it: "{dp,tp}".
std::string groupName(uint32_t mask, dist::MeshOp mesh);

/// The ranks in `op`'s group on `mesh`.
int64_t groupSize(dist::CollectiveOpInterface op, dist::MeshOp mesh);

/// The staging bytes the runtime allocates while `op` runs over `n` ranks.
inline int64_t stagingBytes(dist::CollectiveOpInterface op, int64_t n) {
  return op.getStaging(n).total();
}
/// The part of it an asynchronous `op` holds until its wait.
inline int64_t heldStagingBytes(dist::CollectiveOpInterface op, int64_t n) {
  return accounting::heldUntilWait(op.getCollectiveKind(), op.getStaging(n));
}

} // namespace fsdp

#endif // FSDP_ANALYSIS_COLLECTIVES_H

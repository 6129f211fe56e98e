//===- Hardware.h - The GPU and network model of fsdp-simulate --*- C++ -*-===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// A hardware model read from JSON (docs/simulator.md): what one op and one
// collective cost in seconds.
//
//===----------------------------------------------------------------------===//

#ifndef FSDP_ANALYSIS_HARDWARE_H
#define FSDP_ANALYSIS_HARDWARE_H

#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Runtime/Accounting.h"

#include "llvm/Support/Error.h"

#include <string>

namespace fsdp::sim {

/// Where the ranks of one communicating group sit.
struct Placement {
  /// Ranks in the group.
  int64_t ranks = 1;
  /// Of them, the ranks on one node.
  int64_t perNode = 1;
  bool crossesNodes() const { return perNode < ranks; }
};

/// The group over the mesh axes in `mask` (bit i: axis i of `sizes`), with
/// ranks numbered row-major over the mesh (the last axis fastest) and
/// `gpusPerNode` consecutive ranks per node.
Placement place(llvm::ArrayRef<int64_t> sizes, uint32_t mask,
                int64_t gpusPerNode);

struct Hardware {
  std::string name;
  /// Dense peak FLOP/s per element type.
  double peakBf16 = 0, peakF16 = 0, peakF32 = 0;
  double hbmBytesPerS = 0;
  /// Achieved fraction of peak: matmul and attention FLOPs, memory bytes.
  double matmulEfficiency = 0, attentionForwardEfficiency = 0,
         attentionBackwardEfficiency = 0, memoryEfficiency = 0;
  /// The shortest time any kernel takes.
  double kernelLatencyS = 0;
  int64_t gpusPerNode = 1;
  /// NVLink: bus bandwidth of ring collectives and of all-reduce (NVLink
  /// SHARP), and the latency of one ring step.
  double nvlinkBusBytesPerS = 0, nvlinkAllReduceBusBytesPerS = 0,
         nvlinkLatencyS = 0;
  /// The network: bandwidth of one GPU's NIC, latency of one step.
  double networkBytesPerSPerGpu = 0, networkLatencyS = 0;
  /// The GPU's link to host memory (PCIe), for CPU offload: bandwidth per
  /// direction and latency of one transfer; 0 when the model has none.
  double hostLinkBytesPerS = 0, hostLinkLatencyS = 0;
  /// The host's cores, for CPU offload's optimizer: the memory bandwidth
  /// one GPU's process gets (the node's share), and the latency of one
  /// call queued on the stream; 0 when the model has none.
  double hostCpuBytesPerS = 0, hostCpuLatencyS = 0;

  /// The dense peak for FLOPs in `element`.
  double peakFlops(mlir::Type element) const;
  /// The seconds an op of `cost` takes on the compute stream.
  double seconds(const nn::OpCost &cost) const;
  /// The seconds a collective of `kind` takes over `group`, for `bytes` as
  /// nccl-tests counts them (all-gather: the gathered result; the others:
  /// the input).
  double seconds(accounting::Collective kind, double bytes,
                 Placement group) const;
  /// The seconds moving `bytes` over the host link takes.
  double hostSeconds(double bytes) const {
    return bytes > 0 ? hostLinkLatencyS + bytes / hostLinkBytesPerS : 0;
  }
  /// The seconds the host's cores take to stream `bytes` of host memory.
  double hostCpuSeconds(double bytes) const {
    return bytes > 0 ? hostCpuLatencyS + bytes / hostCpuBytesPerS : 0;
  }
};

/// Reads a hardware model from JSON `text`; errors name `file` and the field.
llvm::Expected<Hardware> parseHardware(llvm::StringRef text,
                                       llvm::StringRef file);

} // namespace fsdp::sim

#endif // FSDP_ANALYSIS_HARDWARE_H

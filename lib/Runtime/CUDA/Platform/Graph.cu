//===- Graph.cu - Recording a step as a CUDA graph and replaying it -------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// One recording per process: the step. Capture runs in thread-local mode on
// the compute stream; the communication streams join it through the events
// a collective's start and wait record, as they do outside a capture. The
// buffers allocated while capturing come from the stream-ordered allocator
// and become the graph's own allocations, with fixed addresses; those the
// step keeps (its outputs) are freed and allocated again at each launch
// (cudaGraphInstantiateFlagAutoFreeOnLaunch). Timing events are off while
// capturing: a captured event cannot be timed.
//
//===----------------------------------------------------------------------===//

#include "../Internal.cuh"

#include <string>

using namespace fsdp::rt::cuda;

namespace {
struct StepGraph {
  bool recording = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
};

StepGraph &stepGraph() {
  static StepGraph graph;
  return graph;
}
} // namespace

bool fsdp::rt::cuda::recordingGraph() { return stepGraph().recording; }

int fsdp_rt_graph_supported(void) { return 1; }

void fsdp_rt_graph_begin(void) {
  StepGraph &g = stepGraph();
  if (g.recording || g.exec)
    fail("fsdp_rt_graph_begin", "the step is already recorded");
  // The memory the eager steps freed goes back to the device before the
  // graph allocates its own.
  cudaStream_t s = streamOf(nullptr);
  countHostSync();
  check(cudaStreamSynchronize(s), "fsdp_rt_graph_begin");
  trimPool();
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
        "fsdp_rt_graph_begin");
  g.recording = true;
}

void fsdp_rt_graph_end(void) {
  StepGraph &g = stepGraph();
  if (!g.recording)
    fail("fsdp_rt_graph_end", "no recording was started");
  g.recording = false;
  cudaError_t err = cudaStreamEndCapture(streamOf(nullptr), &g.graph);
  if (err != cudaSuccess)
    fail("fsdp_rt_graph_end",
         (std::string("the step could not be recorded: ") +
          cudaGetErrorString(err) +
          " (a call waited for the device, or queued work on a stream that "
          "does not wait on the compute stream)")
             .c_str());
  check(cudaGraphInstantiateWithFlags(&g.exec, g.graph,
                                      cudaGraphInstantiateFlagAutoFreeOnLaunch),
        "fsdp_rt_graph_end");
  check(cudaGraphUpload(g.exec, streamOf(nullptr)), "fsdp_rt_graph_end");
}

void fsdp_rt_graph_destroy(void) {
  StepGraph &g = stepGraph();
  if (g.recording)
    fail("fsdp_rt_graph_destroy", "the step is being recorded");
  if (!g.exec)
    return;
  countHostSync();
  check(cudaStreamSynchronize(streamOf(nullptr)), "fsdp_rt_graph_destroy");
  check(cudaGraphExecDestroy(g.exec), "fsdp_rt_graph_destroy");
  check(cudaGraphDestroy(g.graph), "fsdp_rt_graph_destroy");
  g.exec = nullptr;
  g.graph = nullptr;
}

void fsdp_rt_graph_launch(void) {
  StepGraph &g = stepGraph();
  if (!g.exec)
    fail("fsdp_rt_graph_launch", "no step is recorded");
  check(cudaGraphLaunch(g.exec, streamOf(nullptr)), "fsdp_rt_graph_launch");
}

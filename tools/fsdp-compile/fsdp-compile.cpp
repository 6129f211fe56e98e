//===- fsdp-compile.cpp - One command from graph to executable ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// graph.json (or .mlir) -> per-rank program -> C++ through EmitC -> an
// executable linked against the runtime, which runs under mpirun. The flags
// set fsdp::compileProgram's options (fsdp/Compiler.h), which does the work.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Compiler.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;
namespace cl = llvm::cl;

/// The only options --help lists: the LLVM library this tool links
/// registers hundreds of its own (code generation for other targets).
static cl::OptionCategory category("fsdp-compile options");

static cl::opt<std::string> inputFile(cl::Positional, cl::cat(category),
                                      cl::desc("<graph.json or .mlir>"),
                                      cl::Required);
static cl::opt<std::string> outputFile("o", cl::cat(category),
                                       cl::desc("Executable to write"),
                                       cl::value_desc("file"),
                                       cl::init("a.out"));
static cl::opt<std::string>
    emitSource("emit-source", cl::cat(category),
               cl::desc("Also keep the generated C++ in this file"),
               cl::value_desc("file"));
static cl::opt<std::string>
    meshSpec("mesh", cl::cat(category),
             cl::desc("Replicated mesh the program runs on, e.g. dp=4 "
                      "(default: one rank)"),
             cl::value_desc("axis=size,..."));
static cl::opt<std::string>
    passes("passes", cl::cat(category),
           cl::desc("Passes to run before lowering, as a pass pipeline, e.g. "
                    "'fsdp-build-train-step{optimizer=adamw lr=1e-3}'"),
           cl::value_desc("pipeline"));
static cl::opt<std::string> parallelConfig(
    "parallel", cl::cat(category),
    cl::desc("parallel.json: mesh sizes, FSDP2Config fields and tp_plan "
             "(docs/parallel-config.md)"),
    cl::value_desc("file"));
static cl::opt<int64_t>
    worldSize("world-size", cl::cat(category),
              cl::desc("Ranks the program runs on (default: the smallest "
                       "world the parallel config allows)"),
              cl::init(0));
static cl::opt<int64_t> tpSize("tp", cl::cat(category),
                               cl::desc("Tensor-parallel size (overrides the "
                                        "config's tp_size)"),
                               cl::init(0));
static cl::opt<bool>
    sequenceParallel("sequence-parallel", cl::cat(category),
                     cl::desc("Sequence parallelism (overrides the config's "
                              "sequence_parallel)"));
static cl::opt<bool>
    strictPlan("strict-plan", cl::cat(category),
               cl::desc("A tp_plan key that matches no module is an error"));
static cl::opt<bool> vocabUnits(
    "fsdp-vocab-units", cl::cat(category),
    cl::desc("FSDP: trainable untied vocabulary tables get their own units"));
static cl::opt<bool> report(
    "report", cl::cat(category),
    cl::desc("Print the tensor-parallel plan, the communication of one "
             "step (per collective and mesh-axis group) and the memory one "
             "rank holds, as tables"));
static cl::opt<std::string>
    reportJson("report-json", cl::cat(category),
               cl::desc("Write the plan, communication and memory reports "
                        "as one JSON object here"),
               cl::value_desc("file"));
static cl::opt<std::string> simulate(
    "simulate", cl::cat(category),
    cl::desc("Predict the step's time, exposed communication, MFU and "
             "tokens/s per GPU on this hardware model (docs/simulator.md; "
             "docs/hardware/ has H100 and H200)"),
    cl::value_desc("hardware.json"));
static cl::opt<std::string>
    traceFile("trace", cl::cat(category),
              cl::desc("With --simulate: write the predicted step as a "
                       "Chrome/Perfetto trace (JSON) here"),
              cl::value_desc("file"));
static cl::opt<int64_t> documentLength(
    "document-length", cl::cat(category), cl::init(0),
    cl::desc("Packed rows: the documents' length in tokens (the "
             "length-weighted mean E[len^2]/E[len] of the corpus) that the "
             "cost model and --simulate take for packed attention"),
    cl::value_desc("tokens"));
static cl::opt<bool> sourceOnly("source-only", cl::cat(category),
                                cl::desc("Stop after writing --emit-source"));
static cl::opt<std::string> hostCompiler(
    "cxx", cl::cat(category),
    cl::desc("C++ compiler, an MPI wrapper (default: the one the build found)"),
    cl::value_desc("compiler"));
static cl::opt<std::string>
    target("target", cl::cat(category),
           cl::desc("Runtime to link: cpu (oneDNN kernels, MPI collectives; "
                    "default) or cuda (CUDA kernels, NCCL collectives)"),
           cl::value_desc("cpu|cuda"), cl::init("cpu"));
static cl::opt<bool>
    noMpi("no-mpi", cl::cat(category),
          cl::desc("With --target cuda: a one-process program that needs "
                   "no MPI library or mpirun"));
static cl::opt<bool>
    sanitize("sanitize", cl::cat(category),
             cl::desc("Build the program against the CPU runtime compiled "
                      "with AddressSanitizer and UndefinedBehaviorSanitizer; "
                      "the first report ends the run"));
static cl::opt<std::string> maxCpuIsa(
    "max-cpu-isa", cl::cat(category),
    cl::desc("The most the CPU kernels use: all (the best the machine has; "
             "default) or avx2 (no AVX-512, so machines with and without it "
             "compute the same bits); default: $FSDP_MAX_CPU_ISA, else all"),
    cl::value_desc("all|avx2"));
static cl::opt<bool> verbose("v", cl::cat(category),
                             cl::desc("Print the compiler command"));
static cl::opt<bool> schedule(
    "schedule", cl::cat(category),
    cl::desc("Overlap FSDP's collectives with compute (fsdp-schedule after "
             "--passes): all-gathers start units ahead, gradient syncs are "
             "waited later (default; --schedule=false keeps every "
             "collective synchronous)"),
    cl::init(true));
static cl::opt<bool> outlineLayers(
    "outline-layers", cl::cat(category),
    cl::desc("Emit the code that repeats per layer once, as functions "
             "(default; --outline-layers=false emits every layer inline)"),
    cl::init(true));
static cl::opt<bool> memoryPlan(
    "memory-plan", cl::cat(category),
    cl::desc("Place the step's device buffers at offsets the compiler plans "
             "in one arena, which the runtime allocates once (default; "
             "--memory-plan=false allocates each buffer from the pool)"),
    cl::init(true));

static cl::opt<std::string> offloadOptimizer(
    "offload-optimizer", cl::cat(category),
    cl::desc("Under the config's offload_policy, where the optimizer runs: "
             "cpu (the host's cores, as FSDP2; default) or gpu (kernels "
             "reading pinned host memory over the link)"),
    cl::value_desc("cpu|gpu"), cl::init("cpu"));

static LogicalResult run() {
  std::unique_ptr<MLIRContext> context = fsdp::createContext();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, context.get());

  fsdp::CompileOptions compile;
  compile.input = inputFile;
  compile.mesh = meshSpec;
  compile.output = outputFile;
  compile.source = emitSource;
  compile.sourceOnly = sourceOnly;
  compile.documentLength = documentLength;
  compile.hostCompiler = hostCompiler;
  compile.target = target;
  compile.mpi = !noMpi;
  compile.sanitize = sanitize;
  compile.maxCpuIsa = maxCpuIsa;
  if (verbose)
    compile.commandLog = &llvm::errs();
  compile.programName = "fsdp-compile";

  fsdp::PipelineOptions options;
  options.config = parallelConfig;
  options.worldSize = worldSize;
  options.tp = tpSize;
  if (sequenceParallel.getNumOccurrences())
    options.sequenceParallel =
        sequenceParallel ? fsdp::FromConfig::True : fsdp::FromConfig::False;
  options.strictPlan = strictPlan;
  options.vocabUnits = vocabUnits;
  options.step = passes;
  options.report = report;
  options.reportJson = reportJson;
  options.outlineLayers = outlineLayers;
  options.memoryPlan = memoryPlan;
  options.offloadOptimizer = offloadOptimizer;
  options.schedule = schedule;
  options.simulate = simulate;
  options.trace = traceFile;
  return fsdp::compileProgram(*context, sourceMgr, compile, options,
                              llvm::errs());
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "fsdp-compile: graph.json or MLIR to an executable per-rank program\n");
  return failed(run()) ? 1 : 0;
}

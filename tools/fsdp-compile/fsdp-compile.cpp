//===- fsdp-compile.cpp - One command from graph to executable ------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// graph.json (or .mlir) -> per-rank program -> C++ through EmitC -> an
// executable linked against the runtime, which runs under mpirun.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Import/GraphImport.h"
#include "fsdp/InitAll.h"
#include "fsdp/Transforms/Pipeline.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::opt<std::string>
    inputFile(cl::Positional, cl::desc("<graph.json or .mlir>"), cl::Required);
static cl::opt<std::string> outputFile("o", cl::desc("Executable to write"),
                                       cl::value_desc("file"),
                                       cl::init("a.out"));
static cl::opt<std::string>
    emitSource("emit-source",
               cl::desc("Also keep the generated C++ in this file"),
               cl::value_desc("file"));
static cl::opt<std::string>
    meshSpec("mesh",
             cl::desc("Replicated mesh the program runs on, e.g. dp=4 "
                      "(default: one rank)"),
             cl::value_desc("axis=size,..."));
static cl::opt<std::string>
    passes("passes",
           cl::desc("Passes to run before lowering, as a pass pipeline, e.g. "
                    "'fsdp-build-train-step{optimizer=adamw lr=1e-3}'"),
           cl::value_desc("pipeline"));
static cl::opt<std::string> parallelConfig(
    "parallel",
    cl::desc("parallel.json: mesh sizes, FSDP2Config fields and tp_plan "
             "(docs/parallel-config.md)"),
    cl::value_desc("file"));
static cl::opt<int64_t>
    worldSize("world-size",
              cl::desc("Ranks the program runs on (default: the smallest "
                       "world the parallel config allows)"),
              cl::init(0));
static cl::opt<int64_t> tpSize("tp",
                               cl::desc("Tensor-parallel size (overrides the "
                                        "config's tp_size)"),
                               cl::init(0));
static cl::opt<bool>
    sequenceParallel("sequence-parallel",
                     cl::desc("Sequence parallelism (overrides the config's "
                              "sequence_parallel)"));
static cl::opt<bool>
    strictPlan("strict-plan",
               cl::desc("A tp_plan key that matches no module is an error"));
static cl::opt<bool> vocabUnits(
    "fsdp-vocab-units",
    cl::desc("FSDP: trainable untied vocabulary tables get their own units"));
static cl::opt<bool> report(
    "report",
    cl::desc("Print the tensor-parallel plan, the communication of one "
             "step (per collective and mesh-axis group) and the memory one "
             "rank holds, as tables"));
static cl::opt<std::string>
    reportJson("report-json",
               cl::desc("Write the communication report as JSON here"),
               cl::value_desc("file"));
static cl::opt<std::string> simulate(
    "simulate",
    cl::desc("Predict the step's time, exposed communication, MFU and "
             "tokens/s per GPU on this hardware model (docs/simulator.md; "
             "docs/hardware/ has H100 and H200)"),
    cl::value_desc("hardware.json"));
static cl::opt<std::string>
    traceFile("trace",
              cl::desc("With --simulate: write the predicted step as a "
                       "Chrome/Perfetto trace (JSON) here"),
              cl::value_desc("file"));
static cl::opt<bool> sourceOnly("source-only",
                                cl::desc("Stop after writing --emit-source"));
static cl::opt<std::string>
    hostCompiler("cxx", cl::desc("C++ compiler (an MPI wrapper)"),
                 cl::init(FSDP_HOST_CXX));
static cl::opt<bool> verbose("v", cl::desc("Print the compiler command"));
static cl::opt<bool> schedule(
    "schedule",
    cl::desc("Overlap FSDP's collectives with compute (fsdp-schedule after "
             "--passes): all-gathers start units ahead, gradient syncs are "
             "waited later (default; --schedule=false keeps every "
             "collective synchronous)"),
    cl::init(true));
static cl::opt<bool> outlineLayers(
    "outline-layers",
    cl::desc("Emit the code that repeats per layer once, as functions "
             "(default; --outline-layers=false emits every layer inline)"),
    cl::init(true));

/// Reports `message` about the command line and fails.
static LogicalResult usageError(const Twine &message) {
  llvm::errs() << "fsdp-compile: error: " << message << "\n";
  return failure();
}

/// Parses `--mesh a=2,b=3` into a dist.mesh at the top of `module`.
static LogicalResult addMesh(ModuleOp module) {
  if (meshSpec.empty())
    return success();
  if (!module.getOps<fsdp::dist::MeshOp>().empty())
    return usageError("--mesh given, but the input already has a dist.mesh");
  OpBuilder builder(module.getContext());
  SmallVector<Attribute> axes;
  SmallVector<int64_t> sizes;
  SmallVector<StringRef> entries;
  StringRef(meshSpec).split(entries, ',');
  for (StringRef entry : entries) {
    auto [name, size] = entry.split('=');
    int64_t value;
    if (name.trim().empty() || size.trim().getAsInteger(10, value) || value < 1)
      return usageError("--mesh: expected axis=size with size >= 1, got '" +
                        entry + "'");
    axes.push_back(builder.getStringAttr(name.trim()));
    sizes.push_back(value);
  }
  builder.setInsertionPointToStart(module.getBody());
  auto mesh = fsdp::dist::MeshOp::create(
      builder, module.getLoc(), "mesh", builder.getArrayAttr(axes),
      builder.getDenseI64ArrayAttr(sizes), DictionaryAttr());
  return verify(mesh);
}

/// Loads graph.json or MLIR text; the buffer stays in `sourceMgr` so that
/// diagnostics can quote it.
static OwningOpRef<ModuleOp> load(MLIRContext &context,
                                  llvm::SourceMgr &sourceMgr) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(inputFile, &error);
  if (!buffer) {
    llvm::errs() << "fsdp-compile: error: " << error << "\n";
    return {};
  }
  unsigned id = sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  if (StringRef(inputFile).ends_with(".json"))
    return fsdp::importGraph(sourceMgr.getMemoryBuffer(id)->getBuffer(),
                             inputFile, &context);
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

/// Writes `text` to `path`.
static LogicalResult writeFile(StringRef path, StringRef text) {
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file)
    return usageError(error);
  file->os() << text;
  file->keep();
  return success();
}

/// Runs the host compiler on `source`, linking the runtime. The program is
/// straight-line calls into the runtime, where all the arithmetic is (built
/// optimized): optimizing the calls gains nothing measurable and costs the
/// most of the compile (Llama-3.1-70B on 64 ranks: 131 s and 24 GB at -O2,
/// 3 s and 0.4 GB at -O0, for the same program).
static LogicalResult compileAndLink(StringRef source) {
  auto cxx = llvm::sys::findProgramByName(hostCompiler);
  if (!cxx)
    return usageError("cannot find the C++ compiler '" + hostCompiler + "'");
  SmallVector<std::string> args = {*cxx,
                                   "-std=c++17",
                                   "-O0",
                                   "-I" FSDP_RUNTIME_INCLUDE_DIR,
                                   source.str(),
                                   FSDP_RUNTIME_MAIN_LIB,
                                   FSDP_RUNTIME_HOST_LIB,
                                   FSDP_RUNTIME_CPU_LIB,
                                   "-ldnnl",
                                   "-fopenmp",
                                   "-lpthread",
                                   "-o",
                                   outputFile};
  SmallVector<StringRef> argRefs(args.begin(), args.end());
  if (verbose) {
    llvm::interleave(argRefs, llvm::errs(), " ");
    llvm::errs() << "\n";
  }
  std::string error;
  int rc =
      llvm::sys::ExecuteAndWait(*cxx, argRefs, std::nullopt, {}, 0, 0, &error);
  if (rc != 0)
    return usageError("the C++ compiler failed (exit " + Twine(rc) + ")" +
                      (error.empty() ? "" : ": " + error) +
                      "; rerun with -v to see the command");
  return success();
}

static LogicalResult run() {
  DialectRegistry registry;
  fsdp::registerAllDialects(registry);
  fsdp::registerAllPasses();
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // Errors name the file, node or op; the IR around them is noise here.
  context.printOpOnDiagnostic(false);

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  OwningOpRef<ModuleOp> module = load(context, sourceMgr);
  if (!module || failed(addMesh(*module)) || failed(verify(*module)))
    return failure();

  if (tpSize < 0 || worldSize < 0)
    return usageError(tpSize < 0 ? "--tp must be >= 1, got " + Twine(tpSize)
                                 : "--world-size must be >= 1, got " +
                                       Twine(worldSize));
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
  options.schedule = schedule;
  options.simulate = simulate;
  options.trace = traceFile;
  if (!traceFile.empty() && simulate.empty())
    return usageError("--trace needs --simulate");
  if (options.isParallel() && !meshSpec.empty())
    return usageError("--mesh and the parallel options (--parallel, --tp, "
                      "--sequence-parallel, --world-size) both give a mesh; "
                      "use one");
  PassManager pm(&context);
  if (failed(fsdp::buildPipeline(pm, options)))
    return usageError("--passes: cannot parse '" + passes + "'");
  if (failed(pm.run(*module)))
    return failure();

  std::string cpp;
  llvm::raw_string_ostream os(cpp);
  if (failed(emitc::translateToCpp(*module, os)))
    return failure();

  std::string sourcePath = emitSource;
  llvm::SmallString<128> tempPath;
  if (sourcePath.empty()) {
    if (sourceOnly)
      return usageError("--source-only needs --emit-source");
    int fd;
    if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
            "fsdp-program", "cpp", fd, tempPath))
      return usageError("cannot create a temporary file: " + ec.message());
    llvm::sys::Process::SafelyCloseFileDescriptor(fd);
    sourcePath = tempPath.str().str();
  }
  if (failed(writeFile(sourcePath, cpp)))
    return failure();
  if (sourceOnly)
    return success();
  LogicalResult linked = compileAndLink(sourcePath);
  if (!tempPath.empty())
    llvm::sys::fs::remove(tempPath);
  return linked;
}

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  cl::ParseCommandLineOptions(
      argc, argv,
      "fsdp-compile: graph.json or MLIR to an executable per-rank program\n");
  return failed(run()) ? 1 : 0;
}

//===- Compiler.cpp - The compiler's entry points, graph to executable ----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// What fsdp-compile, the C API and programs that embed the compiler share:
// graph.json (or .mlir) -> per-rank program -> C++ through EmitC -> an
// executable linked against the runtime, which runs under mpirun.
//
//===----------------------------------------------------------------------===//

#include "fsdp/Compiler.h"
#include "fsdp/Dialect/Dist/IR/DistOps.h"
#include "fsdp/Dialect/NN/IR/NNOps.h"
#include "fsdp/Import/GraphImport.h"
#include "fsdp/InitAll.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cstdlib>

using namespace mlir;

std::unique_ptr<MLIRContext> fsdp::createContext() {
  DialectRegistry registry;
  registerAllDialects(registry);
  // Registering twice is harmless; a step pipeline string needs them.
  registerAllPasses();
  auto context = std::make_unique<MLIRContext>(registry);
  context->loadAllAvailableDialects();
  return context;
}

OwningOpRef<ModuleOp> fsdp::importGraphFile(llvm::StringRef json,
                                            llvm::StringRef fileName,
                                            MLIRContext *context) {
  return importGraph(json, fileName, context);
}

llvm::LogicalResult fsdp::runPipeline(ModuleOp module,
                                      const PipelineOptions &options) {
  PassManager pm(module->getContext());
  if (failed(buildPipeline(pm, options)))
    return failure();
  return pm.run(module);
}

llvm::LogicalResult fsdp::emitProgram(ModuleOp module, llvm::raw_ostream &os) {
  return emitc::translateToCpp(module, os);
}

namespace {

/// Writes errors outside the IR as fsdp-compile always has:
/// "<program>: error: <message>".
struct ErrorReporter {
  llvm::raw_ostream &os;
  StringRef programName;

  LogicalResult operator()(const Twine &message) const {
    if (!programName.empty())
      os << programName << ": ";
    os << "error: " << message << "\n";
    os.flush();
    return failure();
  }
};

/// Parses `spec` ("a=2,b=3") into a dist.mesh at the top of `module`.
LogicalResult addMesh(ModuleOp module, StringRef spec,
                      const ErrorReporter &reportError) {
  if (spec.empty())
    return success();
  if (!module.getOps<fsdp::dist::MeshOp>().empty())
    return reportError("--mesh given, but the input already has a dist.mesh");
  OpBuilder builder(module.getContext());
  SmallVector<Attribute> axes;
  SmallVector<int64_t> sizes;
  SmallVector<StringRef> entries;
  spec.split(entries, ',');
  for (StringRef entry : entries) {
    auto [name, size] = entry.split('=');
    int64_t value;
    if (name.trim().empty() || size.trim().getAsInteger(10, value) || value < 1)
      return reportError("--mesh: expected axis=size with size >= 1, got '" +
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

/// Loads graph.json or MLIR; the buffer stays in `sourceMgr` so that
/// diagnostics can quote it.
OwningOpRef<ModuleOp> load(MLIRContext &context, llvm::SourceMgr &sourceMgr,
                           const fsdp::CompileOptions &options,
                           const ErrorReporter &reportError) {
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  if (options.inputText) {
    buffer =
        llvm::MemoryBuffer::getMemBufferCopy(*options.inputText, options.input);
  } else {
    std::string error;
    buffer = openInputFile(options.input, &error);
    if (!buffer) {
      (void)reportError(error);
      return {};
    }
  }
  unsigned id = sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  if (options.inputText || StringRef(options.input).ends_with(".json"))
    return fsdp::importGraph(sourceMgr.getMemoryBuffer(id)->getBuffer(),
                             options.input, &context);
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

/// Writes `text` to `path`.
LogicalResult writeFile(StringRef path, StringRef text,
                        const ErrorReporter &reportError) {
  std::string error;
  auto file = openOutputFile(path, &error);
  if (!file)
    return reportError(error);
  file->os() << text;
  file->keep();
  return success();
}

/// Reads the world size off the module's mesh before each pass: the lowering
/// to runtime calls erases the mesh, so the last reading is the program's.
struct WorldSizeInstrumentation : public PassInstrumentation {
  explicit WorldSizeInstrumentation(int64_t &worldSize)
      : worldSize(worldSize) {}
  void runBeforePass(Pass *, Operation *op) override {
    if (auto module = dyn_cast<ModuleOp>(op))
      if (fsdp::dist::MeshOp mesh = fsdp::dist::findMesh(module))
        worldSize = mesh.getNumRanks();
  }
  int64_t &worldSize;
};

/// --max-cpu-isa, or else FSDP_MAX_CPU_ISA where it applies (the CPU
/// kernels' optimized build), or else "all"; `from` names the source.
std::string maxCpuIsa(const fsdp::CompileOptions &options,
                      const char **from = nullptr) {
  if (from)
    *from = "--max-cpu-isa";
  if (!options.maxCpuIsa.empty())
    return options.maxCpuIsa;
  const char *env = std::getenv("FSDP_MAX_CPU_ISA");
  if (!env || !*env || options.target != "cpu" || options.sanitize)
    return "all";
  if (from)
    *from = "FSDP_MAX_CPU_ISA";
  return env;
}

/// Fails unless the options name a target this build can link.
LogicalResult checkTarget(const fsdp::CompileOptions &options,
                          const ErrorReporter &reportError) {
  bool cuda = options.target == "cuda";
  if (!cuda && options.target != "cpu")
    return reportError("--target: unknown target '" + options.target +
                       "' (expected cpu or cuda)");
  if (!cuda && !options.mpi)
    return reportError("--no-mpi needs --target cuda (the CPU runtime's "
                       "collectives are MPI)");
  if (options.sanitize && cuda)
    return reportError("--sanitize needs --target cpu (the sanitized runtime "
                       "is the CPU one)");
  const char *isaFrom;
  std::string isa = maxCpuIsa(options, &isaFrom);
  if (isa != "all" && isa != "avx2")
    return reportError(Twine(isaFrom) + ": unknown value '" + isa +
                       "' (expected all or avx2)");
  if (isa != "all" && (cuda || options.sanitize))
    return reportError("--max-cpu-isa=" + isa +
                       " needs --target cpu without --sanitize (it picks the "
                       "CPU kernels' build)");
#ifndef FSDP_RUNTIME_CPU_AVX2_LIB
  if (isa == "avx2")
    return reportError(Twine(isaFrom) +
                       "=avx2: this fsdp-mlir was built without "
                       "the AVX2 runtime (configure with "
                       "-DFSDP_AVX2_RUNTIME=ON on x86-64)");
#endif
#ifndef FSDP_RUNTIME_SANITIZED_LIB
  if (options.sanitize)
    return reportError("--sanitize: this fsdp-mlir was built without the "
                       "sanitized runtime (configure with "
                       "-DFSDP_SANITIZED_RUNTIME=ON)");
#endif
#ifndef FSDP_RUNTIME_CUDA_HOST_LIB
  if (cuda)
    return reportError("--target cuda: this fsdp-mlir was built without the "
                       "CUDA runtime (no CUDA compiler found at configure "
                       "time)");
#endif
  return success();
}

} // namespace

// The program is straight-line calls into the runtime, where all the
// arithmetic is (built optimized): optimizing the calls gains nothing
// measurable and costs the most of the compile (Llama-3.1-70B on 64 ranks:
// 131 s and 24 GB at -O2, 3 s and 0.4 GB at -O0, for the same program).
LogicalResult fsdp::linkProgram(StringRef source, const CompileOptions &options,
                                raw_ostream &errors) {
  ErrorReporter reportError{errors, options.programName};
  if (failed(checkTarget(options, reportError)))
    return failure();
  bool cuda = options.target == "cuda";
  // Without MPI the plain C++ compiler links; the MPI wrapper otherwise.
  std::string compiler = !options.hostCompiler.empty() ? options.hostCompiler
                         : options.mpi                 ? FSDP_HOST_CXX
                                                       : FSDP_PLAIN_CXX;
  auto cxx = llvm::sys::findProgramByName(compiler);
  if (!cxx)
    return reportError("cannot find the C++ compiler '" + compiler + "'");
  SmallVector<std::string> args = {*cxx, "-std=c++17", "-O0",
                                   "-I" FSDP_RUNTIME_INCLUDE_DIR, source.str()};
  if (options.sanitize) {
#ifdef FSDP_RUNTIME_SANITIZED_LIB
    // The flags FSDPRuntimeSanitized is built with (lib/Runtime/Host).
    SmallVector<StringRef> flags;
    StringRef(FSDP_RUNTIME_SANITIZE_FLAGS).split(flags, ' ');
    for (StringRef flag : flags)
      args.push_back(flag.str());
    args.append({FSDP_RUNTIME_SANITIZED_LIB, "-ldnnl", "-fopenmp"});
#endif
  } else if (!cuda) {
    args.append({FSDP_RUNTIME_MAIN_LIB, FSDP_RUNTIME_HOST_LIB});
#ifdef FSDP_RUNTIME_CPU_AVX2_LIB
    if (maxCpuIsa(options) == "avx2")
      args.push_back(FSDP_RUNTIME_CPU_AVX2_LIB);
    else
#endif
      args.append({FSDP_RUNTIME_CPU_LIB, FSDP_RUNTIME_FLOAT_LIB});
    args.append({"-ldnnl", "-fopenmp"});
  } else {
#ifdef FSDP_RUNTIME_CUDA_HOST_LIB
    // The CUDA runtime library links statically; cuBLAS and NCCL are found
    // at run time through the rpath, or LD_LIBRARY_PATH on another machine.
    if (options.mpi)
      args.append({FSDP_RUNTIME_MAIN_LIB, FSDP_RUNTIME_CUDA_HOST_LIB});
    else
      args.append(
          {FSDP_RUNTIME_MAIN_SERIAL_LIB, FSDP_RUNTIME_CUDA_SERIAL_HOST_LIB});
    args.append({FSDP_RUNTIME_CUDA_LIB, FSDP_RUNTIME_FLOAT_LIB,
                 "-L" FSDP_CUDA_LIBRARY_DIR, "-L" FSDP_NCCL_LIBRARY_DIR,
                 "-Wl,-rpath," FSDP_CUDA_LIBRARY_DIR,
                 "-Wl,-rpath," FSDP_NCCL_LIBRARY_DIR, "-lcublas",
                 "-lcudart_static", "-lnccl", "-ldl", "-lrt"});
#endif
  }
  args.append({"-lpthread", "-o", options.output});
  SmallVector<StringRef> argRefs(args.begin(), args.end());
  if (options.commandLog) {
    llvm::interleave(argRefs, *options.commandLog, " ");
    *options.commandLog << "\n";
  }
  std::string error;
  int rc =
      llvm::sys::ExecuteAndWait(*cxx, argRefs, std::nullopt, {}, 0, 0, &error);
  if (rc != 0)
    return reportError("the C++ compiler failed (exit " + Twine(rc) + ")" +
                       (error.empty() ? "" : ": " + error) +
                       "; rerun with -v to see the command");
  return success();
}

FailureOr<fsdp::CompileResult>
fsdp::compileProgram(MLIRContext &context, llvm::SourceMgr &sourceMgr,
                     const CompileOptions &options,
                     const PipelineOptions &pipeline, raw_ostream &errors) {
  // Errors name the file, node or op; the IR around them is noise here.
  context.printOpOnDiagnostic(false);
  ErrorReporter reportError{errors, options.programName};
  OwningOpRef<ModuleOp> module = load(context, sourceMgr, options, reportError);
  if (!module || failed(addMesh(*module, options.mesh, reportError)) ||
      failed(verify(*module)))
    return failure();

  if (pipeline.tp < 0)
    return reportError("--tp must be >= 1, got " + Twine(pipeline.tp));
  if (pipeline.worldSize < 0)
    return reportError("--world-size must be >= 1, got " +
                       Twine(pipeline.worldSize));
  if (!pipeline.trace.empty() && pipeline.simulate.empty())
    return reportError("--trace needs --simulate");
  if (pipeline.isParallel() && !options.mesh.empty())
    return reportError(
        "--mesh and the parallel options (--parallel, --tp, "
        "--sequence-parallel, --world-size) both give a mesh; use one");
  if (pipeline.reportJson == "-")
    return reportError("--report-json needs a file, not -");
  if (options.sourceOnly && options.source.empty())
    return reportError("--source-only needs --emit-source");
  if (options.documentLength < 0)
    return reportError("--document-length must be >= 1, got " +
                       Twine(options.documentLength));
  if (options.documentLength > 0) {
    bool packed = false;
    module->walk([&](nn::AttentionOp op) { packed |= op.getPacked(); });
    if (!packed)
      return reportError("--document-length: the graph has no packed "
                         "attention (fsdp-graphgen --packed)");
    (*module)->setAttr(nn::NNDialect::kDocumentLengthAttrName,
                       IntegerAttr::get(IntegerType::get(&context, 64),
                                        options.documentLength));
  }
  if (failed(checkTarget(options, reportError)))
    return failure();

  PassManager pm(&context);
  CompileResult result;
  pm.addInstrumentation(
      std::make_unique<WorldSizeInstrumentation>(result.worldSize));
  if (failed(buildPipeline(pm, pipeline, errors)))
    return reportError("--passes: cannot parse '" + pipeline.step + "'");
  if (failed(pm.run(*module)))
    return failure();
  if (!options.mpi && result.worldSize != 1)
    return reportError("--no-mpi builds a one-process program, but the mesh "
                       "has " +
                       Twine(result.worldSize) +
                       " ranks; drop --no-mpi and launch it with mpirun");

  std::string cpp;
  llvm::raw_string_ostream os(cpp);
  if (failed(emitc::translateToCpp(*module, os)))
    return failure();

  std::string sourcePath = options.source;
  llvm::SmallString<128> tempPath;
  if (sourcePath.empty()) {
    int fd;
    if (std::error_code ec = llvm::sys::fs::createTemporaryFile(
            "fsdp-program", "cpp", fd, tempPath))
      return reportError("cannot create a temporary file: " + ec.message());
    llvm::sys::Process::SafelyCloseFileDescriptor(fd);
    sourcePath = tempPath.str().str();
  }
  if (failed(writeFile(sourcePath, cpp, reportError)))
    return failure();
  if (options.sourceOnly)
    return result;
  LogicalResult linked = linkProgram(sourcePath, options, errors);
  if (!tempPath.empty())
    llvm::sys::fs::remove(tempPath);
  if (failed(linked))
    return failure();
  return result;
}

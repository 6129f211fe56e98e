//===- Compiler.cpp - The compiler, from C --------------------------------===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//

#include "fsdp-c/Compiler.h"
#include "fsdp/Compiler.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>
#include <cstring>

using namespace mlir;

/// A copy of `text` the caller frees with fsdpStringDestroy.
static FsdpString copyString(llvm::StringRef text) {
  auto *data = static_cast<char *>(std::malloc(text.size() + 1));
  std::memcpy(data, text.data(), text.size());
  data[text.size()] = '\0';
  return {data, text.size()};
}

void fsdpStringDestroy(FsdpString *string) {
  std::free(string->data);
  *string = {nullptr, 0};
}

FsdpCompileOptions fsdpCompileOptionsDefault(void) {
  FsdpCompileOptions options;
  std::memset(&options, 0, sizeof(options));
  options.sequence_parallel = FSDP_SETTING_FROM_CONFIG;
  options.schedule = true;
  return options;
}

FsdpCompileResult fsdpCompile(const FsdpCompileOptions *options) {
  auto text = [](const char *s) { return std::string(s ? s : ""); };
  fsdp::CompileOptions compile;
  compile.input = text(options->input);
  if (options->input_text)
    compile.inputText = options->input_text;
  if (options->output)
    compile.output = options->output;
  compile.source = text(options->source);
  if (options->target)
    compile.target = options->target;
  compile.mpi = !options->no_mpi;

  fsdp::PipelineOptions pipeline;
  pipeline.config = text(options->parallel);
  pipeline.worldSize = options->world_size;
  pipeline.tp = options->tp;
  if (options->sequence_parallel == FSDP_SETTING_ON)
    pipeline.sequenceParallel = fsdp::FromConfig::True;
  else if (options->sequence_parallel == FSDP_SETTING_OFF)
    pipeline.sequenceParallel = fsdp::FromConfig::False;
  pipeline.step = text(options->passes);
  pipeline.schedule = options->schedule;
  pipeline.reportJson = text(options->report_json);

  // The diagnostics and the other errors, in the order they came, as
  // fsdp-compile prints them on stderr.
  std::string diagnostics;
  llvm::raw_string_ostream os(diagnostics);
  std::unique_ptr<MLIRContext> context = fsdp::createContext();
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler handler(sourceMgr, context.get(), os);
  FailureOr<fsdp::CompileResult> result =
      fsdp::compileProgram(*context, sourceMgr, compile, pipeline, os);
  os.flush();
  return {succeeded(result), succeeded(result) ? result->worldSize : 0,
          copyString(diagnostics)};
}

void fsdpCompileResultDestroy(FsdpCompileResult *result) {
  fsdpStringDestroy(&result->diagnostics);
}

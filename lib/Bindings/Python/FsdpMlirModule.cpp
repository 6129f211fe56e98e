//===- FsdpMlirModule.cpp - fsdp_mlir._fsdp_mlir, the C API in Python -----===//
//
// Part of the fsdp-mlir project, under the Apache License v2.0 with LLVM
// Exceptions. SPDX-License-Identifier: Apache-2.0 WITH LLVM-exception
//
//===----------------------------------------------------------------------===//
//
// The native half of the Python package: fsdpCompile (fsdp-c/Compiler.h)
// with keyword arguments. python/fsdp_mlir/compiler.py turns its result into
// `fsdp_mlir.compile()`'s objects and errors.
//
//===----------------------------------------------------------------------===//

#include "fsdp-c/Compiler.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

namespace py = pybind11;

namespace {

/// fsdpCompile with every string option given or None; returns
/// (succeeded, world_size, diagnostics).
py::tuple compile(const std::string &input,
                  const std::optional<std::string> &inputText,
                  const std::optional<std::string> &parallel, int64_t worldSize,
                  int64_t tp, std::optional<bool> sequenceParallel,
                  const std::optional<std::string> &passes, bool schedule,
                  const std::string &output,
                  const std::optional<std::string> &source,
                  const std::optional<std::string> &reportJson,
                  const std::string &target, bool noMpi) {
  auto cString = [](const std::optional<std::string> &s) {
    return s ? s->c_str() : nullptr;
  };
  FsdpCompileOptions options = fsdpCompileOptionsDefault();
  options.input = input.c_str();
  options.input_text = cString(inputText);
  options.parallel = cString(parallel);
  options.world_size = worldSize;
  options.tp = tp;
  if (sequenceParallel)
    options.sequence_parallel =
        *sequenceParallel ? FSDP_SETTING_ON : FSDP_SETTING_OFF;
  options.passes = cString(passes);
  options.schedule = schedule;
  options.output = output.c_str();
  options.source = cString(source);
  options.report_json = cString(reportJson);
  options.target = target.c_str();
  options.no_mpi = noMpi;

  FsdpCompileResult result;
  {
    // The compile runs the host C++ compiler too: seconds other Python
    // threads may use.
    py::gil_scoped_release release;
    result = fsdpCompile(&options);
  }
  py::tuple out = py::make_tuple(
      result.succeeded, result.world_size,
      py::str(result.diagnostics.data, result.diagnostics.length));
  fsdpCompileResultDestroy(&result);
  return out;
}

} // namespace

PYBIND11_MODULE(_fsdp_mlir, m) {
  m.doc() = "fsdp-mlir's compiler (libFsdpMlir.so's C API); use "
            "fsdp_mlir.compile()";
  m.def("compile", &compile, py::kw_only(), py::arg("input"),
        py::arg("input_text") = py::none(), py::arg("parallel") = py::none(),
        py::arg("world_size") = 0, py::arg("tp") = 0,
        py::arg("sequence_parallel") = py::none(),
        py::arg("passes") = py::none(), py::arg("schedule") = true,
        py::arg("output") = "a.out", py::arg("source") = py::none(),
        py::arg("report_json") = py::none(), py::arg("target") = "cpu",
        py::arg("no_mpi") = false,
        "Compiles a graph into an executable as fsdp-compile does; returns "
        "(succeeded, world_size, diagnostics)");
}

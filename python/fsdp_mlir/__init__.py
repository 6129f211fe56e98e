"""fsdp-mlir from Python: export a PyTorch model to the compiler's graph
format (`export`), compile a graph into a distributed training program
(`compile`) and run it under MPI (`run`). docs/python.md has the details."""

import importlib

from .compiler import CompileError, Compiled, compile, run

__all__ = ["CompileError", "Compiled", "ExportError", "compile", "export",
           "run"]


def __getattr__(name):
    # export needs torch (tested: PyTorch 2.15); import it on first use, so that
    # compile and run work without torch. (Its module is `exporter`, so
    # that no submodule shadows the function.)
    if name in ("export", "ExportError"):
        module = importlib.import_module(".exporter", __name__)
        globals().update(export=module.export, ExportError=module.ExportError)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

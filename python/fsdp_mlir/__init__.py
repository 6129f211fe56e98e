"""fsdp-mlir from Python: export a PyTorch model to the compiler's graph
format (`export`); the compiler itself runs as `fsdp-compile`."""

from .export import ExportError, export

__all__ = ["ExportError", "export"]

"""Compile a graph into a distributed training program, and run it.

`compile()` is fsdp-compile in-process: libFsdpMlir.so's C API
(include/fsdp-c/Compiler.h) through the native module `_fsdp_mlir`, which
the build puts in build/python_packages/fsdp_mlir (and `pip install ./python`
installs). It returns the executable with the compiler's reports as Python
objects. `run()` starts the executable under mpirun.
"""

import json
import os
import subprocess
import tempfile
import warnings


class CompileError(Exception):
    """The compiler rejected its input. The message is its diagnostics, as
    fsdp-compile prints them: the file, line and column, the node, field or
    op, and what is wrong."""


class Compiled:
    """A compiled program.

    executable      path of the program, which runs under mpirun (or
                    alone, when compiled with mpi=False)
    world_size      the ranks it runs on (mpirun -np)
    target          "cpu" or "cuda"
    mpi             whether it runs under mpirun
    plan            the tensor-parallel plan (a dict; None when tp is 1)
    communication   the collectives of one step per kind and mesh-axis group
    memory          the bytes one rank holds in one step
    source          where the generated C++ was kept, or None
    diagnostics     the compiler's warnings ("" when none)

    The reports are fsdp-compile --report-json's members (docs/python.md).
    An executable compiled without `output=` lives in a temporary directory
    that goes with this object.
    """

    def __init__(self, executable, world_size, reports, source, diagnostics,
                 keep=None, target="cpu", mpi=True):
        self.executable = executable
        self.world_size = world_size
        self.target = target
        self.mpi = mpi
        self.plan = reports["plan"]
        self.communication = reports["communication"]
        self.memory = reports["memory"]
        self.source = source
        self.diagnostics = diagnostics
        self._keep = keep

    def __repr__(self):
        return (f"Compiled(executable={self.executable!r}, "
                f"world_size={self.world_size})")


def _native():
    """The native module; imported on first use, so that the package's
    pure-Python parts (export) work from a source tree without a build."""
    try:
        from . import _fsdp_mlir
    except ImportError as e:
        raise ImportError(
            "fsdp_mlir's native module _fsdp_mlir is missing: build the "
            "project (ninja -C build) and put build/python_packages on "
            "PYTHONPATH, or pip install ./python") from e
    return _fsdp_mlir


def _size(name, value):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CompileError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def compile(graph, parallel=None, passes=None, target="cpu", output=None,
            world_size=None, tp=None, sequence_parallel=None, schedule=True,
            source=None, mpi=True):
    """Compiles `graph` into an executable, as fsdp-compile does.

    graph              a graph.json (or .mlir) path, or the dict `export()`
                       returns
    parallel           a parallel.json path or a dict of its fields
                       (docs/parallel-config.md)
    passes             passes run on the per-rank program, e.g.
                       "fsdp-build-train-step{lr=1e-3}"
    target             "cpu" (oneDNN kernels, MPI collectives) or "cuda"
                       (CUDA kernels, NCCL collectives)
    output             the executable's path (default: a temporary file that
                       lives as long as the returned object)
    world_size, tp     override the config's sizes
    sequence_parallel  True or False overrides the config's
    schedule           overlap FSDP's collectives with compute
    source             also keep the generated C++ here
    mpi                False (cuda only): a one-process program that needs
                       no MPI library or mpirun

    Returns a `Compiled`; raises `CompileError` with the compiler's
    diagnostics when the graph, the config or an option is wrong.
    """
    if target not in ("cpu", "cuda"):
        raise CompileError(f"target must be 'cpu' or 'cuda', got {target!r}")
    if not mpi and target != "cuda":
        raise CompileError("mpi=False needs target='cuda' (the CPU runtime's "
                           "collectives are MPI)")
    if sequence_parallel not in (None, True, False):
        raise CompileError("sequence_parallel must be None, True or False, "
                           f"got {sequence_parallel!r}")
    options = {"world_size": _size("world_size", world_size),
               "tp": _size("tp", tp),
               "sequence_parallel": sequence_parallel,
               "passes": passes, "schedule": bool(schedule),
               "target": target, "no_mpi": not mpi}
    if isinstance(graph, dict):
        # Diagnostics name it <graph>, at lines of this text.
        options["input"] = "<graph>"
        options["input_text"] = json.dumps(graph, indent=1)
    else:
        options["input"] = os.fspath(graph)
    if source is not None:
        options["source"] = os.path.abspath(os.fspath(source))
    keep = None
    if output is None:
        keep = tempfile.TemporaryDirectory(prefix="fsdp-mlir-")
        output = os.path.join(keep.name, "program")
    options["output"] = os.path.abspath(os.fspath(output))

    with tempfile.TemporaryDirectory(prefix="fsdp-mlir-") as work:
        config = None
        if isinstance(parallel, dict):
            config = os.path.join(work, "parallel.json")
            with open(config, "w") as f:
                json.dump(parallel, f, indent=1)
            options["parallel"] = config
        elif parallel is not None:
            options["parallel"] = os.fspath(parallel)
        options["report_json"] = os.path.join(work, "report.json")

        ok, ranks, diagnostics = _native().compile(**options)
        if config:
            # The file is gone when the caller reads the message.
            diagnostics = diagnostics.replace(config, "<parallel>")
        if not ok:
            raise CompileError(diagnostics.strip() or "the compile failed")
        if diagnostics:
            warnings.warn(diagnostics.strip(), stacklevel=2)
        with open(options["report_json"]) as f:
            reports = json.load(f)
    return Compiled(options["output"], ranks, reports, options.get("source"),
                    diagnostics, keep, target, bool(mpi))


def run(compiled_or_path, np=None, args=(), mpirun="mpirun", check=True,
        **kwargs):
    """Runs a compiled program under MPI: `mpirun -np N program args...`
    (a program compiled with mpi=False runs alone: `program args...`).

    compiled_or_path  a `Compiled`, or an executable's path (then `np` is
                      needed)
    np                ranks (default: the compiled world size)
    args              the program's arguments, e.g. ("--steps", 3)
    check             raise subprocess.CalledProcessError on a non-zero exit

    Other keyword arguments go to subprocess.run; unless stdout or stderr is
    given there, both are captured as text. Returns the
    subprocess.CompletedProcess.
    """
    if isinstance(compiled_or_path, Compiled):
        executable = compiled_or_path.executable
        if np is None:
            np = compiled_or_path.world_size
    else:
        executable = os.fspath(compiled_or_path)
        if np is None:
            raise ValueError("run: np is needed with an executable's path")
    if isinstance(compiled_or_path, Compiled) and not compiled_or_path.mpi:
        command = [executable]
    else:
        # Open MPI refuses more ranks than cores, and root, unless told.
        command = [mpirun, "--oversubscribe"]
        if os.geteuid() == 0:
            command.append("--allow-run-as-root")
        command += ["-np", str(np), executable]
    command += [str(a) for a in args]
    if "stdout" not in kwargs and "stderr" not in kwargs:
        kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(command, check=check, **kwargs)

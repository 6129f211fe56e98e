"""A model export pipeline's whole path through the Python package, as a
user writes it: fsdp_mlir.export a PyTorch model, fsdp_mlir.compile the
graph dict with a parallel config dict, fsdp_mlir.run it under mpirun.
Prints the plan's entries, the memory estimate and the losses. Needs the
built package on PYTHONPATH (build/python_packages).

    env PYTHONPATH=BUILD/python_packages TORCH_PYTHON pipeline.py
        CONFIG.json --parallel PARALLEL.json --world-size N --out EXE
        [--factory FILE.py:FUNC] [--steps 2] [--graph-out GRAPH.json]
        [--tool EXE]

With --tool, EXE (fsdp-compile's program from GRAPH.json, the same
options) runs too, and its losses must equal the pipeline's to the bit.
"""

import argparse
import json
import os
import sys

import fsdp_mlir

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_model import build_model  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("--parallel", required=True)
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--factory")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--graph-out")
    p.add_argument("--tool")
    args = p.parse_args()
    import torch
    model, vocab, name = build_model(args.config, args.factory)
    ids = torch.randint(0, vocab, (2, 16))
    graph = fsdp_mlir.export(model, {
        "input_ids": ids, "position_ids": torch.arange(16).repeat(2, 1)},
        model_name=name)
    if args.graph_out:
        with open(args.graph_out, "w") as f:
            json.dump(graph, f, indent=1)
        return
    with open(args.parallel) as f:
        parallel = json.load(f)
    compiled = fsdp_mlir.compile(graph, parallel=parallel,
                                 world_size=args.world_size,
                                 passes="fsdp-build-train-step{lr=0.01}",
                                 output=args.out)
    print(f"compiled for {compiled.world_size} ranks: "
          f"{os.path.basename(compiled.executable)}")
    for entry in compiled.plan["entries"]:
        print(f"plan: {entry['entry']} {entry['style']} "
              f"{entry['modules']} modules")
    print(f"memory: estimated peak {compiled.memory['estimated_peak']} bytes")
    steps = ("--steps", str(args.steps))
    losses = _losses(fsdp_mlir.run(compiled, args=steps))
    for step, loss in enumerate(losses):
        print(f"step {step} loss {loss}")
    if args.tool:
        tool = _losses(fsdp_mlir.run(args.tool, np=args.world_size,
                                     args=steps))
        print("fsdp-compile's program: " +
              ("same losses" if tool == losses else f"losses {tool}"))


def _losses(result):
    """The loss each `step N loss X time ...` line reports, as printed."""
    return [line.split()[3] for line in result.stdout.splitlines()
            if line.startswith("step ") and " loss " in line]


if __name__ == "__main__":
    main()

"""Calls fsdp_mlir.compile with the keyword arguments in the JSON object
KWARGS (`graph` a path, or with --graph-dict the dict in that file) and
prints the world size; with --run N, then runs the program on N ranks for
a step (a failed run prints the program's stderr). An error propagates:
Python prints it and exits 1.

    %fsdp_python compile_args.py KWARGS [--graph-dict] [--run N]
"""

import argparse
import json
import subprocess

import fsdp_mlir


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kwargs", type=json.loads)
    parser.add_argument("--graph-dict", action="store_true")
    parser.add_argument("--run", type=int)
    args = parser.parse_args()
    kwargs = args.kwargs
    if args.graph_dict:
        with open(kwargs["graph"]) as f:
            kwargs["graph"] = json.load(f)
    compiled = fsdp_mlir.compile(**kwargs)
    print(f"world size {compiled.world_size}")
    if args.run:
        try:
            result = fsdp_mlir.run(compiled, np=args.run, args=("--steps", 1))
        except subprocess.CalledProcessError as e:
            print(e.stderr)
            raise
        print(result.stdout, end="")


if __name__ == "__main__":
    main()

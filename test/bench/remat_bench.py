"""Activation checkpointing benchmark: one training step of a model whose
activations dominate, compiled without checkpointing, selective and full,
on 1 rank and on 2 (dp_shard 2), f32. Runs are interleaved, so machine
noise hits every variant alike; prints the median step time, its ratio to
no checkpointing, and the peak memory the runtime measured (with the
static report's estimate, which must equal it).

    /usr/bin/python3 test/bench/remat_bench.py --bin-dir build/bin \\
        --config test/bench/small-llama.json --batch 4 --seq 256 --rounds 3
"""

import json
import os
import re
import statistics
import sys

import benchutil
from benchutil import F32, run

MODES = ["none", "selective", "full"]


def main():
    parser = benchutil.parser(__doc__, batch=4, seq=256, steps=3)
    args = parser.parse_args()
    tmp, graph = benchutil.graph(args, "remat-bench-")
    variants = []
    for ranks in (1, 2):
        for mode in MODES:
            parallel = os.path.join(tmp, f"{mode}.json")
            json.dump(dict(F32, activation_checkpointing=mode != "none" and
                           mode), open(parallel, "w"))
            exe = os.path.join(tmp, f"{mode}-{ranks}")
            out = run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                       "--parallel", parallel, "--world-size", str(ranks),
                       "--passes=fsdp-build-train-step", "--report",
                       "-o", exe])
            estimate = int(re.search(r"^estimated peak\s+(\d+)", out,
                                     re.M).group(1))
            variants.append((ranks, mode, exe, estimate))
    times = {v[:2]: [] for v in variants}
    measured = {}
    for _ in range(args.rounds):
        for ranks, mode, exe, _ in variants:
            out = run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", str(ranks), exe, "--steps", str(args.steps),
                       "--report"])
            times[(ranks, mode)] += benchutil.step_times(out)
            measured[(ranks, mode)] = int(
                re.search(r"peak (\d+) bytes", out).group(1))
    print(f"{'ranks':>5} {'checkpointing':>13} {'step ms':>9} {'vs none':>8} "
          f"{'measured peak':>14} {'estimate':>12}")
    for ranks, mode, _, estimate in variants:
        t = statistics.median(times[(ranks, mode)])
        base = statistics.median(times[(ranks, "none")])
        print(f"{ranks:5} {mode:>13} {t:9.1f} {base / t:8.3f} "
              f"{measured[(ranks, mode)]:14} {estimate:12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

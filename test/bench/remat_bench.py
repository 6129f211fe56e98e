"""Activation checkpointing benchmark: one training step of a model whose
activations dominate, compiled without checkpointing, selective and full,
on 1 rank and on 2 (dp_shard 2), f32. Runs are interleaved, so machine
noise hits every variant alike; prints the median step time, its ratio to
no checkpointing, and the peak memory the runtime measured (with the
static report's estimate, which must equal it).

    /usr/bin/python3 test/bench/remat_bench.py --bin-dir build/bin \\
        --config test/bench/small-llama.json --batch 4 --seq 256 --rounds 3
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

F32 = {"mp_policy": {"param_dtype": "float32", "reduce_dtype": "float32",
                     "output_dtype": "float32"}}
MODES = ["none", "selective", "full"]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="remat-bench-")
    graph = os.path.join(tmp, "g.json")
    run([os.path.join(args.bin_dir, "fsdp-graphgen"), args.config, "--batch",
         str(args.batch), "--seq", str(args.seq), "-o", graph])
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
            steps = [float(m) for m in re.findall(
                r"^step \d+ loss \S+ time (\S+) ms", out, re.M)]
            times[(ranks, mode)] += steps[1:]
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

"""Async TP benchmark: one training step of a TP + SP program compiled
synchronously and with enable_async_tensor_parallel (fsdp-async-tp), on 2
and 4 ranks, f32, with the runtime's communication thread. Runs are
interleaved; prints the median step time, the exposed (waited) tp
communication per step, and with --simulate the simulator's prediction of
the same programs on that hardware.

    /usr/bin/python3 test/bench/async_tp_bench.py --bin-dir build/bin \\
        --config test/bench/small-llama.json --batch 4 --seq 256 \\
        --simulate docs/hardware/h100-sxm.json
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
                     "output_dtype": "float32"}, "sequence_parallel": True}


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
    parser.add_argument("--simulate", metavar="HW.json")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="async-tp-bench-")
    graph = os.path.join(tmp, "g.json")
    run([os.path.join(args.bin_dir, "fsdp-graphgen"), args.config, "--batch",
         str(args.batch), "--seq", str(args.seq), "-o", graph])
    variants, predicted = [], {}
    for tp in (2, 4):
        for asynchronous in (False, True):
            parallel = os.path.join(tmp, f"{tp}{asynchronous}.json")
            json.dump(dict(F32, tp_size=tp,
                           enable_async_tensor_parallel=asynchronous),
                      open(parallel, "w"))
            exe = os.path.join(tmp, f"p{tp}{asynchronous}")
            cmd = [os.path.join(args.bin_dir, "fsdp-compile"), graph,
                   "--parallel", parallel, "--world-size", str(tp),
                   "--passes=fsdp-build-train-step"]
            run(cmd + ["-o", exe])
            key = (tp, asynchronous)
            variants.append((key, exe))
            if args.simulate:
                out = run(cmd + ["--simulate", args.simulate, "--source-only",
                                 "--emit-source", exe + ".cpp"])
                tp_row = re.search(r"^\{tp\}\s+\S+(?:\s+\S+)?\s+\S+\s+\S+\s+(\S+)$",
                                   out, re.M)
                predicted[key] = (
                    float(re.search(r"^step time\s+(\S+) ms", out,
                                    re.M).group(1)),
                    float(tp_row.group(1)) if tp_row else 0.0)
    times = {key: [] for key, _ in variants}
    exposed = {key: [] for key, _ in variants}
    for _ in range(args.rounds):
        for key, exe in variants:
            out = run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", str(key[0]), exe, "--steps", str(args.steps),
                       "--report"])
            steps = [float(m) for m in re.findall(
                r"^step \d+ loss \S+ time (\S+) ms", out, re.M)]
            times[key] += steps[1:]
            row = re.search(r"^\{tp\}\s+\S+\s+\S+\s+(\S+)$", out, re.M)
            exposed[key].append(float(row.group(1)) if row else 0.0)
    sim = (f" {'predicted ms':>13} {'pred. exposed tp ms':>20}"
           if args.simulate else "")
    print(f"{'tp':>3} {'tp collectives':>15} {'step ms':>9} {'vs sync':>8} "
          f"{'exposed tp ms/step':>19}" + sim)
    for key, _ in variants:
        t = statistics.median(times[key])
        base = statistics.median(times[(key[0], False)])
        line = (f"{key[0]:3} {'async ring' if key[1] else 'sync':>15} "
                f"{t:9.1f} {base / t:8.3f} "
                f"{statistics.median(exposed[key]):19.1f}")
        if args.simulate:
            line += f" {predicted[key][0]:13.3f} {predicted[key][1]:20.3f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

import json
import os
import re
import statistics
import sys

import benchutil
from benchutil import F32, run

SP_F32 = dict(F32, sequence_parallel=True)


def main():
    parser = benchutil.parser(__doc__, batch=4, seq=256, steps=3)
    parser.add_argument("--simulate", metavar="HW.json")
    args = parser.parse_args()
    tmp, graph = benchutil.graph(args, "async-tp-bench-")
    variants, predicted = [], {}
    for tp in (2, 4):
        for asynchronous in (False, True):
            parallel = os.path.join(tmp, f"{tp}{asynchronous}.json")
            json.dump(dict(SP_F32, tp_size=tp,
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
                predicted[key] = benchutil.simulate(cmd, args.simulate,
                                                    exe + ".cpp", "{tp}")
    times = {key: [] for key, _ in variants}
    exposed = {key: [] for key, _ in variants}
    for _ in range(args.rounds):
        for key, exe in variants:
            out = run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", str(key[0]), exe, "--steps", str(args.steps),
                       "--report"])
            times[key] += benchutil.step_times(out)
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

"""Overlap benchmark: a 2-rank FSDP step (dp_shard 2, f32) compiled
synchronously (no fsdp-schedule), scheduled at depth 0 (the gradient syncs
async only), and scheduled with FSDP2's implicit prefetch (one unit ahead
each way), with and without the runtime's communication thread. Runs are
interleaved, so machine noise hits every variant alike; prints the median
step time and the exposed (waited) communication per step of each. With
`--simulate HW.json`, also the simulator's prediction of each schedule on
that hardware (fsdp-compile --simulate, 2 ranks on one node).

    /usr/bin/python3 test/bench/overlap_bench.py --bin-dir build/bin \
        --config test/bench/small-llama.json --batch 2 --seq 64 --rounds 3 \
        --simulate docs/hardware/h100-sxm.json
"""

import json
import os
import re
import statistics
import sys

import benchutil
from benchutil import F32, run


VARIANTS = [
    # name, fsdp-schedule pass (or None), runtime flags
    ("sync", None, []),
    ("depth 0", "fsdp-schedule{forward-depth=0 backward-depth=0}", []),
    ("prefetch 1/1", "fsdp-schedule", []),
    ("prefetch 1/1, no comm thread", "fsdp-schedule", ["--no-comm-thread"]),
]


def main():
    parser = benchutil.parser(__doc__, batch=2, seq=64, steps=4)
    parser.add_argument("--simulate", metavar="HW.json",
                        help="also predict each schedule on this hardware")
    args = parser.parse_args()
    tmp, graph = benchutil.graph(args, "overlap-bench-")
    parallel = os.path.join(tmp, "f32.json")
    with open(parallel, "w") as f:
        json.dump(F32, f)
    exes = {}
    predicted = {}
    for name, schedule, _ in VARIANTS:
        passes = "fsdp-build-train-step" + ("," + schedule if schedule else "")
        exe = os.path.join(tmp, re.sub(r"\W+", "_", name))
        if schedule in exes:
            continue
        # The variant's own schedule only: not the pipeline's default one.
        compile_cmd = [os.path.join(args.bin_dir, "fsdp-compile"), graph,
                       "--parallel", parallel, "--world-size", "2",
                       "--schedule=false", "--passes=" + passes]
        run(compile_cmd + ["-o", exe])
        exes[schedule] = exe
        if args.simulate:
            out = run(compile_cmd + ["--simulate", args.simulate,
                                     "--source-only", "--emit-source",
                                     exe + ".cpp"])
            predicted[schedule] = [float(re.search(
                "^" + what + r"\s+(\S+) ms", out, re.M).group(1))
                for what in ("step time", "exposed communication")]
    times = {name: [] for name, _, _ in VARIANTS}
    exposed = {name: [] for name, _, _ in VARIANTS}
    for _ in range(args.rounds):
        for name, schedule, flags in VARIANTS:
            out = run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", "2", exes[schedule], "--steps", str(args.steps),
                       "--report"] + flags)
            times[name] += benchutil.step_times(out)
            rows = re.findall(r"^(\{[^}]*\})\s+\S+\s+\S+\s+(\S+)$", out, re.M)
            exposed[name].append(sum(float(r[1]) for r in rows))
    base = statistics.median(times["sync"])
    sim = f" {'predicted ms':>13} {'exposed':>8}" if args.simulate else ""
    print(f"{'variant':32} {'step ms':>10} {'vs sync':>8} "
          f"{'exposed ms/step':>16}" + sim)
    for name, schedule, _ in VARIANTS:
        t = statistics.median(times[name])
        e = statistics.median(exposed[name]) if exposed[name] else 0.0
        line = f"{name:32} {t:10.2f} {base / t:8.3f} {e:16.2f}"
        if args.simulate:
            line += f" {predicted[schedule][0]:13.3f} " \
                    f"{predicted[schedule][1]:8.3f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

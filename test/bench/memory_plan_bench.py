"""The compiler's memory plan against per-buffer allocation: one training
step compiled twice from the same graph, with the memory plan (the default)
and with --memory-plan=false, run as --rounds interleaved pairs (alternating
which goes first), each a fresh process on the first --threads cores running
--steps steps. A run's time is the median of its steps after the first; the
table shows the medians, the measured peak and the backend's reserved peak
of each side, and the arena. The two sides must log the same losses to the
last printed digit, or the script fails.

    /usr/bin/python3 test/bench/memory_plan_bench.py --bin-dir build/bin \\
        [--config test/bench/train-llama.json] [--batch 4] [--seq 256] \\
        [--steps 6] [--rounds 3] [--threads 2] [--dtypes f32,bf16]
"""

import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchutil  # noqa: E402
from train_bench import mixed_config, pinned  # noqa: E402


def number(pattern, out):
    m = re.search(pattern, out, re.M)
    if not m:
        sys.exit(f"error: no match for {pattern!r} in:\n{out}")
    return int(m.group(1))


def main():
    p = benchutil.parser(__doc__, batch=4, seq=256, steps=6,
                         config=os.path.join(HERE, "train-llama.json"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtypes", default="f32,bf16")
    args = benchutil.parse_steps(p, least=3)
    tmp, graph = benchutil.graph(args, "memory-plan-bench-")
    rows = []
    for dtype in args.dtypes.split(","):
        parallel = mixed_config(tmp, dtype)
        progs = {}
        for side, flag in (("plan", "--memory-plan=true"),
                           ("pool", "--memory-plan=false")):
            progs[side] = os.path.join(tmp, f"{dtype}-{side}")
            benchutil.run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                           "--parallel", parallel, flag,
                           "--passes=fsdp-build-train-step", "-o",
                           progs[side]])
        times = {"plan": [], "pool": []}
        ratios, seen = [], {}
        for r in range(args.rounds):
            order = ["plan", "pool"] if r % 2 == 0 else ["pool", "plan"]
            round_times = {}
            for side in order:
                out = pinned(args.threads, [progs[side], "--steps",
                                            str(args.steps), "--report"])
                times[side].append(statistics.median(
                    benchutil.step_times(out)))
                round_times[side] = times[side][-1]
                losses = re.findall(r"^step \d+ loss (\S+)", out, re.M)
                seen[side] = (losses,
                              number(r"^memory: current \d+ bytes, peak (\d+)",
                                     out),
                              number(r"^memory reserved by the backend: "
                                     r"peak (\d+)", out))
                if side == "plan":
                    seen["arena"] = number(r"^memory plan: arena (\d+)", out)
            ratios.append(round_times["pool"] / round_times["plan"])
        if seen["plan"][0] != seen["pool"][0]:
            sys.exit(f"error: {dtype}: the losses differ:\n plan "
                     f"{seen['plan'][0]}\n pool {seen['pool'][0]}")
        rows.append((dtype, statistics.median(times["plan"]),
                     statistics.median(times["pool"]),
                     statistics.median(ratios), seen["plan"][1],
                     seen["pool"][1], seen["plan"][2], seen["pool"][2],
                     seen["arena"]))
        print(f"{dtype}: plan {rows[-1][1]:.1f} ms, pool {rows[-1][2]:.1f} "
              f"ms, speed {rows[-1][3]:.3f}x, same losses", flush=True)
    print(f"\n{args.batch * args.seq} tokens per step, {args.threads} "
          f"threads, median of {args.rounds} interleaved pairs")
    print("| | plan ms | pool ms | plan speed (pool ms / plan ms) | "
          "peak, plan | "
          "peak, pool | reserved, plan | reserved, pool | arena |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row[0]} | {row[1]:.1f} | {row[2]:.1f} | {row[3]:.3f} | "
              + " | ".join(f"{v:,}" for v in row[4:]) + " |")


if __name__ == "__main__":
    main()

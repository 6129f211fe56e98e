"""Checks a program's --metrics file: every line a JSON object, one per
logged step (steps 0..N-1 in order) plus the evaluations; each step's
tokens/s times its step time is the tokens one step trains on over all
ranks (--tokens), per rank a --ranks-th of it; with --peak-tflops, MFU
times the peak, the ranks and the step time is the same FLOP count every
step (the program's model FLOPs); and the learning rate and gradient norm
are present and finite.

    python3 metrics_check.py METRICS.jsonl --steps N --tokens T --ranks R
        [--peak-tflops P] [--evals E]
"""

import argparse
import json
import math
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("metrics")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--tokens", type=float, required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--peak-tflops", type=float)
    p.add_argument("--evals", type=int, default=0)
    args = p.parse_args()
    with open(args.metrics) as f:
        rows = [json.loads(line) for line in f]
    train = [r for r in rows if "loss" in r]
    evals = [r for r in rows if "eval_loss" in r]
    problems = []
    if [r["step"] for r in train] != list(range(args.steps)):
        problems.append(f"steps {[r['step'] for r in train]}")
    if len(evals) != args.evals:
        problems.append(f"{len(evals)} evaluations, expected {args.evals}")
    flops = []
    for r in train:
        tokens = r["tokens_per_s"] * r["step_ms"] / 1000
        if abs(tokens - args.tokens) > 1e-6 * args.tokens:
            problems.append(f"step {r['step']}: tokens/s x step time = "
                            f"{tokens}, not {args.tokens}")
        per_rank = r["tokens_per_s_per_rank"] * args.ranks
        if abs(per_rank - r["tokens_per_s"]) > 1e-6 * r["tokens_per_s"]:
            problems.append(f"step {r['step']}: per-rank tokens/s x ranks "
                            f"{per_rank} != {r['tokens_per_s']}")
        for key in ("lr", "grad_norm", "memory_peak_bytes"):
            if not (key in r and math.isfinite(r[key]) and r[key] >= 0):
                problems.append(f"step {r['step']}: {key} missing or bad")
        if args.peak_tflops:
            if "mfu" not in r:
                problems.append(f"step {r['step']}: no mfu")
                continue
            flops.append(r["mfu"] * args.peak_tflops * 1e12 * args.ranks *
                         r["step_ms"] / 1000)
        elif "mfu" in r:
            problems.append(f"step {r['step']}: mfu without a peak")
    if flops and max(flops) - min(flops) > 1e-6 * max(flops):
        problems.append(f"model FLOPs per step vary: {min(flops)} .. "
                        f"{max(flops)}")
    for problem in problems:
        print("FAIL " + problem)
    if not problems:
        print(f"metrics: {len(train)} steps, {len(evals)} evaluations, "
              f"{args.tokens:.0f} tokens per step over {args.ranks} ranks" +
              (f", {flops[0]:.4g} model FLOPs per step" if flops else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

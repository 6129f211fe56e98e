"""Plots a training run's metrics file (a program's `--metrics FILE.jsonl`):
the training loss and the held-out loss, the learning rate, and the
throughput (tokens/s over all ranks, with MFU when the run knew the
device's peak), against the step.

    python -m fsdp_mlir.plot metrics.jsonl [more.jsonl ...] -o run.png

Several files (runs) share the axes, labelled by file name. Needs
matplotlib.
"""

import argparse
import json
import os
import sys


def read(path):
    """(train rows, eval rows) of one metrics file, by step; a line that is
    not a JSON object is an error naming the file and line."""
    train, held_out = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"error: {path}:{number}: not JSON ({e})")
            if not isinstance(row, dict) or "step" not in row:
                raise SystemExit(f"error: {path}:{number}: not a metrics "
                                 "object with a 'step'")
            (held_out if "eval_loss" in row else train).append(row)
    return (sorted(train, key=lambda r: r["step"]),
            sorted(held_out, key=lambda r: r["step"]))


def plot(paths, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, lr_ax, speed_ax) = plt.subplots(
        3, 1, figsize=(8, 9), sharex=True)
    mfu_ax = None
    for path in paths:
        train, held_out = read(path)
        label = os.path.basename(path)
        steps = [r["step"] for r in train]
        line, = loss_ax.plot(steps, [r["loss"] for r in train],
                             label=f"{label} train")
        if held_out:
            loss_ax.plot([r["step"] for r in held_out],
                         [r["eval_loss"] for r in held_out], "o--",
                         color=line.get_color(), label=f"{label} eval")
        if any("lr" in r for r in train):
            lr_ax.plot([r["step"] for r in train if "lr" in r],
                       [r["lr"] for r in train if "lr" in r], label=label)
        speed_ax.plot(steps, [r.get("tokens_per_s", 0) for r in train],
                      label=label)
        if any("mfu" in r for r in train):
            mfu_ax = mfu_ax or speed_ax.twinx()
            mfu_ax.plot([r["step"] for r in train if "mfu" in r],
                        [100 * r["mfu"] for r in train if "mfu" in r], ":",
                        label=f"{label} MFU")
            mfu_ax.set_ylabel("MFU (%)")
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    lr_ax.set_ylabel("learning rate")
    speed_ax.set_ylabel("tokens/s (all ranks)")
    speed_ax.set_xlabel("step")
    for ax in (loss_ax, lr_ax, speed_ax):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m fsdp_mlir.plot",
        description="Plot loss, held-out loss, learning rate and throughput "
                    "from --metrics files.")
    p.add_argument("metrics", nargs="+")
    p.add_argument("-o", "--output", required=True)
    args = p.parse_args(argv)
    plot(args.metrics, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Checks the learning rates a program reported (its --metrics file, one
JSON object per step) against transformers' get_scheduler over the same
steps: the rate of step k is the one torch's optimizer uses at its step k,
after k scheduler steps.

    HF_PYTHON lr_schedule_check.py METRICS.jsonl --name NAME --lr LR
        [--warmup W] [--total T] [--kwargs JSON] [--atol 1e-7]

NAME and --kwargs are get_scheduler's name and scheduler_specific_kwargs.
"""

import argparse
import json
import sys

import torch
import transformers

import checks


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("metrics")
    p.add_argument("--name", required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--total", type=int)
    p.add_argument("--kwargs", default="{}")
    p.add_argument("--atol", type=float, default=1e-7)
    args = p.parse_args()
    with open(args.metrics) as f:
        ours = [json.loads(line) for line in f]
    ours = [m["lr"] for m in sorted(ours, key=lambda m: m["step"])]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=args.lr)
    sched = transformers.get_scheduler(
        args.name, opt, num_warmup_steps=args.warmup,
        num_training_steps=args.total,
        scheduler_specific_kwargs=json.loads(args.kwargs))
    worst = 0.0
    for k, lr in enumerate(ours):
        theirs = opt.param_groups[0]["lr"]
        worst = max(worst, abs(lr - theirs))
        opt.step()
        sched.step()
    print(f"{args.name}: {len(ours)} steps, lr {ours[0]:.4g} .. "
          f"{max(ours):.4g} .. {ours[-1]:.4g}, max_abs_err {worst:.2e}")
    return checks.verdict("max_abs_err", worst, args.atol)


if __name__ == "__main__":
    sys.exit(main())

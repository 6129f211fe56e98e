# Trains a compiled step and PyTorch side by side and compares the loss
# trajectories.
#
# The program (fsdp-graphgen + fsdp-compile with fsdp-build-train-step) runs
# --steps steps on a token file this script writes; PyTorch runs the float64
# reference model of reference.py from the program's dumped initial weights
# with torch.optim.AdamW or SGD and the same hyperparameters, on the same
# batches (the runtime reads sample b of step k at token offset
# ((k * B + b) * (S + 1)) mod (tokens - S - 1)). Without --weight-decay
# neither side is given one: each uses its default (torch's: AdamW 0.01,
# SGD 0). With --schedule (fsdp-build-train-step's lr-schedule options),
# PyTorch's optimizer takes, step by step, the learning rate the program
# reports in its metrics file (lr_schedule_check.py checks those against
# transformers' get_scheduler).
#
# With --hf (run it with HF_PYTHON) the reference is transformers' model of
# the config instead, in float64 (eager experts), its loss the cross-entropy
# plus router_aux_loss_coef times its load-balancing loss when the config
# sets output_router_logits; and after the last step every parameter the
# program updated is compared with PyTorch's, norm-wise (||a - b|| / ||b||,
# within --param-rtol).
#
# Usage: /usr/bin/python3 train_check.py --config C --bin-dir build/bin
#            --work DIR [--optimizer adamw|sgd] [--steps 20] [--lr 1e-2]
#            [--max-grad-norm 0] [--weight-decay W] [--schedule OPTIONS]
#            [--batch 2] [--seq 16] [--rtol 1e-4]
#            [--mpirun "mpirun ..."]

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checks  # noqa: E402
import reference  # noqa: E402

STEP = re.compile(r"^step (\d+) loss (\S+) time")


def run(cmd):
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--weight-decay", type=float)
    parser.add_argument("--schedule", default="")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--max-grad-norm", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--hf", action="store_true")
    parser.add_argument("--param-rtol", type=float, default=1e-5)
    parser.add_argument("--mpirun",
                        default="mpirun --allow-run-as-root --oversubscribe")
    args = parser.parse_args()

    with open(args.config) as f:
        config = json.load(f)
    spec = None if args.hf else reference.ModelSpec(config)
    vocab = config["vocab_size"] if args.hf else spec.vocab
    os.makedirs(args.work, exist_ok=True)
    graph = os.path.join(args.work, "graph.json")
    prog = os.path.join(args.work, "step")
    tokens_path = os.path.join(args.work, "tokens.bin")
    dump = os.path.join(args.work, "dump")
    metrics_path = os.path.join(args.work, "metrics.jsonl")

    opts = f"optimizer={args.optimizer} lr={args.lr} {args.schedule}"
    if args.weight_decay is not None:
        opts += f" weight-decay={args.weight_decay}"
    if args.optimizer == "sgd":
        opts += f" momentum={args.momentum}"
    if args.max_grad_norm > 0:
        opts += f" max-grad-norm={args.max_grad_norm}"
    run([os.path.join(args.bin_dir, "fsdp-graphgen"), args.config,
         "--batch", str(args.batch), "--seq", str(args.seq), "-o", graph])
    run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
         f"--passes=fsdp-build-train-step{{{opts}}}", "-o", prog])
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocab, size=4096, dtype=np.int32)
    tokens.tofile(tokens_path)
    out = run(shlex.split(args.mpirun) + [
        "-np", "1", prog, "--steps", str(args.steps), "--data", tokens_path,
        "--dump-dir", dump, "--metrics", metrics_path])
    with open(metrics_path) as f:
        lrs = [json.loads(line)["lr"] for line in f]
    ours = [float(m.group(2)) for m in map(STEP.match, out.splitlines()) if m]
    if len(ours) != args.steps:
        sys.exit(f"error: expected {args.steps} loss lines, got:\n{out}")

    # PyTorch from the same initial weights (dumped before the first update).
    directory = os.path.join(dump, "rank0")
    manifest = reference.read_manifest(directory)
    if args.hf:
        model, forward = hf_model(config, directory, manifest)
        params = dict(model.named_parameters())
    else:
        params = {n: reference.load_tensor(directory, n, *manifest[n])
                  .to(torch.float64).requires_grad_(True)
                  for n in spec.parameter_shapes()}

        def forward(ids, positions, labels):
            return reference.forward(spec, reference.Params(params), ids,
                                     positions, labels)[1]
    decay = {} if args.weight_decay is None else \
        {"weight_decay": args.weight_decay}
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(params.values(), lr=args.lr, **decay)
    else:
        opt = torch.optim.SGD(params.values(), lr=args.lr,
                              momentum=args.momentum, **decay)
    b, s = args.batch, args.seq
    window = len(tokens) - s - 1
    positions = torch.arange(s).repeat(b, 1)
    worst = 0.0
    for k in range(args.steps):
        rows = [tokens[((k * b + i) * (s + 1)) % window:][:s + 1]
                for i in range(b)]
        batch = torch.from_numpy(np.stack(rows).astype(np.int64))
        opt.zero_grad()
        loss = forward(batch[:, :s], positions, batch[:, 1:])
        loss.backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params.values(), args.max_grad_norm)
        if args.schedule:
            for group in opt.param_groups:
                group["lr"] = lrs[k]
        elif abs(lrs[k] - args.lr) > 1e-6 * args.lr:
            sys.exit(f"error: step {k} reports lr {lrs[k]} without a "
                     f"schedule, not {args.lr}")
        opt.step()
        err = abs(ours[k] - loss.item()) / abs(loss.item())
        worst = max(worst, err)
        print(f"step {k} loss {ours[k]:.6f} torch {loss.item():.6f} "
              f"rel_err {err:.2e}")
    print(f"{args.optimizer} {args.steps} steps: loss {ours[0]:.6f} -> "
          f"{ours[-1]:.6f}, max_rel_err {worst:.2e}")
    failed = checks.verdict("max_rel_err", worst, args.rtol) != 0
    if args.hf:
        failed |= compare_params(args, prog, tokens_path, params)
    return 1 if failed else 0


def hf_model(config, directory, manifest):
    """transformers' model of `config` in float64 with the program's initial
    weights, and its training loss."""
    import torch.nn.functional as F
    import transformers
    cfg = transformers.AutoConfig.for_model(**config)
    reference.eager_experts(cfg)
    model = getattr(transformers, cfg.architectures[0])(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(reference.load_tensor(directory, name, *manifest[name]))

    def forward(ids, positions, labels):
        out = model(input_ids=ids, position_ids=positions,
                    **reference.router_kwargs(cfg))
        loss = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]),
                               labels.reshape(-1), ignore_index=-100)
        return reference.with_aux_loss(cfg, out, loss)
    return model, forward


def compare_params(args, prog, tokens_path, params):
    """Every parameter after the last step, the program's against PyTorch's;
    returns whether one differs by more than --param-rtol."""
    dump = os.path.join(args.work, "dump-last")
    run(shlex.split(args.mpirun) + [
        "-np", "1", prog, "--steps", str(args.steps), "--data", tokens_path,
        "--dump-dir", dump, "--dump-step", str(args.steps - 1)])
    directory = os.path.join(dump, "rank0")
    manifest = reference.read_manifest(directory)
    worst, worst_name = 0.0, ""
    for name, p in params.items():
        ours = reference.load_tensor(directory, "updated." + name,
                                     *manifest["updated." + name]).double()
        err = ((ours - p.detach()).norm() / p.detach().norm()).item()
        if err > worst:
            worst, worst_name = err, name
    bad = not worst <= args.param_rtol
    print(f"{'FAIL ' if bad else ''}parameters after {args.steps} steps "
          f"({len(params)}): max_norm_rel_err {worst:.2e} ({worst_name})")
    return bad


if __name__ == "__main__":
    sys.exit(main())

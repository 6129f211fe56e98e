# Checks one dumped training step (a 1-rank program run with --dump-dir and
# optimizer=none) against Hugging Face transformers on the same weights and
# tokens: builds the model of CONFIG.json on --device, loads the dumped
# parameters, runs forward and backward in float64 (the reference; TF32
# off) and compares the program's logits, loss and every gradient, each
# relative to the reference tensor's largest magnitude.
#
# A program that computes in bf16 (mp_policy) is not within 1e-5 of a
# float64 step, so with --yardstick the same step also runs the two ways
# PyTorch users train in bf16: float32 parameters under torch.autocast
# bf16, and bf16 parameters (what FSDP2's MixedPrecisionPolicy with
# param_dtype bf16 computes, the policy the program follows). The program
# must be within --factor times the larger of the two errors against the
# reference (or within the tolerances, whichever is larger).
#
# Prints one line per quantity, prefixed by --label; exits 1 on a failure.
#
# Usage: python3 hf_step.py CONFIG.json DUMP_DIR [--device cuda]
#            [--rtol 1e-5] [--grad-rtol 1e-5] [--yardstick] [--factor 2]
#            [--label NAME]

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def rel(a, b):
    a, b = a.double(), b.double().to(a.device)
    return ((a - b).abs().max() / (b.abs().max() or 1.0)).item()


def step(model, inputs, autocast):
    """Logits, loss and {name: grad} of one forward and backward."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(inputs["input_ids"].device.type, torch.bfloat16,
                        enabled=autocast):
        out = model(input_ids=inputs["input_ids"],
                    position_ids=inputs["position_ids"])
        logits = out.logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               inputs["labels"].reshape(-1),
                               ignore_index=-100)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads


def compare(logits, loss, grads, reference_step):
    """Max relative errors of a step against the reference step, and the
    gradients from worst to best as (error, parameter)."""
    ref_logits, ref_loss, ref_grads = reference_step
    # A NaN error ranks first (and fails: NaN <= bound is false).
    ranked = sorted(((rel(grads[name].to(g.device), g), name)
                     for name, g in ref_grads.items()),
                    key=lambda e: -(e[0] if e[0] == e[0] else float("inf")))
    worst = ranked[0][0] if ranked else 0.0
    return {"logits": rel(logits.to(ref_logits.device), ref_logits),
            "loss": rel(loss.to(ref_loss.device), ref_loss),
            "gradients": worst}, ranked


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config")
    parser.add_argument("dump")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--grad-rtol", type=float, default=1e-5)
    parser.add_argument("--yardstick", action="store_true")
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--label", default="step")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    rank0 = os.path.join(args.dump, "rank0")
    manifest = reference.read_manifest(rank0)
    ours = {name: reference.load_tensor(rank0, name, *entry)
            for name, entry in manifest.items()}
    with open(args.config) as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    config._attn_implementation = "eager"
    # Built on the device: initializing 1B parameters on the CPU takes long.
    with torch.device(args.device):
        model = getattr(transformers, config.architectures[0])(config)
    model = model.double()
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if name not in ours:
                sys.exit(f"error: transformers parameter '{name}' is not in "
                         f"the dump {rank0}")
            p.copy_(ours[name])
    inputs = {n: ours[n].long().to(args.device)
              for n in ("input_ids", "position_ids", "labels")}

    reference_step = step(model, inputs, False)
    errors, ranked = compare(
        ours["logits"], ours["loss"],
        {n: ours["grad." + n] for n in params}, reference_step)
    tolerance = {"logits": args.rtol, "loss": args.rtol,
                 "gradients": args.grad_rtol}
    if args.yardstick:
        autocast, _ = compare(*step(model.float(), inputs, True),
                              reference_step)
        params16, _ = compare(*step(model.bfloat16(), inputs, False),
                              reference_step)
        for key in tolerance:
            yard = max(autocast[key], params16[key])
            tolerance[key] = max(tolerance[key], args.factor * yard)
            print(f"{args.label} transformers bf16 autocast {key} "
                  f"max_rel_err {autocast[key]:.3e}")
            print(f"{args.label} transformers bf16 parameters {key} "
                  f"max_rel_err {params16[key]:.3e}")
    worst_name = ranked[0][1] if ranked else ""
    failed = False
    for key, err in errors.items():
        bad = not err <= tolerance[key]
        failed |= bad
        what = f"{key} ({len(params)}, worst {worst_name})" \
            if key == "gradients" else key
        print(f"{'FAIL ' if bad else ''}{args.label} vs transformers {what} "
              f"max_rel_err {err:.3e} tolerance {tolerance[key]:.1e}")
    if failed:
        # Where the error is: the worst gradients, each against the bound.
        for err, name in ranked[:8]:
            print(f"  {args.label} gradient {name} max_rel_err {err:.3e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

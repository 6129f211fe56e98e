# Compares the gradients a compiled training step dumped (outputs
# `grad.<parameter>`, from fsdp-build-train-step{optimizer=none}) with PyTorch
# autograd of the float64 reference model in reference.py, on the dumped
# weights and batch.
#
# Usage: /usr/bin/python3 grad_check.py --config CONFIG.json --dump DIR
#            [--rank 0] [--rtol 1e-5]
# Prints the loss error and, per parameter, the gradient error (max |ours -
# ref| / max |ref|); exits 1 when one is above --rtol.

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    reference.add_dump_arguments(parser)
    args = parser.parse_args()

    with open(args.config) as f:
        spec = reference.ModelSpec(json.load(f))
    directory = reference.rank_directory(args)
    manifest = reference.read_manifest(directory)
    tensors = {name: reference.load_tensor(directory, name, *manifest[name])
               for name in manifest}
    shapes = spec.parameter_shapes()
    missing = [n for n in shapes if n not in tensors or
               "grad." + n not in tensors]
    if missing:
        print("error: the dump lacks " + ", ".join(missing), file=sys.stderr)
        return 2

    params = {n: tensors[n].to(torch.float64).requires_grad_(True)
              for n in shapes}
    p = reference.Params(params)
    _, loss = reference.forward(spec, p, tensors["input_ids"],
                                tensors["position_ids"], tensors["labels"])
    loss.backward()

    failures = []
    ours_loss = tensors["loss"].item()
    err = abs(ours_loss - loss.item()) / abs(loss.item())
    print(f"loss {ours_loss:.9g} {loss.item():.9g} rel_err {err:.3e}")
    if not err <= args.rtol:
        failures.append(f"FAIL loss rel_err {err:.3e}")
    worst, worst_name = 0.0, ""
    for name in shapes:
        ref = params[name].grad
        ours = tensors["grad." + name].to(torch.float64)
        scale = ref.abs().max().item()
        e = (ours - ref).abs().max().item() / scale if scale else \
            ours.abs().max().item()
        if not e <= args.rtol:
            failures.append(f"FAIL grad {name} max_rel_err {e:.3e}")
        if math.isnan(e) or e > worst:
            worst, worst_name = e, name
    print(f"grads {len(shapes)} max_rel_err {worst:.3e} ({worst_name})")
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

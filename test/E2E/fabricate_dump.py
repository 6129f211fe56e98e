# Writes a dump in the format of a program's `--dump-dir` (see reference.py)
# without a compiled program: random parameters shaped by the config, inputs,
# and logits and loss computed by reference.py's forward in float32. It lets
# reference.py be tested on its own: the dump must pass, and fail once
# `--perturb` changes one output value.
#
# Usage: /usr/bin/python3 fabricate_dump.py --config CONFIG.json --out DIR
#            [--batch 2] [--seq 16] [--dtype f32|bf16] [--seed 0]
#            [--perturb logits|loss]

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def write_tensor(directory, manifest, name, tensor, dtype):
    """Writes `tensor` as `dtype` and returns it as the file holds it."""
    if dtype == "bf16":
        # Round to nearest even, keeping the upper 16 bits of the float32.
        bits = tensor.to(torch.float32).numpy().view(np.uint32).astype(
            np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
        bits.tofile(os.path.join(directory, name + ".bin"))
        stored = torch.from_numpy(
            (bits.astype(np.uint32) << 16).view(np.float32).copy())
    else:
        np_dtype = {"f32": "<f4", "i64": "<i8", "i32": "<i4"}[dtype]
        array = tensor.numpy().astype(np_dtype)
        array.tofile(os.path.join(directory, name + ".bin"))
        stored = torch.from_numpy(array.astype(array.dtype.newbyteorder("=")))
    manifest.append(f"{name} {dtype} {reference.format_shape(tensor.shape)}")
    return stored.reshape(tensor.shape)


def random_parameter(name, shape, generator):
    """Values that exercise every parameter: norm weights away from one,
    biases away from zero, matrices scaled so attention is not uniform."""
    if len(shape) == 1:
        base = 1.0 if "norm" in name or "ln_" in name else 0.0
        return base + 0.1 * torch.randn(shape, generator=generator)
    std = 1.0 if name.endswith(("wte.weight", "wpe.weight",
                                "embed_tokens.weight")) else 0.125
    return std * torch.randn(shape, generator=generator)


def main():
    parser = argparse.ArgumentParser(
        description="Writes a fake program dump for testing reference.py.")
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True,
                        help="dump directory; rank0/ is written inside")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                        help="parameter and logits dtype")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--perturb", choices=["logits", "loss"],
                        help="change one output value by a relative 1e-3")
    args = parser.parse_args()

    with open(args.config) as f:
        spec = reference.ModelSpec(json.load(f))
    directory = os.path.join(args.out, "rank0")
    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(args.seed)
    manifest = []

    params = {}
    for name, shape in spec.parameter_shapes().items():
        value = random_parameter(name, shape, generator)
        params[name] = write_tensor(directory, manifest, name, value,
                                    args.dtype)

    b, s = args.batch, args.seq
    input_ids = torch.randint(0, spec.vocab, (b, s), generator=generator)
    # Later rows start at later positions, so position_ids are really read.
    position_ids = torch.arange(s).repeat(b, 1) + 3 * torch.arange(b)[:, None]
    labels = torch.randint(0, spec.vocab, (b, s), generator=generator)
    labels[:, -1] = -100
    labels[0, 0] = -100
    inputs = {"input_ids": input_ids, "position_ids": position_ids,
              "labels": labels}
    for name, value in inputs.items():
        write_tensor(directory, manifest, name, value, "i64")

    with torch.no_grad():
        logits, loss = reference.forward(
            spec, reference.Params({k: v.to(torch.float32)
                                    for k, v in params.items()}),
            input_ids, position_ids, labels)
    if args.perturb == "logits":
        logits.view(-1)[logits.numel() // 3] += 1e-3 * logits.abs().max()
    elif args.perturb == "loss":
        loss = loss * (1 + 1e-3)
    write_tensor(directory, manifest, "loss", loss.to(torch.float32), "f32")
    write_tensor(directory, manifest, "logits", logits, args.dtype)
    with open(os.path.join(directory, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()

"""Checks a program's held-out loss (its `eval after step N loss L (K
batches)` line, the last one) against Hugging Face transformers' forward
(float64) of the model the program ended with (a consolidated checkpoint),
on the same K batches of the eval token file: batch k is the global batch
the runtime's loader reads for step k (sample b at token offset
((k * B + b) * (S + 1)) mod (tokens - S - 1)), and the loss the mean over
batches of each batch's mean cross-entropy.

    HF_PYTHON eval_check.py CONFIG.json --checkpoint MODEL.safetensors
        --eval-data TOKENS.bin --batch B --seq S --log RUN.log [--rtol 1e-5]
"""

import argparse
import json
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file

import checks

EVAL = re.compile(r"^eval after step (\d+) loss (\S+) \((\d+) batches\)",
                  re.M)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("config")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--eval-data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args()
    with open(args.log) as f:
        found = EVAL.findall(f.read())
    if not found:
        sys.exit(f"error: {args.log}: no eval line")
    step, ours, batches = int(found[-1][0]), float(found[-1][1]), \
        int(found[-1][2])
    with open(args.config) as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    model = transformers.AutoModelForCausalLM.from_config(config).double()
    state = {k: v.double() for k, v in load_file(args.checkpoint).items()}
    model.load_state_dict(state, strict=True)
    model.eval()
    tokens = np.fromfile(args.eval_data, dtype=np.int32).astype(np.int64)
    b, s = args.batch, args.seq
    window = len(tokens) - s - 1
    losses = []
    with torch.no_grad():
        for k in range(batches):
            rows = torch.from_numpy(np.stack(
                [tokens[((k * b + i) * (s + 1)) % window:][:s + 1]
                 for i in range(b)]))
            logits = model(input_ids=rows[:, :s],
                           position_ids=torch.arange(s).repeat(b, 1),
                           use_cache=False).logits
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                          rows[:, 1:].reshape(-1)).item())
    theirs = sum(losses) / len(losses)
    err = abs(ours - theirs) / abs(theirs)
    print(f"eval after step {step}: {batches} batches, loss {ours:.6f} "
          f"transformers {theirs:.6f} rel_err {err:.2e}")
    return checks.verdict("rel_err", err, args.rtol)


if __name__ == "__main__":
    sys.exit(main())

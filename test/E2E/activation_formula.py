"""The activation memory one decoder layer saves for the backward, in
closed form, against the memory report's "saved for the backward" (bytes
live when the backward starts): the report's growth per layer between two
depths must equal the formula to the byte.

For a Llama-family layer (RMSNorm, GQA attention computed flash-style, so
nothing of size s^2 is kept, SwiGLU MLP), per rank, with s the sequence,
b the rank's batch, h the hidden size, k = kv_heads * head_dim, f the MLP
width, t the tensor-parallel size, e the bytes of an activation element:

  none,      no SP:  e*(4sbh + 2sbh/t + 2sbk/t + 4sbf/t)
  none,      SP:     e*(2sbh + 4sbh/t + 2sbk/t + 4sbf/t)
  full:              e*sbh (no SP) or e*sbh/t (SP): the layer's input
  selective, no SP:  e*(2sbh + 2sbh/t + sbk/t + sbf/t), e*(sbh + 2sbh/t +
                     sbk/t + sbf/t) at t = 1 (no collective to keep)
  selective, SP:     e*(2sbh + 4sbh/t + sbk/t + sbf/t)

plus, in none and selective, the attention's softmax statistics, 4 bytes
(f32) for each of the rank's b*s*n/t query rows (n query heads), and, under
mixed precision, the layer's parameter block cast to the compute dtype (e
bytes for each of the rank's P parameters of the layer), which the backward
reads again (FSDP re-gathers from it).

    activation_formula.py [--bin-dir DIR] --config CONFIG --batch B --seq S [--tp T]
        [--world W] [--sp] [--layers L1 L2] [--f32]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def saved(args, tmp, layers, mode):
    config = json.load(open(args.config))
    config["num_hidden_layers"] = layers
    cfg = os.path.join(tmp, f"config{layers}.json")
    json.dump(config, open(cfg, "w"))
    graph = os.path.join(tmp, f"g{layers}.json")
    subprocess.run([os.path.join(args.bin_dir, "fsdp-graphgen"), cfg, "--batch", str(args.batch),
                    "--seq", str(args.seq), "-o", graph], check=True,
                   capture_output=True)
    parallel = {"tp_size": args.tp, "sequence_parallel": args.sp}
    if args.f32:
        parallel["mp_policy"] = {"param_dtype": "float32",
                                 "reduce_dtype": "float32",
                                 "output_dtype": "float32"}
    pfile = os.path.join(tmp, "parallel.json")
    json.dump(parallel, open(pfile, "w"))
    out = subprocess.run(
        [os.path.join(args.bin_dir, "fsdp-compile"), graph, "--parallel", pfile, "--world-size",
         str(args.world),
         f"--passes=fsdp-build-train-step{{activation-checkpointing={mode}}}",
         "--report", "--source-only", "--emit-source",
         os.path.join(tmp, "p.cpp")], check=True, capture_output=True,
        text=True).stdout
    return int(re.search(r"^saved for the backward\s+(\d+)", out,
                         re.M).group(1))


def formula(args, mode):
    c = json.load(open(args.config))
    h, f = c["hidden_size"], c["intermediate_size"]
    heads = c["num_attention_heads"]
    d_head = c.get("head_dim") or h // heads
    k = c.get("num_key_value_heads", heads) * d_head
    t = args.tp
    dp = args.world // t
    s, b = args.seq, args.batch // dp
    e = 4 if args.f32 else 2
    sp = args.sp
    if mode == "none":
        elems = (2 * s * b * h + 4 * s * b * h // t if sp
                 else 4 * s * b * h + 2 * s * b * h // t) + \
            2 * s * b * k // t + 4 * s * b * f // t
    elif mode == "full":
        elems = s * b * h // t if sp else s * b * h
    else:
        # With tp the attention's output projection ends in a collective,
        # whose result (the residual's other operand) is kept whole.
        kept_residual = s * b * h if t > 1 and not sp else 0
        elems = s * b * h + kept_residual + \
            (4 if sp else 2) * s * b * h // t + s * b * k // t + s * b * f // t
        if sp:
            elems += s * b * h
    # The rank's block of the layer's parameters: the projections split over
    # t, the two norm weights whole, all split over the dp ranks.
    params = ((h * heads * d_head * 2 + 2 * k * h + 3 * f * h) // t + 2 * h) \
        // dp
    cast = 0 if args.f32 else e * params
    # The attention's log-sum-exp per query row, kept for its backward.
    stats = 0 if mode == "full" else 4 * b * s * heads // t
    return e * elems + stats + cast


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin-dir", default="",
                        help="where fsdp-graphgen and fsdp-compile are "
                             "(default: PATH)")
    parser.add_argument("--config", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--f32", action="store_true")
    parser.add_argument("--layers", type=int, nargs=2, default=[2, 4])
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="activation-formula-")
    l1, l2 = args.layers
    ok = True
    for mode in ("none", "full", "selective"):
        per_layer = (saved(args, tmp, l2, mode) -
                     saved(args, tmp, l1, mode)) / (l2 - l1)
        expected = formula(args, mode)
        equal = per_layer == expected
        ok &= equal
        print(f"{mode}: report {per_layer:.0f} bytes per layer, formula "
              f"{expected} bytes: {'equal' if equal else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

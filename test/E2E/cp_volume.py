# Checks a context-parallel training step's communication over cp (the
# `communication` member of fsdp-compile --report-json, or the runtime's
# collective table after one step) against the closed forms. With
# K = b·(s/cp)·n_kv·d·4 bytes (one rank's f32 key or value block), per
# decoder layer and step:
#   p2p:        cp - 1 permutes of K and of V forward, the same again before
#               the layer's backward (the blocks go round the ring again
#               rather than being kept), and cp - 1 of dK and of dV back:
#               6·(cp - 1) permutes sending K each; and once per step,
#               cp - 1 permutes of the rank's positions (b·s/cp i64);
#   all_gather: an all_gather of K and of V forward (each sending K·(cp-1)),
#               a reduce_scatter of dK and of dV backward (the same bytes):
#               4·K·(cp - 1) bytes per layer.
#
# Usage: /usr/bin/python3 cp_volume.py REPORT --config CONFIG.json --cp N
#            --comm p2p|all_gather [--batch B] [--seq S] [--table]
# REPORT is the JSON report, or with --table the runtime's report text.
# Prints the per-layer volume; exits 1 unless the cp rows equal the formula.

import argparse
import json
import sys

import checks


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report")
    parser.add_argument("--config", required=True)
    parser.add_argument("--cp", type=int, required=True)
    parser.add_argument("--comm", choices=["p2p", "all_gather"],
                        required=True)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--table", action="store_true")
    args = parser.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    layers = cfg["num_hidden_layers"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    d = cfg.get("head_dim") or cfg["hidden_size"] // heads
    cp = args.cp
    block = args.batch * (args.seq // cp) * kv * d * 4
    blocks = 6 if args.comm == "p2p" else 4
    if args.comm == "p2p":
        want = {("permute", "{cp}"): (
            6 * (cp - 1) * layers + (cp - 1),
            6 * (cp - 1) * layers * block +
            (cp - 1) * args.batch * (args.seq // cp) * 8)}
    else:
        want = {("all_gather", "{cp}"): (2 * layers,
                                        2 * layers * block * (cp - 1)),
                ("reduce_scatter", "{cp}"): (2 * layers,
                                            2 * layers * block * (cp - 1))}
    got = {k: v for k, v in checks.collectives(args.report,
                                              args.table).items()
           if k[1] == "{cp}"}
    print(f"cp={cp} {args.comm}: per layer {blocks * block * (cp - 1)} bytes "
          f"over cp; report {sorted(got.items())}")
    if got != want:
        print(f"FAIL: expected {sorted(want.items())}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

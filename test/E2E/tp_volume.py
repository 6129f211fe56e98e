# Checks a training step's communication report (the `communication` member
# of fsdp-compile --report-json) against the closed-form tensor-parallel
# volumes of ../shared/reference/performance-anchors.md section 7.4: per
# decoder layer and step, with S = b·s·h·4 bytes (an f32 activation) and
# t = tp,
#   without SP: 4 all-reduces of S (2 forward after o_proj/down_proj, 2
#               backward through the copies before q/k/v and gate/up), each
#               sending 2·S·(t-1)/t;
#   with SP:    4 all-gathers and 4 reduce-scatters (2 of each forward, their
#               transposes backward), each sending S·(t-1)/t: the same bytes
#               as the all-reduces.
# Outside the layers: the vocabulary-parallel embedding (an all-reduce of S,
# or with SP a reduce-scatter and its all-gather), the lm_head input (the
# copy's all-reduce, or with SP an all-gather and its reduce-scatter), the
# vocabulary-parallel loss (3 all-reduces of b·s floats: max, Σexp, target)
# the gradients of replicated weights applied to per-rank data, all-reduced
# once each: Qwen3's q_norm/k_norm (on the rank's heads) and, with SP, the
# norms (and GPT-2's row-parallel biases) on the rank's sequence block; with
# SP GPT-2's position embeddings, cut to the rank's sequence block, gather
# their gradient once.
#
# Usage: /usr/bin/python3 tp_volume.py REPORT.json --config CONFIG.json
#            --tp T [--sp] [--batch 2] [--seq 16]
# Prints the per-layer volume and exits 1 unless the report equals the
# formula for every collective kind.

import argparse
import json
import sys

import checks


def expected(cfg, tp, sp, b, s):
    gpt2 = cfg.get("model_type") == "gpt2"
    h = cfg["n_embd"] if gpt2 else cfg["hidden_size"]
    layers = cfg["n_layer"] if gpt2 else cfg["num_hidden_layers"]
    act = b * s * h * 4
    rows = b * s * 4
    half = (tp - 1) / tp
    calls = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0}
    sent = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0}

    def add(kind, n, bytes_each):
        calls[kind] += n
        sent[kind] += int(round(n * bytes_each))

    if sp:
        per_layer = {"all_gather": (4, act * half),
                     "reduce_scatter": (4, act * half)}
        # Embedding and lm_head: one of each kind forward, the transposes.
        add("all_gather", 4 * layers + 2, act * half)
        add("reduce_scatter", 4 * layers + 2, act * half)
        # Replicated weights applied to sequence blocks.
        norms = 2 * layers + 1
        norm_params = norms * (2 if gpt2 else 1)
        add("all_reduce", norm_params, h * 4 * 2 * half)
        if gpt2:
            add("all_reduce", 2 * layers, h * 4 * 2 * half)
            # The learned position embeddings enter the sequence blocks
            # through an all_slice, whose transpose gathers their gradient.
            add("all_gather", 1, act * half)
    else:
        per_layer = {"all_reduce": (4, act * 2 * half)}
        add("all_reduce", 4 * layers + 2, act * 2 * half)
    add("all_reduce", 3, rows * 2 * half)
    if cfg.get("model_type") == "qwen3":
        # q_norm and k_norm: replicated weights on the rank's heads.
        head_dim = cfg.get("head_dim") or h // cfg["num_attention_heads"]
        add("all_reduce", 2 * layers, head_dim * 4 * 2 * half)
    return calls, sent, per_layer, layers


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report")
    parser.add_argument("--config", required=True)
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    args = parser.parse_args()
    with open(args.config) as f:
        cfg = json.load(f)
    calls, sent, per_layer, layers = expected(cfg, args.tp, args.sp,
                                              args.batch, args.seq)
    got_calls = {k: 0 for k in calls}
    got_sent = {k: 0 for k in sent}
    for (kind, group), (n_calls, n_bytes) in checks.collectives(
            args.report).items():
        if group != "{tp}" or kind not in got_calls:
            print(f"FAIL unexpected {kind} over {group}")
            return 1
        got_calls[kind] += n_calls
        got_sent[kind] += n_bytes
    layer = ", ".join(f"{n} {kind} x {int(b)} B" for kind, (n, b)
                      in per_layer.items())
    layer_bytes = sum(n * int(b) for n, b in per_layer.values())
    print(f"tp={args.tp} sp={'on' if args.sp else 'off'}: per layer {layer} "
          f"= {layer_bytes} B; step total {sum(got_sent.values())} B")
    failed = False
    for kind in calls:
        ok = got_calls[kind] == calls[kind] and got_sent[kind] == sent[kind]
        print(f"  {kind:15} calls {got_calls[kind]:4} (formula "
              f"{calls[kind]:4})  bytes {got_sent[kind]:9} (formula "
              f"{sent[kind]:9}) {'ok' if ok else 'FAIL'}")
        failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

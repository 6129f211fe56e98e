"""Packed-sequence benchmark: useful tokens per second, packed against one
document per row padded.

A skewed corpus (lognormal document lengths, mean S/8, sigma 1; each
document ends with the end-of-document token 0) trains two ways on one
rank, f32, interleaved:

- padded: one document per row (cut to S tokens), the rest of the row
  padding, an unpacked graph: the attention and the MLPs run over the
  padding too;
- packed: `fsdp-graphgen --packed` and `--data --eos 0 --pack` (whole
  documents best-fit into rows, each attending only to itself).

Useful tokens are the documents' own tokens: a step's B x S times the share
of the rows that documents fill (the runtime's `data:` line for packed rows,
the corpus for padded ones). With --simulate, the simulator predicts the
same on Llama-3.1-8B at 8,192 tokens a row on 8 H100s (FSDP 8, bf16): the
packed step with --document-length E[len^2]/E[len] of the same lognormal
corpus scaled to 8,192, the padded one unpacked.

    /usr/bin/python3 test/bench/packed_bench.py --bin-dir build/bin \\
        --seq 1024 --simulate docs/hardware/h100-sxm.json
"""

import json
import math
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile

import benchutil
from benchutil import F32, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
EOS = 0


def lognormal_lengths(n, mean, cap, seed=0):
    """`n` document lengths (tokens, the end-of-document one included),
    lognormal with sigma 1 and mean `mean`, between 2 and `cap`."""
    rng = random.Random(seed)
    sigma = 1.0
    mu = math.log(mean) - sigma * sigma / 2
    return [max(2, min(cap, int(round(rng.lognormvariate(mu, sigma)))))
            for _ in range(n)]


def write_tokens(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(tokens)}i", *tokens))


def corpora(tmp, lengths, seq, vocab):
    """The packed corpus (documents back to back) and the padded one (one
    document a row of S + 1 tokens); the padded rows' useful share."""
    rng = random.Random(1)
    docs = [[rng.randrange(1, vocab) for _ in range(n - 1)] + [EOS]
            for n in lengths]
    packed = os.path.join(tmp, "packed.bin")
    write_tokens(packed, [t for d in docs for t in d])
    padded = os.path.join(tmp, "padded.bin")
    rows = []
    for d in docs:
        d = d[:seq]
        rows += d + [EOS] * (seq + 1 - len(d))
    write_tokens(padded, rows)
    fill = sum(min(n, seq) for n in lengths) / (len(lengths) * seq)
    return packed, padded, fill


def measure(args, tmp, vocab):
    lengths = lognormal_lengths(args.documents, args.seq / 8, 4 * args.seq)
    packed_data, padded_data, padded_fill = corpora(tmp, lengths, args.seq,
                                                    vocab)
    parallel = os.path.join(tmp, "f32.json")
    json.dump(F32, open(parallel, "w"))
    exes = {}
    for name, flags in (("padded", []), ("packed", ["--packed"])):
        graph = os.path.join(tmp, f"{name}.json")
        run([os.path.join(args.bin_dir, "fsdp-graphgen"), args.config,
             "--batch", str(args.batch), "--seq", str(args.seq), *flags,
             "-o", graph])
        exe = os.path.join(tmp, name)
        run([os.path.join(args.bin_dir, "fsdp-compile"), graph, "--parallel",
             parallel, "--passes=fsdp-build-train-step", "-o", exe])
        exes[name] = exe
    runs = {"padded": ["--data", padded_data],
            "packed": ["--data", packed_data, "--eos", str(EOS), "--pack"]}
    times = {name: [] for name in exes}
    fill = {"padded": padded_fill}
    for _ in range(args.rounds):
        for name, exe in exes.items():
            result = subprocess.run(
                ["mpirun", "--allow-run-as-root", "-np", "1", exe, "--steps",
                 str(args.steps), *runs[name]], capture_output=True,
                text=True, check=True)
            times[name] += benchutil.step_times(result.stdout)
            m = re.search(r"([0-9.]+)% of their tokens documents'",
                          result.stderr)
            if m:
                fill["packed"] = float(m.group(1)) / 100
    tokens = args.batch * args.seq
    print(f"{args.model}, batch {args.batch} x {args.seq}, "
          f"{args.documents} documents, lognormal lengths mean "
          f"{sum(lengths) / len(lengths):.0f} (S/8 = {args.seq / 8:.0f}), "
          f"longest {max(lengths)}")
    print(f"{'rows':>8} {'step ms':>9} {'documents share':>16} "
          f"{'useful tokens/s':>16} {'vs padded':>10}")
    useful = {}
    for name in ("padded", "packed"):
        t = statistics.median(times[name])
        useful[name] = tokens * fill[name] / (t / 1000)
        print(f"{name:>8} {t:9.1f} {100 * fill[name]:15.1f}% "
              f"{useful[name]:16.0f} {useful[name] / useful['padded']:10.2f}")
    return fill["packed"]


def predicted(args, tmp, packed_fill):
    """The simulator's useful tokens/s per GPU, Llama-3.1-8B, FSDP 8, bf16,
    8,192 tokens a row, padded and packed, for the corpus at that length."""
    seq = 8192
    lengths = lognormal_lengths(args.documents, seq / 8, 4 * seq)
    cut = [min(n, seq) for n in lengths]
    fill_padded = sum(cut) / (len(cut) * seq)
    weighted = round(sum(n * n for n in cut) / sum(cut))
    print(f"predicted on {os.path.basename(args.simulate)}: "
          f"Llama-3.1-8B, 8 GPUs (FSDP 8, bf16), batch 8 x {seq}, "
          f"length-weighted mean document {weighted} tokens")
    print(f"{'rows':>8} {'step ms':>9} {'tokens/s/GPU':>13} "
          f"{'useful tokens/s/GPU':>20} {'vs padded':>10}")
    config = os.path.join(ROOT, "test", "models", "llama-3.1-8b",
                          "config.json")
    out = {}
    for name, flags, compile_flags, fill in (
            ("padded", [], [], fill_padded),
            ("packed", ["--packed"], ["--document-length", str(weighted)],
             packed_fill)):
        graph = os.path.join(tmp, f"8b-{name}.json")
        run([os.path.join(args.bin_dir, "fsdp-graphgen"), config, "--batch",
             "8", "--seq", str(seq), *flags, "-o", graph])
        text = run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                    *compile_flags, "--world-size", "8",
                    "--passes=fsdp-build-train-step{param-dtype=bf16}",
                    "--simulate", args.simulate, "--source-only",
                    "--emit-source", os.path.join(tmp, f"8b-{name}.cpp")])
        step = float(re.search(r"^step time\s+(\S+) ms", text, re.M).group(1))
        rate = float(re.search(r"^tokens/s per GPU\s+(\S+)", text,
                               re.M).group(1))
        out[name] = rate * fill
        print(f"{name:>8} {step:9.1f} {rate:13.0f} {out[name]:20.0f} "
              f"{out[name] / out['padded']:10.2f}")
    print(f"(padded rows {100 * fill_padded:.1f}% documents; packed rows "
          f"{100 * packed_fill:.1f}%, as the CPU run packed them)")


def main():
    parser = benchutil.parser(__doc__, batch=2, seq=1024, steps=3,
                              config=benchutil.SMALL_LLAMA)
    parser.add_argument("--documents", type=int, default=4000)
    parser.add_argument("--simulate", metavar="HW.json")
    args = benchutil.parse_steps(parser)
    args.model = os.path.basename(args.config)
    with open(args.config) as f:
        hf = json.load(f)
    tmp = tempfile.mkdtemp(prefix="packed-bench-")
    if args.seq > hf.get("max_position_embeddings", args.seq):
        hf["max_position_embeddings"] = args.seq
        args.config = os.path.join(tmp, "config.json")
        with open(args.config, "w") as f:
            json.dump(hf, f)
    packed_fill = measure(args, tmp, hf["vocab_size"])
    if args.simulate:
        predicted(args, tmp, packed_fill)
    return 0


if __name__ == "__main__":
    sys.exit(main())

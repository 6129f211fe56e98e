"""Context-parallel benchmark.

1. One training step of a 2-rank cp 2 program on a long sequence, ring
   attention (p2p) against all_gather, f32, with the runtime's
   communication thread; runs interleaved. Prints the median step time,
   the exposed (waited) cp communication per step and, with --simulate,
   the simulator's prediction of the same scheduled programs on that
   hardware.
2. With --long-context, the compile-only long-context configurations of
   issue 41: Llama-3.1-8B at 131,072 tokens on 8 ranks (cp 8) and
   Llama-3.1-70B at 131,072 tokens on 64 ranks (tp 8 x cp 8, SP), full
   activation checkpointing, bf16: compile time and estimated peak per
   rank.

    /usr/bin/python3 test/bench/cp_bench.py --bin-dir build/bin \\
        --config test/bench/small-llama.json --seq 2048 \\
        --simulate docs/hardware/h100-sxm.json --long-context
"""

import json
import os
import re
import sys
import time

import benchutil
from benchutil import F32, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def ring_against_gather(args, tmp, graph):
    comms = ("p2p", "all_gather")
    timed = benchutil.interleaved(
        args, graph, [(comm, 2, dict(F32, cp_size=2, cp_comm_type=comm),
                       os.path.join(tmp, comm)) for comm in comms], "{cp}")
    print(f"cp 2, batch {args.batch} x {args.seq} tokens, {args.model}")
    print(f"{'cp_comm_type':>12} " +
          benchutil.header(args, "cp", "vs all_gather", 14))
    for comm in comms:
        print(f"{comm:>12} " +
              benchutil.columns(timed, comm, "all_gather", 14))


def long_context(args, tmp):
    print("long context, compile-only (bf16, full activation checkpointing)")
    print(f"{'model':>14} {'tokens':>8} {'ranks':>6} {'mesh':>12} "
          f"{'compile s':>10} {'est. peak GiB':>14}")
    for model, ranks, parallel in (
            ("llama-3.1-8b", 8, {"cp_size": 8}),
            ("llama-3.1-70b", 64, {"tp_size": 8, "cp_size": 8,
                                   "sequence_parallel": True})):
        graph = os.path.join(tmp, f"{model}.json")
        run([os.path.join(args.bin_dir, "fsdp-graphgen"),
             os.path.join(ROOT, "test", "models", model, "config.json"),
             "--batch", "1", "--seq", "131072", "-o", graph])
        config = os.path.join(tmp, f"{model}-parallel.json")
        json.dump(dict(parallel, activation_checkpointing=True),
                  open(config, "w"))
        start = time.perf_counter()
        out = run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                   "--parallel", config, "--world-size", str(ranks),
                   "--passes=fsdp-build-train-step", "--report",
                   "--source-only", "--emit-source",
                   os.path.join(tmp, f"{model}.cpp")])
        seconds = time.perf_counter() - start
        peak = int(re.search(r"^estimated peak\s+(\d+)", out,
                             re.M).group(1)) / 2**30
        mesh = " x ".join(f"{k[:2]} {v}" for k, v in parallel.items()
                          if k.endswith("_size"))
        print(f"{model:>14} {131072:8} {ranks:6} {mesh:>12} "
              f"{seconds:10.2f} {peak:14.1f}")


def main():
    parser = benchutil.parser(__doc__, batch=1, seq=2048, steps=3,
                              config=benchutil.SMALL_LLAMA)
    parser.add_argument("--simulate", metavar="HW.json")
    parser.add_argument("--long-context", action="store_true")
    args = benchutil.parse_steps(parser)
    args.model = os.path.basename(args.config)
    with open(args.config) as f:
        hf = json.load(f)
    if args.seq > hf.get("max_position_embeddings", args.seq):
        # A long sequence for a small model: raise its context.
        hf["max_position_embeddings"] = args.seq
        long_config = os.path.join(
            os.environ.get("TMPDIR", "/tmp"),
            f"cp-bench-{os.getpid()}-config.json")
        with open(long_config, "w") as f:
            json.dump(hf, f)
        args.config = long_config
    tmp, graph = benchutil.graph(args, "cp-bench-")
    ring_against_gather(args, tmp, graph)
    if args.long_context:
        long_context(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

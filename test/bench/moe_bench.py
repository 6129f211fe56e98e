"""Expert-parallel benchmark.

1. One training step of a small Qwen3-MoE (16 experts, top-2) on 2 and 4
   ranks: expert parallelism (ep = ranks: each rank holds 16 / ep experts,
   tokens travel by all_to_all_v) against experts replicated (ep 1: FSDP
   gathers every expert on every rank, each rank runs its own tokens), f32,
   interleaved. Prints the median step time, the exposed (waited) ep
   communication per step and, with --simulate, the simulator's prediction.
2. With --published, compile-only: Qwen3-30B-A3B on 8 H100s at ep 8 (bf16,
   4,096 tokens a rank, with and without activation checkpointing), the
   compile time, estimated peak, dispatch bytes, and the predicted tokens/s
   per GPU beside Automodel's published 12,040.

    /usr/bin/python3 test/bench/moe_bench.py --bin-dir build/bin \\
        --simulate docs/hardware/h100-sxm.json --published
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
SMALL_MOE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "small-moe.json")


def ep_against_replicated(args, tmp, graph, ranks):
    eps = (ranks, 1)
    timed = benchutil.interleaved(
        args, graph, [(ep, ranks, dict(F32, ep_size=ep),
                       os.path.join(tmp, f"ep{ep}-of-{ranks}"))
                      for ep in eps], "{ep}")
    for ep in eps:
        label = "experts replicated" if ep == 1 else f"ep {ep}"
        print(f"{ranks:>5} {label:>19} " +
              benchutil.columns(timed, ep, 1, 15))


def published(args, tmp):
    print("Qwen3-30B-A3B, 8 ranks, ep 8, bf16, 4,096 tokens a rank "
          "(Automodel: 12,040 tokens/s/GPU on 8 H100s)")
    print(f"{'checkpointing':>14} {'compile s':>10} {'est. peak GiB':>14} "
          f"{'a2a_v GB/step':>14} {'pred. tokens/s/GPU':>19}")
    graph = os.path.join(tmp, "qwen3-30b-a3b.json")
    run([os.path.join(args.bin_dir, "fsdp-graphgen"),
         os.path.join(ROOT, "test", "models", "qwen3-30b-a3b", "config.json"),
         "--batch", "8", "--seq", "4096", "-o", graph])
    for checkpointing in (False, True):
        config = os.path.join(tmp, f"q30-{checkpointing}.json")
        json.dump({"ep_size": 8, "activation_checkpointing": checkpointing},
                  open(config, "w"))
        start = time.perf_counter()
        out = run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                   "--parallel", config, "--world-size", "8",
                   "--passes=fsdp-build-train-step", "--report",
                   "--simulate", args.simulate, "--source-only",
                   "--emit-source", os.path.join(tmp, "q30.cpp")])
        seconds = time.perf_counter() - start
        peak = int(re.search(r"^estimated peak\s+(\d+)", out,
                             re.M).group(1)) / 2**30
        a2a = int(re.search(r"^all_to_all_v\s+\S+\s+\d+\s+(\d+)", out,
                            re.M).group(1)) / 1e9
        tokens = float(re.search(r"^tokens/s per GPU\s+(\S+)", out,
                                 re.M).group(1))
        print(f"{'full' if checkpointing else 'none':>14} {seconds:10.2f} "
              f"{peak:14.1f} {a2a:14.1f} {tokens:19.0f}")


def main():
    parser = benchutil.parser(__doc__, batch=4, seq=512, steps=3,
                              config=SMALL_MOE)
    parser.add_argument("--simulate", metavar="HW.json")
    parser.add_argument("--published", action="store_true")
    parser.add_argument("--ranks", default="2,4")
    args = benchutil.parse_steps(parser)
    tmp, graph = benchutil.graph(args, "moe-bench-")
    print(f"small Qwen3-MoE (16 experts, top-2), batch {args.batch} x "
          f"{args.seq} tokens, f32")
    print(f"{'ranks':>5} {'experts':>19} " +
          benchutil.header(args, "ep", "vs replicated", 15))
    for ranks in map(int, args.ranks.split(",")):
        ep_against_replicated(args, tmp, graph, ranks)
    if args.published:
        if not args.simulate:
            parser.error("--published needs --simulate")
        published(args, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())

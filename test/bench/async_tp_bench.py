"""Async TP benchmark: one training step of a TP + SP program compiled
synchronously and with enable_async_tensor_parallel (fsdp-async-tp), on 2
and 4 ranks, f32, with the runtime's communication thread. Runs are
interleaved; prints the median step time, the exposed (waited) tp
communication per step, and with --simulate the simulator's prediction of
the same programs on that hardware.

    /usr/bin/python3 test/bench/async_tp_bench.py --bin-dir build/bin \\
        --config test/bench/small-llama.json --batch 4 --seq 256 \\
        --simulate docs/hardware/h100-sxm.json
"""

import os
import sys

import benchutil
from benchutil import F32

SP_F32 = dict(F32, sequence_parallel=True)


def main():
    parser = benchutil.parser(__doc__, batch=4, seq=256, steps=3)
    parser.add_argument("--simulate", metavar="HW.json")
    args = parser.parse_args()
    tmp, graph = benchutil.graph(args, "async-tp-bench-")
    keys = [(tp, asynchronous) for tp in (2, 4)
            for asynchronous in (False, True)]
    timed = benchutil.interleaved(
        args, graph, [((tp, asynchronous), tp,
                       dict(SP_F32, tp_size=tp,
                            enable_async_tensor_parallel=asynchronous),
                       os.path.join(tmp, f"p{tp}{asynchronous}"))
                      for tp, asynchronous in keys], "{tp}")
    print(f"{'tp':>3} {'tp collectives':>15} " +
          benchutil.header(args, "tp", "vs sync", 8))
    for key in keys:
        print(f"{key[0]:3} {'async ring' if key[1] else 'sync':>15} " +
              benchutil.columns(timed, key, (key[0], False), 8))
    return 0


if __name__ == "__main__":
    sys.exit(main())

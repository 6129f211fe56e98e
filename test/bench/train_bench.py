"""One process, one training step: a compiled program against Hugging Face
transformers + torch.optim.AdamW in PyTorch eager, f32 and bf16, at each
--threads count. For each (dtype, threads), --rounds interleaved pairs run
the two sides one after the other (alternating which goes first), each a
fresh process pinned to the same first `threads` cores and running --steps
steps; a run's time is the median of its steps after the first (warm-up),
a pair's speed ratio is torch's time over ours, and the table shows the
medians. bf16 means our bf16 param_dtype with f32 masters and gradient
reduction against torch.autocast("cpu", torch.bfloat16) with f32 weights.

    /usr/bin/python3 test/bench/train_bench.py --bin-dir build/bin \\
        [--config test/bench/train-llama.json] [--batch 4] [--seq 256] \\
        [--steps 5] [--rounds 3] [--threads 1,2] [--dtypes f32,bf16] \\
        [--torch-python PYTHON] [--report] [--prog DTYPE=PROGRAM ...]

--torch-python is an interpreter with torch and transformers (default: the
PyTorch 2.x virtual environment .ci/setup makes). --report adds our
per-kernel-class time per step of the last run. --prog f32=PATH runs a
program compiled before (another build's, for a before/after table) in
place of compiling one; it must be the same graph and mixed precision.
"""

import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchutil  # noqa: E402

TORCH_PYTHON = os.path.expanduser(
    "~/.cache/fsdp-mlir/venv-torch-2.15.0/bin/python")
MIXED = {
    "f32": benchutil.F32,
    "bf16": {"mp_policy": {"param_dtype": "bfloat16",
                           "reduce_dtype": "float32",
                           "output_dtype": "bfloat16"}},
}
REPORT_LINE = re.compile(r"^(\w+)\s+(\d+)\s+([\d.]+)$")


def mixed_config(tmp, dtype):
    """Writes the parallel.json of `dtype`'s mixed precision into `tmp`."""
    path = os.path.join(tmp, dtype + ".json")
    with open(path, "w") as f:
        json.dump(MIXED[dtype], f)
    return path


def pinned(threads, cmd):
    """`cmd` on the first `threads` cores with that many threads."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    return subprocess.run(["taskset", "-c", ",".join(map(str, cores))] + cmd,
                          check=True, capture_output=True, text=True,
                          env=env).stdout


def median_step(out, steps):
    times = benchutil.step_times(out)
    if len(times) != steps - 1:
        sys.exit(f"error: expected {steps} step lines, got:\n{out}")
    return statistics.median(times)


def kernel_ms(out, steps):
    """ms per step of each kernel class in a --report."""
    rows = {}
    for line in out.splitlines():
        m = REPORT_LINE.match(line.strip())
        if m:
            rows[m.group(1)] = float(m.group(3)) / steps
    return rows


def main():
    p = benchutil.parser(__doc__, batch=4, seq=256, steps=5,
                         config=os.path.join(HERE, "train-llama.json"))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--torch-python", default=TORCH_PYTHON)
    p.add_argument("--report", action="store_true")
    p.add_argument("--prog", action="append", default=[],
                   metavar="DTYPE=PROGRAM")
    args = benchutil.parse_steps(p)
    given = dict(item.split("=", 1) for item in args.prog)
    tmp, graph = benchutil.graph(args, "train-bench-")
    rows = []
    for dtype in args.dtypes.split(","):
        parallel = mixed_config(tmp, dtype)
        prog = given.get(dtype) or os.path.join(tmp, "step-" + dtype)
        if dtype not in given:
            benchutil.run([os.path.join(args.bin_dir, "fsdp-compile"), graph,
                           "--parallel", parallel,
                           "--passes=fsdp-build-train-step", "-o", prog])
        ours_cmd = [prog, "--steps", str(args.steps)]
        torch_cmd = [args.torch_python,
                     os.path.join(HERE, "torch_train_step.py"), args.config,
                     "--batch", str(args.batch), "--seq", str(args.seq),
                     "--steps", str(args.steps), "--dtype", dtype]
        for threads in map(int, args.threads.split(",")):
            ours, theirs, ratios = [], [], []
            for r in range(args.rounds):
                sides = [("ours", ours_cmd),
                         ("torch", torch_cmd + ["--threads", str(threads)])]
                times = {}
                for name, cmd in (sides if r % 2 == 0 else sides[::-1]):
                    times[name] = median_step(pinned(threads, cmd),
                                              args.steps)
                ours.append(times["ours"])
                theirs.append(times["torch"])
                ratios.append(times["torch"] / times["ours"])
            rows.append((dtype, threads, statistics.median(ours),
                         statistics.median(theirs),
                         statistics.median(ratios)))
            print(f"{dtype} {threads} thread(s): ours "
                  f"{rows[-1][2]:.1f} ms, torch {rows[-1][3]:.1f} ms, "
                  f"speed {rows[-1][4]:.2f}x", flush=True)
            if args.report:
                out = pinned(threads, ours_cmd + ["--report"])
                print("  ours per step (ms): " + ", ".join(
                    f"{k} {v:.1f}" for k, v in
                    kernel_ms(out, args.steps).items()))
    tokens = args.batch * args.seq
    print(f"\n{tokens} tokens per step, median of {args.rounds} "
          "interleaved pairs")
    print("| | ours ms | torch ms | ours / torch speed |")
    print("|---|---|---|---|")
    for dtype, threads, o, t, ratio in rows:
        print(f"| {dtype}, {threads} thread{'s' if threads > 1 else ''} "
              f"| {o:.1f} | {t:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()

# Forward throughput of a compiled program against PyTorch eager on the CPU.
#
# PyTorch runs the reference forward of test/E2E/reference.py (the same model,
# float32, random weights, loss included) after a warm-up step. The program
# runs under mpirun on one rank; its per-step times come from its stdout
# lines `step <k> loss <v> time <ms> ms`, step 0 being the warm-up. Both use
# --threads threads (torch.set_num_threads; OMP_NUM_THREADS and
# OPENBLAS_NUM_THREADS for the program).
#
# The graph fixes batch and sequence length, so with --bin-dir the script
# runs fsdp-graphgen and fsdp-compile itself for --batch/--seq; a program
# given with --prog must have been compiled for the same shapes.
#
# Usage: /usr/bin/python3 forward_bench.py --config CONFIG.json
#            (--bin-dir build/bin | --prog PROG)
#            [--batch 8] [--seq 128] [--steps 10] [--threads 1]

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def _pin_to_threads():
    """Restricts this process to its first --threads cores before torch
    starts its thread pool, so both sides compete for the same cores (the
    program inherits the mask). Threads inherit the mask only at creation."""
    threads = 1
    for i, arg in enumerate(sys.argv):
        if arg == "--threads" and i + 1 < len(sys.argv):
            threads = int(sys.argv[i + 1])
        elif arg.startswith("--threads="):
            threads = int(arg.split("=", 1)[1])
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores[:max(1, min(threads, len(cores)))])


_pin_to_threads()
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "E2E"))
import reference  # noqa: E402

STEP_LINE = re.compile(r"^step\s+(\d+)\s+loss\s+\S+\s+time\s+(\S+)\s*ms\s*$")


def pytorch_seconds_per_step(spec, batch, seq, steps, threads):
    """Mean seconds of one eager forward (logits and loss)."""
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    params = reference.Params({
        name: 0.02 * torch.randn(shape, generator=generator)
        for name, shape in spec.parameter_shapes().items()})
    input_ids = torch.randint(0, spec.vocab, (batch, seq), generator=generator)
    position_ids = torch.arange(seq).repeat(batch, 1)
    labels = torch.randint(0, spec.vocab, (batch, seq), generator=generator)
    with torch.no_grad():
        reference.forward(spec, params, input_ids, position_ids, labels)
        start = time.perf_counter()
        for _ in range(steps):
            reference.forward(spec, params, input_ids, position_ids, labels)
        return (time.perf_counter() - start) / steps


def run_checked(command, env=None):
    """Runs `command`; exits with its output when it fails."""
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"error: '{' '.join(command)}' exited with "
                 f"{result.returncode}:\n{result.stdout}{result.stderr}")
    return result.stdout


def program_seconds_per_step(prog, steps, threads):
    """Mean seconds of the program's steps 1..steps (step 0 is warm-up)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    # Open MPI binds a lone rank to one core by default; threads need more.
    output = run_checked(["mpirun", "--allow-run-as-root", "--oversubscribe",
                          "--bind-to", "none", "-np", "1", prog,
                          "--steps", str(steps + 1)], env)
    times = {}
    for line in output.splitlines():
        match = STEP_LINE.match(line.strip())
        if match:
            times[int(match.group(1))] = float(match.group(2)) / 1e3
    timed = [times[k] for k in sorted(times) if k != 0]
    if len(timed) != steps:
        sys.exit(f"error: expected 'step <k> loss <v> time <ms> ms' lines for "
                 f"steps 0..{steps} from '{prog}', found steps "
                 f"{sorted(times)}; output:\n{output}")
    return sum(timed) / len(timed)


def compile_program(bin_dir, config, batch, seq, work):
    graph = os.path.join(work, "graph.json")
    prog = os.path.join(work, "prog")
    run_checked([os.path.join(bin_dir, "fsdp-graphgen"), config,
                 "--batch", str(batch), "--seq", str(seq), "-o", graph])
    run_checked([os.path.join(bin_dir, "fsdp-compile"), graph, "-o", prog])
    return prog


def main():
    parser = argparse.ArgumentParser(
        description="Forward tokens/s of a compiled program vs PyTorch eager.")
    parser.add_argument("--config", required=True,
                        help="Hugging Face config.json")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--bin-dir",
                        help="directory with fsdp-graphgen and fsdp-compile; "
                        "the program is compiled for --batch/--seq")
    source.add_argument("--prog", help="a program already compiled for "
                        "--batch/--seq from --config")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10,
                        help="timed steps, after one warm-up step")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if min(args.batch, args.seq, args.steps, args.threads) < 1:
        parser.error("--batch, --seq, --steps and --threads must be >= 1")

    try:
        with open(args.config) as f:
            spec = reference.ModelSpec(json.load(f))
    except (reference.DumpError, KeyError, OSError, ValueError) as e:
        sys.exit(f"error: cannot read '{args.config}': {e}")

    tokens = args.batch * args.seq
    with tempfile.TemporaryDirectory() as work:
        prog = args.prog or compile_program(args.bin_dir, args.config,
                                            args.batch, args.seq, work)
        ours = tokens / program_seconds_per_step(prog, args.steps,
                                                 args.threads)
    theirs = tokens / pytorch_seconds_per_step(spec, args.batch, args.seq,
                                               args.steps, args.threads)
    print(f"forward tokens/s: ours {ours:.1f} pytorch {theirs:.1f} "
          f"ratio {ours / theirs:.3f}")


if __name__ == "__main__":
    main()

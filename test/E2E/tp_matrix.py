# Differential check of parallel configurations: for one model config,
# compiles the 1-rank training step and the N-rank one for each (tp,
# sequence parallel) pair, or for each --case (fsdp-compile flags on N
# ranks: FSDP, HSDP, TP x FSDP, ...), runs them, and compares
#   - one step with optimizer=none: the loss, the logits and every gradient
#     (tensor-parallel blocks joined, replicated tensors on every rank);
#   - three (--adamw-steps) AdamW steps (lr 1e-4, eps 1e-6): the losses of
#     each step and every parameter and optimizer moment after the third
#     step, norm-wise (||a - b|| / ||b|| per tensor; the elementwise maximum
#     is printed too). AdamW divides each element's step by its own
#     gradient's magnitude, so an element whose gradient is tiny carries
#     that gradient's f32 rounding, large relative to it, into a full-size
#     step: elementwise, the bound would hold or not by the last bits of
#     the machine's vector level (lm_head.weight of the 257-row vocabulary
#     at tp 4 + SP: 1.004e-5 with AVX2, under 1e-5 with AVX-512). eps = 1e-6
#     keeps elements whose gradient is zero in exact arithmetic (GPT-2's key
#     bias: softmax ignores it) from stepping by +-lr on rounding noise
#     alone.
# Prints one line per configuration; exits 1 if any comparison fails.
#
# Usage: /usr/bin/python3 tp_matrix.py CONFIG.json --work DIR --bin DIR
#            --mpirun "mpirun ..." [--tp 2,4] [--sp off,on] [--rtol 1e-5]
#            [--parallel parallel.json] [--batch B] [--seq S]
#            [--step-options OPTS]
#            [--case LABEL RANKS "FLAGS" ...] [--compile-flags "FLAGS"]
#            [--graph-flags "FLAGS"] [--run-flags "FLAGS"]

import argparse
import os
import shlex
import subprocess
import sys

import harness

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, log=None):
    """Runs `cmd`; returns its stdout, or raises with its output."""
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                           f"{result.stdout}{result.stderr}")
    if log:
        with open(log, "w") as f:
            f.write(result.stdout)
    return result.stdout


def compare(script, *args):
    """Runs a compare_*.py script; returns (first line, failed)."""
    result = subprocess.run([sys.executable, os.path.join(HERE, script),
                             *args], capture_output=True, text=True)
    lines = (result.stdout + result.stderr).strip().splitlines()
    return lines, result.returncode != 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    harness.add_run_arguments(parser)
    parser.add_argument("--tp", default="2,4")
    parser.add_argument("--sp", default="off,on")
    parser.add_argument("--rtol", default="1e-5")
    parser.add_argument("--param-rtol", default="1e-5",
                        help="tolerance of the parameters after the AdamW "
                             "steps")
    parser.add_argument("--lr", default="1e-4")
    parser.add_argument("--adamw-steps", type=int, default=3)
    parser.add_argument("--replicas-bitwise", action="store_true",
                        help="also require bit-identical replicas of every "
                             "updated tensor across the ranks holding it")
    parser.add_argument("--eps", default="1e-6")
    parser.add_argument("--case", nargs=3, action="append", default=[],
                        metavar=("LABEL", "RANKS", "FLAGS"),
                        help="instead of the tp x sp matrix: run FLAGS "
                             "(fsdp-compile options) on RANKS ranks")
    parser.add_argument("--precision", default="f32",
                        help="param, reduce and output dtype of every "
                             "program (a parallel program otherwise follows "
                             "FSDP2Manager's bf16 policy); 'policy' leaves "
                             "them to the parallel config")
    parser.add_argument("--step-options", default="",
                        help="more fsdp-build-train-step options for every "
                             "program (e.g. microbatches=2)")
    parser.add_argument("--compile-flags", default="",
                        help="fsdp-compile options for every program, the "
                             "1-rank one too (e.g. --max-cpu-isa avx2)")
    parser.add_argument("--graph-flags", default="",
                        help="more fsdp-graphgen flags (--packed)")
    parser.add_argument("--run-flags", default="",
                        help="more flags for every run (--data F --eos ID)")
    parser.add_argument("--batch", default="2",
                        help="the graph's (global) batch size")
    parser.add_argument("--seq", default="16",
                        help="the graph's sequence length")
    parser.add_argument("--parallel", default="",
                        help="a parallel.json for the tp runs (its tp_size "
                             "and sequence_parallel are overridden)")
    args = parser.parse_args()
    if args.precision != "policy":
        args.step_options += (f" param-dtype={args.precision}"
                              f" reduce-dtype={args.precision}"
                              f" output-dtype={args.precision}")
    os.makedirs(args.work, exist_ok=True)
    tool = lambda name: os.path.join(args.bin, name)  # noqa: E731
    mpirun = shlex.split(args.mpirun)
    graph = os.path.join(args.work, "graph.json")
    run([tool("fsdp-graphgen"), args.config, "--batch", args.batch,
         "--seq", args.seq, *shlex.split(args.graph_flags), "-o", graph])
    model = os.path.basename(os.path.dirname(os.path.abspath(args.config)))

    def build_and_run(name, ranks, flags):
        """Gradient dump and AdamW dump + log of one configuration."""
        out = {}
        for kind, passes, steps in (
                ("grad", f"fsdp-build-train-step{{optimizer=none "
                         f"{args.step_options}}}", 1),
                ("adamw", f"fsdp-build-train-step{{lr={args.lr} eps={args.eps} "
                          f"{args.step_options}}}", args.adamw_steps)):
            exe = os.path.join(args.work, f"{name}-{kind}")
            run([tool("fsdp-compile"), graph,
                 *shlex.split(args.compile_flags), *flags,
                 f"--passes={passes}", "-o", exe])
            dump = exe + ".d"
            log = exe + ".log"
            run([*mpirun, "-np", str(ranks), exe, "--steps", str(steps),
                 *shlex.split(args.run_flags), "--dump-dir", dump,
                 "--dump-step", str(steps - 1)], log)
            out[kind] = (dump, log)
        return out

    base = build_and_run("1rank", 1, [])
    failed = False
    cases = [(label, int(ranks), shlex.split(flags))
             for label, ranks, flags in args.case]
    if not cases:
        for tp in [int(t) for t in args.tp.split(",")]:
            for sp in args.sp.split(","):
                flags = ["--tp", str(tp)]
                if sp == "on":
                    flags.append("--sequence-parallel")
                if args.parallel:
                    flags += ["--parallel", args.parallel]
                cases.append((f"tp={tp} sp={sp}", tp, flags))
    for label, ranks, flags in cases:
        name = label.replace(" ", "-").replace("=", "")
        try:
            many = build_and_run(name, ranks, flags)
        except RuntimeError as e:
            print(f"{model} {label}: FAIL {e}")
            failed = True
            continue
        grads, bad1 = compare("compare_ranks.py", base["grad"][0],
                              many["grad"][0], "--ranks", str(ranks),
                              "--rtol", args.rtol)
        params, bad2 = compare("compare_ranks.py", base["adamw"][0],
                               many["adamw"][0], "--ranks", str(ranks),
                               "--rtol", args.param_rtol, "--norm",
                               *(["--replicas-bitwise"]
                                 if args.replicas_bitwise else []))
        losses, bad3 = compare("compare_losses.py", base["adamw"][1],
                               many["adamw"][1], "--rtol", args.rtol)
        print(f"{model} {label}: step 1 {grads[0]}; "
              f"after {args.adamw_steps} adamw steps {params[0]}; losses {losses[0]}")
        for line in grads[1:] + params[1:] + losses[1:]:
            print(f"  {line}")
        failed |= bad1 or bad2 or bad3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

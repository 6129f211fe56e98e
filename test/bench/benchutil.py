"""What the interleaved benchmarks share: running a tool, their command
line, the graph they compile, f32 mixed precision, reading a program's
step times, and timing parallel variants of one training step and
printing their table."""

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

# The small model the benchmarks default to.
SMALL_LLAMA = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "small-llama.json")

F32 = {"mp_policy": {"param_dtype": "float32", "reduce_dtype": "float32",
                     "output_dtype": "float32"}}


def run(cmd):
    """Runs `cmd`, fails on a non-zero exit, returns its stdout."""
    return subprocess.run(cmd, check=True, capture_output=True,
                          text=True).stdout


def parser(doc, batch, seq, steps, config=None):
    """The common options: --bin-dir, --config (required unless `config`
    gives a default), --batch, --seq, --steps, --rounds."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--config", required=config is None, default=config)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--seq", type=int, default=seq)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--rounds", type=int, default=3)
    return p


def parse_steps(p, least=2):
    """Parses `p`'s command line; --steps must leave steps after the first
    (a warm-up) to time."""
    args = p.parse_args()
    if args.steps < least:
        p.error(f"--steps must be at least {least} (the first is a warm-up)")
    return args


def graph(args, prefix):
    """A temporary folder and the graph of --config at --batch x --seq in it."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    path = os.path.join(tmp, "g.json")
    run([os.path.join(args.bin_dir, "fsdp-graphgen"), args.config, "--batch",
         str(args.batch), "--seq", str(args.seq), "-o", path])
    return tmp, path


def step_times(out):
    """The step times of a program's log, without the first (warm-up)."""
    return [float(m) for m in re.findall(
        r"^step \d+ loss \S+ time (\S+) ms", out, re.M)][1:]


def simulate(cmd, hardware, source, group):
    """The simulator's predicted step time and exposed communication of
    `group` (e.g. "{tp}"), ms, for the fsdp-compile command `cmd` on the
    hardware file; writes the program's source to `source`."""
    out = run(cmd + ["--simulate", hardware, "--source-only",
                     "--emit-source", source])
    row = re.search(r"^" + re.escape(group) +
                    r"\s+\S+(?:\s+\S+)?\s+\S+\s+\S+\s+(\S+)$", out, re.M)
    return (float(re.search(r"^step time\s+(\S+) ms", out, re.M).group(1)),
            float(row.group(1)) if row else 0.0)


def exposed(out, group):
    """The waited communication of `group` (e.g. "{tp}") per step of a
    --report, ms."""
    row = re.search(r"^" + re.escape(group) + r"\s+\S+\s+\S+\s+(\S+)$", out,
                    re.M)
    return float(row.group(1)) if row else 0.0


def interleaved(args, graph, variants, group):
    """Compiles the training step of `graph` for each (key, ranks, parallel,
    exe) of `variants`, on `ranks` ranks with the parallel config `parallel`
    (written to exe.json), into `exe`, then runs the programs --rounds
    times, interleaved, with --report. Returns {key: step times}, {key:
    exposed `group` ms of each run} and, with --simulate, {key: the
    simulator's (step ms, exposed `group` ms)}."""
    predicted = {}
    for key, ranks, parallel, exe in variants:
        with open(exe + ".json", "w") as f:
            json.dump(parallel, f)
        cmd = [os.path.join(args.bin_dir, "fsdp-compile"), graph,
               "--parallel", exe + ".json", "--world-size", str(ranks),
               "--passes=fsdp-build-train-step"]
        run(cmd + ["-o", exe])
        if args.simulate:
            predicted[key] = simulate(cmd, args.simulate, exe + ".cpp", group)
    times = {key: [] for key, _, _, _ in variants}
    waits = {key: [] for key, _, _, _ in variants}
    for _ in range(args.rounds):
        for key, ranks, _, exe in variants:
            out = run(["mpirun", "--allow-run-as-root", "--oversubscribe",
                       "-np", str(ranks), exe, "--steps", str(args.steps),
                       "--report"])
            times[key] += step_times(out)
            waits[key].append(exposed(out, group))
    return times, waits, predicted


def header(args, axis, versus, width):
    """The titles of `columns`: step ms, the speedup `versus` (`width`
    wide), the exposed `axis` communication and, with --simulate, the
    predictions."""
    line = (f"{'step ms':>9} {versus:>{width}} "
            f"{'exposed ' + axis + ' ms/step':>19}")
    if args.simulate:
        line += (f" {'predicted ms':>13} "
                 f"{'pred. exposed ' + axis + ' ms':>20}")
    return line


def columns(timed, key, base, width):
    """`key`'s columns of an `interleaved` result `timed`: the median step
    ms, the speedup over `base` (`width` wide), the median exposed ms and,
    when simulated, the predicted step and exposed ms."""
    times, waits, predicted = timed
    t = statistics.median(times[key])
    line = (f"{t:9.1f} {statistics.median(times[base]) / t:{width}.3f} "
            f"{statistics.median(waits[key]):19.1f}")
    if predicted:
        line += f" {predicted[key][0]:13.3f} {predicted[key][1]:20.3f}"
    return line

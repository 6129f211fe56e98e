# Checkpoints and faults of compiled training programs, run for real.
#
#   resume  For each --case (LABEL RANKS "fsdp-compile flags"): 6 AdamW steps
#           in one run equal 3 steps, --save, then --resume and 3 more:
#           the losses' text and every dumped tensor (parameters, optimizer
#           moments, outputs) on every rank, byte for byte.
#   reshard Trains --source 3 steps and saves; then each --case resumes that
#           checkpoint on its own mesh (the first case one rank): every
#           parameter and optimizer moment it loaded equals, bit for bit,
#           the block of the one-rank load (and the source's own resume).
#   faults  The fault table: a kill -9 inside a save, a full disk, a save
#           path that cannot be written, a NaN loss, SIGTERM, a stopped rank,
#           malformed safetensors headers, bad token files. Each case checks
#           the exit status, the message and what is left on disk.
#
# Usage: /usr/bin/python3 ckpt_check.py MODE CONFIG.json --work DIR --bin DIR
#            --mpirun "mpirun ..." [--batch 4] [--case LABEL RANKS FLAGS ...]
#            [--source LABEL RANKS FLAGS]

import argparse
import filecmp
import json
import os
import shlex
import signal
import struct
import subprocess
import sys
import time

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
# f32 everywhere, so meshes compare bit for bit; a clip that clips.
STEP = ("fsdp-build-train-step{lr=3e-3 max-grad-norm=0.5 param-dtype=f32 "
        "reduce-dtype=f32 output-dtype=f32}")


class Runner:
    def __init__(self, args):
        self.args = args
        self.mpirun = shlex.split(args.mpirun)
        os.makedirs(args.work, exist_ok=True)
        self.graph = os.path.join(args.work, "graph.json")
        self.run([self.tool("fsdp-graphgen"), args.config, "--batch",
                  args.batch, "-o", self.graph])

    def tool(self, name):
        return os.path.join(self.args.bin, name)

    def path(self, *parts):
        return os.path.join(self.args.work, *parts)

    def run(self, cmd, ok=True, env=None, timeout=300):
        result = subprocess.run(cmd, capture_output=True, text=True,
                                env=env, timeout=timeout)
        if ok and result.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                     f"{result.stdout}{result.stderr}")
        return result

    def compile(self, name, flags, passes=STEP):
        exe = self.path(name)
        self.run([self.tool("fsdp-compile"), self.graph, *flags,
                  f"--passes={passes}", "-o", exe])
        return exe

    def launch(self, ranks, exe, *options, limit=None, **kw):
        """Runs `exe` on `ranks` ranks; `limit` caps the size of the files
        each rank may write (KiB), as a full disk would."""
        command = [exe, *options]
        if limit:
            command = ["/bin/sh", "-c", f'ulimit -f {limit}; exec "$@"',
                       "sh", *command]
        return self.run([*self.mpirun, "-np", str(ranks), *command], **kw)


def losses(text):
    return [" ".join(line.split()[:4]) for line in text.splitlines()
            if line.startswith("step ")]


def same_dumps(a, b, ranks):
    """Number of tensors compared; raises on the first that differs."""
    count = 0
    for r in range(ranks):
        da, db = os.path.join(a, f"rank{r}"), os.path.join(b, f"rank{r}")
        for name in sorted(os.listdir(da)):
            if not name.endswith(".bin"):
                continue
            if not filecmp.cmp(os.path.join(da, name),
                               os.path.join(db, name), shallow=False):
                raise RuntimeError(f"rank {r}: {name} differs")
            count += 1
    return count


def resume(rn, cases):
    failed = False
    for label, ranks, flags in cases:
        tag = label.replace(" ", "_").replace("=", "")
        exe = rn.compile(tag, flags)
        whole = rn.launch(ranks, exe, "--steps", "6", "--dump-dir",
                          rn.path(tag + "-6"), "--dump-step", "5")
        ckpt = rn.path(tag + "-ckpt")
        first = rn.launch(ranks, exe, "--steps", "3", "--save", ckpt)
        second = rn.launch(ranks, exe, "--steps", "3", "--resume", ckpt,
                           "--dump-dir", rn.path(tag + "-3+3"),
                           "--dump-step", "2")
        a, b = losses(whole.stdout), losses(first.stdout + second.stdout)
        try:
            if a != b:
                raise RuntimeError(f"losses differ:\n{a}\n{b}")
            n = same_dumps(rn.path(tag + "-6"), rn.path(tag + "-3+3"), ranks)
            print(f"{label}: 6 steps = 3 + save + resume + 3: {len(a)} losses "
                  f"and {n} tensors (all ranks) bitwise equal")
        except RuntimeError as e:
            print(f"{label}: FAIL {e}")
            failed = True
    return failed


def reshard(rn, source, cases):
    label, ranks, flags = source
    exe = rn.compile("source", flags)
    ckpt = rn.path("source-ckpt")
    rn.launch(ranks, exe, "--steps", "3", "--save", ckpt)
    dumps = []
    for tag, (name, n, f) in enumerate([source] + cases):
        target = exe if tag == 0 else rn.compile(f"target{tag}", f)
        out = rn.path(f"loaded{tag}")
        rn.launch(n, target, "--steps", "1", "--resume", ckpt, "--dump-dir",
                  out, "--dump-step", "0")
        dumps.append((name, n, out))
    one = dumps[1]
    failed = False
    for name, n, out in [dumps[0]] + dumps[2:]:
        failed |= harness.compare_ranks(
            f"saved on {label}, loaded on {name}", one[2], out, n, "0",
            "updated.,loss,aux_loss,logits,lr,grad_sum_squares,input_ids,labels,"
            "position_ids,optimizer_step")
    return failed


def rank_pids(exe):
    out = subprocess.run(["pgrep", "-f", "^" + exe + " "],
                         capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def wait_for_step(proc, step, deadline=60):
    """Reads the program's output until it prints `step <step>`."""
    start = time.time()
    for line in proc.stdout:
        if line.startswith(f"step {step} "):
            return True
        if time.time() - start > deadline:
            break
    return False


def latest(ckpt):
    try:
        with open(os.path.join(ckpt, "latest")) as f:
            return f.read().strip()
    except OSError:
        return None


def faults(rn):
    failed = False

    def report(case, ok, detail):
        nonlocal failed
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case}: {detail}")

    exe = rn.compile("fault", [])
    two = rn.compile("fault2", ["--world-size", "2"])
    env = dict(os.environ)

    # kill -9 inside a save: the previous checkpoint and `latest` stay.
    ckpt = rn.path("kill-ckpt")
    rn.launch(1, exe, "--steps", "2", "--save", ckpt)
    env["FSDP_TEST_KILL_IN_SAVE"] = "1"
    r = rn.launch(1, exe, "--steps", "2", "--resume", ckpt, "--save", ckpt,
                  "-x", "FSDP_TEST_KILL_IN_SAVE", ok=False, env=env)
    del env["FSDP_TEST_KILL_IN_SAVE"]
    again = rn.launch(1, exe, "--steps", "1", "--resume", ckpt, ok=False)
    report("kill -9 during a save", r.returncode != 0 and
           latest(ckpt) == "step-00000002" and again.returncode == 0 and
           losses(again.stdout)[0].startswith("step 2 "),
           f"exit {r.returncode}, latest {latest(ckpt)}, resumes at "
           f"{(losses(again.stdout) or ['nothing'])[0]}")

    # --save-every 1 --keep 2: the two newest checkpoints stay.
    kept = rn.path("keep-ckpt")
    rn.launch(1, exe, "--steps", "4", "--save", kept, "--save-every", "1",
              "--keep", "2")
    steps = sorted(n for n in os.listdir(kept) if n.startswith("step-"))
    report("--save-every 1 --keep 2 over 4 steps",
           steps == ["step-00000003", "step-00000004"] and
           latest(kept) == "step-00000004",
           f"left {', '.join(steps)}, latest {latest(kept)}")

    # A full disk (a file-size limit): the save fails cleanly.
    r = rn.launch(1, exe, "--steps", "1", "--resume", ckpt, "--save", ckpt,
                  ok=False, limit=256)
    msg = [l for l in r.stderr.splitlines() if "fsdp runtime error" in l]
    report("full disk during a save", r.returncode != 0 and
           latest(ckpt) == "step-00000002" and bool(msg) and
           "File too large" in msg[0] and
           not any(n.endswith(".partial") for n in os.listdir(ckpt)),
           f"exit {r.returncode}, latest {latest(ckpt)}: "
           f"{msg[0] if msg else r.stderr[-200:]}")

    # A save path that cannot be written, before the first step.
    blocker = rn.path("a-file")
    open(blocker, "w").close()
    r = rn.launch(1, exe, "--steps", "1", "--save", blocker + "/ckpt",
                  ok=False)
    msg = [l for l in r.stderr.splitlines() if "fsdp runtime error" in l]
    report("unwritable --save path", r.returncode != 0 and
           not losses(r.stdout) and bool(msg),
           f"exit {r.returncode}, {len(losses(r.stdout))} steps run: "
           f"{msg[0] if msg else r.stderr[-200:]}")

    # A NaN loss stops the run; the last good checkpoint is not replaced.
    nan = rn.compile("nan", [], "fsdp-build-train-step{lr=1e30}")
    ckpt = rn.path("nan-ckpt")
    r = rn.launch(2, rn.compile("nan2", ["--world-size", "2"],
                                "fsdp-build-train-step{lr=1e30}"),
                  "--steps", "5", "--save", ckpt, "--save-every", "1",
                  ok=False)
    msg = [l for l in r.stderr.splitlines() if "fsdp runtime error" in l]
    report("NaN loss (2 ranks)", r.returncode != 0 and len(msg) == 1 and
           "the loss is nan" in msg[0] and latest(ckpt) == "step-00000001",
           f"exit {r.returncode}, latest {latest(ckpt)}, printed "
           f"{len(msg)} time(s): {msg[0] if msg else r.stderr[-200:]}")
    del nan

    # SIGTERM to one rank: every rank saves at the step boundary and stops.
    ckpt = rn.path("term-ckpt")
    proc = subprocess.Popen([*rn.mpirun, "-np", "2", two, "--steps",
                             "1000000", "--save", ckpt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    reached = wait_for_step(proc, 3)
    pids = rank_pids(two)
    if reached and len(pids) == 2:
        os.kill(pids[1], signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    saved = latest(ckpt)
    again = rn.launch(2, two, "--steps", "1", "--resume", ckpt, ok=False)
    next_step = losses(again.stdout)[0] if losses(again.stdout) else "none"
    report("SIGTERM to one rank", reached and proc.returncode != 0 and
           "stopped by a signal" in err and saved is not None and
           next_step.startswith(f"step {int(saved[5:])} "),
           f"exit {proc.returncode}, saved {saved}, resume runs {next_step}")

    # A stopped rank: the others time out, naming the collective.
    proc = subprocess.Popen([*rn.mpirun, "-np", "2", two, "--steps",
                             "1000000", "--collective-timeout", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    reached = wait_for_step(proc, 2)
    pids = rank_pids(two)
    start = time.time()
    if reached and len(pids) == 2:
        os.kill(pids[1], signal.SIGSTOP)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    took = time.time() - start
    msg = [l for l in err.splitlines() if "did not complete" in l]
    report("SIGSTOP on one rank", reached and proc.returncode != 0 and
           bool(msg) and took < 30,
           f"exit {proc.returncode} after {took:.1f} s: "
           f"{msg[0] if msg else err[-300:]}")

    # Malformed safetensors headers: one clean error, no exception.
    for case, header in (("a tensor entry that is a number",
                          {"lm_head.weight": 5}),
                         ("a dtype that is a number",
                          {"lm_head.weight": {"dtype": 5, "shape": [2],
                                              "data_offsets": [0, 8]}})):
        text = json.dumps(header).encode()
        bad = rn.path("bad.safetensors")
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"\0" * 8)
        r = rn.launch(1, exe, "--load", bad, ok=False)
        msg = [l for l in r.stderr.splitlines() if "fsdp runtime error" in l]
        report(f"safetensors header with {case}", r.returncode != 0 and
               bool(msg) and "terminate called" not in r.stderr,
               msg[0] if msg else r.stderr[-200:])

    # Token files, checked before the first step.
    def tokens(name, values, extra=b""):
        path = rn.path(name)
        with open(path, "wb") as f:
            f.write(struct.pack(f"<{len(values)}i", *values) + extra)
        return path
    for case, path in (
            ("a token outside the vocabulary",
             tokens("oov.bin", [1] * 5000 + [256] + [1] * 100)),
            ("a file shorter than one batch", tokens("short.bin", [1] * 20)),
            ("a size not a multiple of 4",
             tokens("odd.bin", [1] * 5000, b"\1"))):
        r = rn.launch(2, two, "--data", path, ok=False)
        msg = [l for l in r.stderr.splitlines() if "fsdp runtime error" in l]
        report(f"token file with {case}", r.returncode != 0 and
               not losses(r.stdout) and len(msg) == 1,
               f"{len(losses(r.stdout))} steps run, printed {len(msg)} "
               f"time(s): {msg[0] if msg else r.stderr[-200:]}")
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["resume", "reshard", "faults"])
    harness.add_run_arguments(parser)
    parser.add_argument("--batch", default="4")
    parser.add_argument("--case", nargs=3, action="append", default=[])
    parser.add_argument("--source", nargs=3)
    args = parser.parse_args()
    rn = Runner(args)
    cases = [(label, int(n), shlex.split(flags))
             for label, n, flags in args.case]
    if args.mode == "resume":
        failed = resume(rn, cases)
    elif args.mode == "reshard":
        label, n, flags = args.source
        failed = reshard(rn, (label, int(n), shlex.split(flags)), cases)
    else:
        failed = faults(rn)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

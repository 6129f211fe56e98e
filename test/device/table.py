# Prints the device check's table from the files run.sh left in RESULTS:
# one row per check with what was measured, the bound or goal, and the
# result. Correctness rows PASS or FAIL (exit 1 on any FAIL); performance
# rows say whether the goal was met (1.1x PyTorch eager, at least
# torch.compile, MFU >= 45%) and never fail the check by themselves.
# Nothing here is estimated: a check that did not run says so.
#
# Usage: python3 table.py BUNDLE RESULTS

import json
import os
import re
import sys

H100_PEAK = 989e12  # dense bf16, torchtitan's H100/H200 peak
H200_MATMUL = 790e12  # measured bf16 matmul peak of the H200

rows = []
failed = False


def row(check, measured, bound, result):
    global failed
    failed |= result == "FAIL"
    rows.append((check, measured, bound, result))


def read(results, name):
    """(output, exit status) of a check, or (None, None) if it did not
    run."""
    path = os.path.join(results, name + ".txt")
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        text = f.read()
    with open(os.path.join(results, name + ".rc")) as f:
        return text, int(f.read())


def last_line(text):
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return lines[-1][:60] if lines else "no output"


def ran(results, name, check, bound):
    """The output of check `name` if it ran and exited 0; else a FAIL row
    and None."""
    text, rc = read(results, name)
    if text is None:
        row(check, "did not run", bound, "FAIL")
        return None
    if rc != 0:
        what = "timed out" if rc == 124 else f"exit {rc}: {last_line(text)}"
        row(check, what, bound, "FAIL")
        return None
    return text


def refused_graph(results, name, label):
    """Whether run `name` was a --cuda-graph run that a CPU build refused
    (the dry run): a row saying so, neither PASS nor FAIL."""
    text, rc = read(results, name)
    if not text or rc == 0 or "--cuda-graph needs" not in text:
        return False
    row(label, "refused: a CPU build", "CUDA only", "n/a")
    return True


def status(ok):
    return "PASS" if ok else "FAIL"


def kernels(results, run, name, check):
    bound = "f32 1e-5, bf16/f16 1e-2"
    if ran(results, run, check, bound) is None:
        return
    text, rc = read(results, name)
    m = re.search(r"(\d+) cases, (\d+) failed, worst (\S+)", text or "")
    if not m:
        row(check, last_line(text), bound, "FAIL")
        return
    row(check, f"{m[1]} cases, {m[2]} failed, worst {m[3]}", bound,
        status(rc == 0 and m[2] == "0"))


def dumps(results, name, check, bound):
    text, rc = read(results, name)
    m = re.search(r"(\d+) tensors, max_rel_diff (\S+)(?: \((\S+)\))?",
                  text or "")
    if not m:
        row(check, last_line(text) if text else "did not run", bound, "FAIL")
        return
    where = f" ({m[3]})" if m[3] else ""
    row(check, f"{m[1]} tensors, worst {m[2]}{where}", bound,
        status(rc == 0))


def transformers_rows(results, name, check):
    text = ran(results, name, check, "")
    if text is None:
        return
    for line in text.splitlines():
        m = re.match(r"(FAIL )?\S+ vs transformers (\w+)(.*?) max_rel_err "
                     r"(\S+) tolerance (\S+)", line)
        if m:
            row(f"{check}: {m[2]}{m[3]}", m[4], m[5], status(not m[1]))
        m = re.match(r"\S+ transformers bf16 (autocast|parameters) (\w+) "
                     r"max_rel_err (\S+)", line)
        if m:
            row(f"  PyTorch bf16 {m[1]} vs float64: {m[2]}", m[3],
                "(yardstick)", "")


def flops_per_token(config, seq):
    """torchtitan's model FLOPs per token: 6 N + 12 L d T (embeddings
    counted when tied, as the output projection)."""
    d, layers = config["hidden_size"], config["num_hidden_layers"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim", d // heads)
    inter, vocab = config["intermediate_size"], config["vocab_size"]
    per_layer = d * hd * (heads + 2 * kv) + heads * hd * d + 3 * d * inter
    matmul = layers * per_layer + vocab * d
    return 6 * matmul + 12 * layers * heads * hd * seq


def memory_rows(bundle, text, name, label):
    """Rows for the peaks a --report run of program `name` measured (device,
    and host under CPU offload) against its compile report's estimates, and
    its host syncs inside the steps (the loss reads are not counted)."""
    with open(os.path.join(bundle, "ref", name + ".report.json")) as f:
        estimate = json.load(f)["memory"]
    for kind, pattern, expected in (
            ("device", r"^memory: current \d+ bytes, peak (\d+) bytes",
             estimate["estimated_peak"]),
            ("host", r"^host memory \(CPU offload\): current \d+ bytes, "
             r"peak (\d+) bytes",
             estimate.get("host", {}).get("estimated_peak"))):
        if expected is None:
            continue
        m = re.search(pattern, text, re.M)
        peak = int(m[1]) if m else None
        row(f"{label} peak {kind} memory (runtime counter)",
            f"{peak / 2**20:,.1f} MiB" if m else "not reported",
            f"report's estimate {expected / 2**20:,.1f} MiB",
            status(peak == expected))
    m = re.search(r"^memory reserved by the backend: peak (\d+) bytes", text,
                  re.M)
    if m:
        reserved = int(m[1])
        row(f"{label} device memory reserved (allocator high-water)",
            f"{reserved / 2**20:,.1f} MiB",
            f"{reserved / estimate['estimated_peak']:.2f}x the estimate", "")
    m = host_syncs(text)
    row(f"{label} host syncs in {m[2] if m else '?'} steps (loss reads "
        "excluded)", m[1] if m else "not reported", "0",
        status(bool(m) and m[1] == "0"))


def loss_rows(bundle, results, name, run, label):
    """Rows for a --steps 4 --report run `run` of program `name` against
    the CPU runtime's losses (its -vs-cpu check), its memory and, with
    --cuda-graph, the steps it replayed (all but the first)."""
    if refused_graph(results, f"{run}-run", f"{label} steps"):
        return
    text = ran(results, f"{run}-run", f"{label} steps", "")
    if text is None:
        return
    out, rc = read(results, f"{run}-vs-cpu")
    m = re.search(r"(\d+) steps max_rel_diff (\S+)", out or "")
    row(f"{label} vs CPU runtime: losses",
        f"{m[1]} steps, worst {m[2]}" if m else last_line(out), "1e-5",
        status(rc == 0 and bool(m)))
    memory_rows(bundle, text, name, label)
    if run.endswith("-graph"):
        replay_row(text, label)


def offload_speed_row(results):
    """A row for the offloaded step's time with the optimizer on the host's
    cores against as GPU kernels reading pinned memory (steps after the
    first), a measurement for --offload-optimizer's default."""
    times = []
    for run in ("small-offload-run", "small-offload-gpu-run"):
        text, rc = read(results, run)
        t = [float(x) for x in re.findall(r"^step [1-9]\d* loss \S+ time (\S+) ms",
                                          text or "", re.M)]
        times.append(sum(t) / len(t) if rc == 0 and t else None)
    if None in times:
        row("CPU offload step: host cores vs GPU kernels", "not measured", "",
            "FAIL")
        return
    row("CPU offload step: host cores vs GPU kernels",
        f"{times[0]:.2f} ms vs {times[1]:.2f} ms ({times[1] / times[0]:.2f}x)",
        "(measured)", "")


def replay_row(text, label):
    """A row for how many steps a --cuda-graph --report run replayed: all
    but the first, which runs as calls."""
    m = re.search(r"^cuda graph: (\d+) of (\d+) steps replayed", text, re.M)
    row(f"{label}: steps replayed from the CUDA graph",
        f"{m[1]} of {m[2]}" if m else "not reported", "all but the first",
        status(bool(m) and int(m[1]) == int(m[2]) - 1))


def host_syncs(text):
    """The --report line's match: (syncs, steps) as groups 1 and 2."""
    return re.search(r"host syncs per step: \S+ \((\d+) in (\d+) steps\)",
                     text)


def kernel_rows(text, top=6):
    """The `top` ABI functions with the most kernel time in a --report run
    (its "kernel function" list), per step over all the run's steps."""
    m = host_syncs(text)
    steps = int(m[2]) if m and int(m[2]) else 1
    listing = text.split("kernel function", 1)
    if len(listing) < 2:
        return
    for name, calls, ms in re.findall(r"^(fsdp_rt_\w+|\w+)\s+(\d+)\s+(\S+)$",
                                      listing[1], re.M)[:top]:
        row(f"  kernel time: {name}", f"{float(ms) / steps:.1f} ms/step",
            f"{int(calls) / steps:g} calls/step ({steps} steps)", "")


def step_time(text, label, windows):
    """The mean step time of the --log-every 4 windows ending at the given
    steps (step 0 warms up), printed as a row; None without step lines."""
    times = {int(s): float(t) for s, t in re.findall(
        r"step (\d+) loss \S+ time (\S+) ms", text)}
    if not all(w in times for w in windows):
        row(label, "no step lines", "", "FAIL")
        return None
    ms = sum(times[w] for w in windows) / len(windows)
    first = windows[0] - 3
    row(f"{label} (steps {first}-{windows[-1]})", f"{ms:.1f} ms", "", "")
    return ms


def performance(bundle, results):
    with open(os.path.join(bundle, "configs", "llama-3.2-1b.json")) as f:
        config = json.load(f)
    with open(os.path.join(bundle, "configs", "batch")) as f:
        batch = int(f.read())
    with open(os.path.join(bundle, "configs", "seq")) as f:
        seq = int(f.read())
    tokens = batch * seq
    flops = flops_per_token(config, seq) * tokens
    shape = f"Llama-3.2-1B, {batch} x {seq} tokens, bf16"

    text = ran(results, "llama1b-train", f"step time ({shape})", "")
    ours = None
    if text is not None:
        ours = step_time(text, "fsdp-mlir step time", (7, 11))
        memory_rows(bundle, text, "llama1b-train", "fsdp-mlir")
        kernel_rows(text)
    graph, text = None, None
    if not refused_graph(results, "llama1b-train-graph",
                         "fsdp-mlir step time, CUDA graph"):
        text = ran(results, "llama1b-train-graph",
                   f"step time, CUDA graph ({shape})", "")
    if text is not None:
        graph = step_time(text, "fsdp-mlir step time, CUDA graph", (7, 11))
        memory_rows(bundle, text, "llama1b-train", "fsdp-mlir, CUDA graph")
        replay_row(text, "fsdp-mlir, CUDA graph")
    # The goals are judged on the faster of the two ways to run the step.
    if graph and (not ours or graph < ours):
        row("fsdp-mlir step time judged", "CUDA graph", "", "")
        ours = graph
    text = ran(results, "llama1b-train-products",
               "step time, attention through cuBLAS products", "")
    if text is not None:
        step_time(text, "fsdp-mlir step time, attention through products",
                  (7,))
        kernel_rows(text, 2)
    if ours:
        row("fsdp-mlir tokens/s", f"{tokens / ours * 1e3:,.0f}", "", "")
        for peak, name in ((H100_PEAK, "989 TF/s"), (H200_MATMUL, "790 TF/s")):
            mfu = flops / (ours * 1e-3) / peak
            goal = "met" if mfu >= 0.45 else "missed"
            row(f"fsdp-mlir MFU vs {name}", f"{mfu:.1%}", ">= 45%",
                f"goal {goal}")
    for mode, goal in (("eager", 1.1), ("compile", 1.0)):
        name = f"torch-{mode}"
        text, rc = read(results, name)
        if text is None:
            row(f"PyTorch {mode}", "skipped", "", "")
            continue
        text = ran(results, name, f"PyTorch {mode}", "")
        if text is None:
            continue
        torch_run = json.loads(text.strip().splitlines()[-1])
        ms = torch_run["step_ms"]
        row(f"PyTorch {mode} step time", f"{ms:.1f} ms",
            f"tokens/s {torch_run['tokens_per_s']:,.0f}, MFU "
            f"{flops / (ms * 1e-3) / H100_PEAK:.1%} of 989", "")
        row(f"PyTorch {mode} max_memory_allocated / reserved",
            f"{torch_run['max_memory_allocated'] / 2**20:,.1f} MiB",
            f"reserved {torch_run['max_memory_reserved'] / 2**20:,.1f} MiB",
            "")
        if ours:
            speedup = ms / ours
            row(f"speed-up over PyTorch {mode}", f"{speedup:.2f}x",
                f">= {goal}x", f"goal {'met' if speedup >= goal else 'missed'}")


def main():
    bundle, results = sys.argv[1], sys.argv[2]
    gpu, rc = read(results, "gpu")
    print(f"device check on {gpu.strip() if rc == 0 else 'no GPU listed'}")
    env, _ = read(results, "env")
    print((env or "").strip())
    kernels(results, "kernels-run", "kernels-vs-cpu",
            "kernels (forward) vs CPU runtime")
    kernels(results, "grad-kernels-run", "grad-kernels-vs-cpu",
            "kernels (backward, optimizers) vs CPU runtime")
    kernels(results, "products-kernels-run", "products-kernels-vs-cpu",
            "kernels (forward), product attention, vs CPU runtime")
    kernels(results, "products-grad-kernels-run",
            "products-grad-kernels-vs-cpu",
            "kernels (backward), product attention, vs CPU runtime")
    kernels(results, "exact-kernels-run", "exact-kernels-vs-cpu",
            "kernels (forward), exact attention, vs CPU runtime")
    kernels(results, "exact-grad-kernels-run", "exact-grad-kernels-vs-cpu",
            "kernels (backward), exact attention, vs CPU runtime")
    text = ran(results, "collectives", "NCCL collectives (1 rank each)",
               "121 checks")
    if text is not None:
        ok = len(re.findall(r" ok$", text, re.M))
        row("NCCL collectives (one rank per communicator)",
            f"{ok} of 121 checks ok", "121", status(ok == 121))
    text = ran(results, "kernels-vs-torch", "kernels vs PyTorch",
               "f32 1e-5, bf16 1e-2")
    if text is not None:
        m = re.search(r"(\d+) of (\d+) cases passed", text)
        row("kernels vs PyTorch", m[0] if m else last_line(text),
            "f32 1e-5, bf16 1e-2", status(bool(m) and m[1] == m[2]))
    for v, bound in (("f32", "1e-5"), ("bf16", "2e-2")):
        if ran(results, f"small-{v}-run", f"small {v} step", "") is None:
            continue
        dumps(results, f"small-{v}-vs-cpu",
              f"small {v} step vs CPU runtime", bound)
        transformers_rows(results, f"small-{v}-vs-hf", f"small {v} step")
    loss_rows(bundle, results, "small-offload", "small-offload",
              "small f32 AdamW + CPU offload")
    loss_rows(bundle, results, "small-offload-gpu", "small-offload-gpu",
              "small f32 AdamW + CPU offload, optimizer as GPU kernels")
    offload_speed_row(results)
    loss_rows(bundle, results, "small-adamw", "small-adamw-calls",
              "small f32 AdamW")
    loss_rows(bundle, results, "small-adamw", "small-adamw-graph",
              "small f32 AdamW, CUDA graph")
    loss_rows(bundle, results, "small-offload", "small-offload-graph",
              "small f32 AdamW + CPU offload, CUDA graph")
    if ran(results, "llama1b-grad-run", "Llama-3.2-1B step", "") is not None:
        transformers_rows(results, "llama1b-vs-hf", "Llama-3.2-1B bf16 step")
    performance(bundle, results)

    header = ("check", "measured", "bound / goal", "result")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    print(f"device check: {'FAILED' if failed else 'passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

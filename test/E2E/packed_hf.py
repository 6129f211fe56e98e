# Packed rows against transformers run document by document: writes a token
# file of documents (lengths given, each ending with --eos), a checkpoint
# with transformers' save_pretrained, and compiles the model's packed graph
# (fsdp-graphgen --packed). On 1 rank, one step (--data, --eos, optionally
# --pack) must give the loss and every gradient of transformers' float64
# model run on each document alone (position_ids from 0), the loss summed
# over the documents' counted labels and divided by their number: within
# --rtol of each tensor's largest element. Each --case mesh's step must then
# equal the 1-rank step (compare_ranks.py, within --rtol).
#
# Usage: HF_PYTHON packed_hf.py CONFIG.json --work DIR --bin DIR --mpirun M
#            --lengths 3,1,20,... [--eos ID] [--batch B] [--seq S] [--pack]
#            [--export] [--case LABEL RANKS FLAGS ...]
#
# --export: the graph is fsdp_mlir.export(model, ..., packed=True) of the
# transformers model itself rather than fsdp-graphgen --packed's.

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from documents import write_documents  # noqa: E402
import reference  # noqa: E402

F32 = "param-dtype=f32 reduce-dtype=f32 output-dtype=f32"


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                 f"{result.stdout}{result.stderr}")
    return result


def by_documents(model, ids, labels, positions):
    """The loss over every counted label, each document of each row run
    alone; (loss, documents, counted labels)."""
    total, count, docs = 0.0, 0, 0
    for row in range(ids.shape[0]):
        starts = [i for i in range(ids.shape[1]) if positions[row, i] == 0]
        for a, b in zip(starts, starts[1:] + [ids.shape[1]]):
            n = b - a
            logits = model(input_ids=ids[row:row + 1, a:b],
                           position_ids=torch.arange(n)[None]).logits[0]
            target = labels[row, a:b]
            total = total + F.cross_entropy(logits, target, ignore_index=-100,
                                            reduction="sum")
            count += int((target != -100).sum())
            docs += 1
    return total / count, docs, count


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    harness.add_run_arguments(parser)
    parser.add_argument("--lengths", required=True)
    parser.add_argument("--eos", type=int, default=0)
    parser.add_argument("--batch", default="2")
    parser.add_argument("--seq", default="64")
    parser.add_argument("--pack", action="store_true")
    parser.add_argument("--export", action="store_true")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--case", nargs=3, action="append", default=[])
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    mpirun = shlex.split(args.mpirun)
    tool = lambda name: os.path.join(args.bin, name)  # noqa: E731
    path = lambda *p: os.path.join(args.work, *p)  # noqa: E731

    with open(args.config) as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    torch.manual_seed(0)
    model = getattr(transformers, config.architectures[0])(config)
    hf = path("hf")
    shutil.rmtree(hf, ignore_errors=True)
    model.save_pretrained(hf, safe_serialization=True)
    state = {k: v.float() for k, v in model.state_dict().items()}
    tokens = path("tokens.bin")
    write_documents(tokens, [int(n) for n in args.lengths.split(",")],
                    args.eos, config.vocab_size, repeats=8)
    graph = path("graph.json")
    if args.export:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                        "python"))
        import fsdp_mlir
        b, s = int(args.batch), int(args.seq)
        exported = fsdp_mlir.export(
            model, {"input_ids": torch.zeros(b, s, dtype=torch.long),
                    "position_ids": torch.arange(s).repeat(b, 1)},
            model_name=config.architectures[0], packed=True)
        with open(graph, "w") as f:
            json.dump(exported, f)
    else:
        run([tool("fsdp-graphgen"), args.config, "--batch", args.batch,
             "--seq", args.seq, "--packed", "-o", graph])
    data = ["--data", tokens, "--eos", str(args.eos)] + \
        (["--pack"] if args.pack else [])

    def step(name, ranks, flags):
        exe = path(name)
        run([tool("fsdp-compile"), graph, *flags,
             f"--passes=fsdp-build-train-step{{optimizer=none {F32}}}",
             "-o", exe])
        out = path(name + ".d")
        run([*mpirun, "-np", str(ranks), exe, "--steps", "1", "--load", hf,
             *data, "--dump-dir", out])
        return out

    one = step("one", 1, [])
    rank0 = os.path.join(one, "rank0")
    ours = {n: reference.load_tensor(rank0, n, *e)
            for n, e in reference.read_manifest(rank0).items()}
    ref = getattr(transformers, config.architectures[0])(config).double()
    ref.load_state_dict({k: v.double() for k, v in state.items()})
    loss, docs, count = by_documents(ref, ours["input_ids"].long(),
                                     ours["labels"].long(),
                                     ours["position_ids"].long())
    loss.backward()
    grads = {n: p.grad for n, p in ref.named_parameters()}
    rel = lambda a, b: ((a.double() - b).abs().max() /  # noqa: E731
                        b.abs().max().clamp_min(1e-30)).item()
    worst, worst_name = 0.0, ""
    compared = 0
    for n, g in grads.items():
        if "grad." + n not in ours:
            continue
        e = rel(ours["grad." + n], g)
        compared += 1
        if e > worst:
            worst, worst_name = e, n
    e_loss = rel(ours["loss"], loss.detach())
    missing = [n for n in grads if "grad." + n not in ours and
               n != "lm_head.weight"]
    bad = e_loss > args.rtol or worst > args.rtol or bool(missing)
    print(f"{'FAIL ' if bad else ''}1 rank vs transformers document by "
          f"document ({docs} documents, {count} counted labels): loss "
          f"rel_err {e_loss:.3e}, {compared} gradients max_rel_err "
          f"{worst:.3e} ({worst_name})" +
          (f"; not compared: {missing}" if missing else ""))
    failed = bad

    # The attention pairs the runtime counts (each query's keys in its own
    # document, within the window) and the host syncs of a step.
    report = run([*mpirun, "-np", "1", path("one"), "--steps", "1", "--load",
                  hf, *data, "--report"]).stdout
    pairs = int(report.split("attention pairs per step, by rank:")[1].split()[0])
    syncs = report.split("host syncs per step:")[1].split()[0]
    window = getattr(config, "sliding_window", None) or 0
    positions = ours["position_ids"].long() + 1
    seen = positions.clamp(max=window) if window else positions
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    expected = int(seen.sum()) * layers * heads
    whole = ours["position_ids"].shape[1]
    unpacked = ours["position_ids"].shape[0] * layers * heads * sum(
        min(i + 1, window) if window else i + 1 for i in range(whole))
    bad = pairs != expected or syncs != "0.00"
    failed |= bad
    print(f"{'FAIL ' if bad else ''}attention pairs per step {pairs} "
          f"(documents' own: {expected}; one document a row: {unpacked}), "
          f"host syncs per step {syncs}")

    for label, ranks, flags in args.case:
        name = "".join(c if c.isalnum() else "_" for c in label)
        many = step(name, int(ranks), shlex.split(flags))
        failed |= harness.compare_ranks(
            label, one, many, ranks, args.rtol,
            "updated.,lr,grad_sum_squares,optimizer_step")
        # How evenly the ranks attend (context parallelism's balance).
        report = run([*mpirun, "-np", ranks, path(name), "--steps", "1",
                      "--load", hf, *data, "--report"]).stdout
        by_rank = [int(x) for x in report.split(
            "attention pairs per step, by rank:")[1].splitlines()[0].split()]
        print(f"  attention pairs by rank: {' '.join(map(str, by_rank))} "
              f"(max/mean {max(by_rank) * len(by_rank) / sum(by_rank):.3f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

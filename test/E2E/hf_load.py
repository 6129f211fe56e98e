# Loads Hugging Face checkpoints written by transformers' save_pretrained
# into compiled programs on several meshes (--load), and checks:
#   - on 1 rank, every parameter equals the file's tensor (converted to f32)
#     bit for bit, and the step's logits and loss equal transformers' forward
#     of the same model (float64) within 1e-6;
#   - on each --case mesh, every rank's blocks equal the 1-rank parameters
#     bit for bit, and with --outputs its step's loss, logits and gradients
#     equal the 1-rank step's within 1e-5;
#   - with --consolidate, a checkpoint trained from those weights on the last
#     case's mesh consolidates into a model.safetensors that transformers'
#     from_pretrained loads, equal bit for bit to what the program holds;
#   - a missing tensor, an unexpected one and a wrong shape are the errors
#     and warning the runtime documents.
#
# Usage: HF_PYTHON hf_load.py CONFIG.json --work DIR --bin DIR --mpirun M
#            [--dtype f32|bf16] [--shard-size 60KB] [--batch 4]
#            [--case LABEL RANKS FLAGS ...] [--consolidate] [--errors]
#            [--outputs]

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
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import reference  # noqa: E402

F32 = "param-dtype=f32 reduce-dtype=f32 output-dtype=f32"
SKIP = ("grad.,updated.,loss,aux_loss,logits,lr,grad_sum_squares,input_ids,labels,"
        "position_ids,optimizer_step")


def run(cmd, ok=True):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if ok and result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                 f"{result.stdout}{result.stderr}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    harness.add_run_arguments(parser)
    parser.add_argument("--dtype", default="f32")
    parser.add_argument("--shard-size", default="")
    parser.add_argument("--batch", default="4")
    parser.add_argument("--case", nargs=3, action="append", default=[])
    parser.add_argument("--consolidate", action="store_true")
    parser.add_argument("--errors", action="store_true")
    parser.add_argument("--outputs", action="store_true",
                        help="also compare each case's step (loss, logits, "
                             "gradients) with the 1-rank one within 1e-5")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    mpirun = shlex.split(args.mpirun)
    tool = lambda name: os.path.join(args.bin, name)  # noqa: E731
    path = lambda *p: os.path.join(args.work, *p)  # noqa: E731
    failed = False

    # The checkpoint, as transformers writes it.
    with open(args.config) as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    reference.eager_experts(config)
    torch.manual_seed(0)
    model = getattr(transformers, config.architectures[0])(config)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model = model.to(dtype)
    hf = path("hf")
    shutil.rmtree(hf, ignore_errors=True)
    model.save_pretrained(hf, safe_serialization=True,
                          **({"max_shard_size": args.shard_size}
                             if args.shard_size else {}))
    files = sorted(f for f in os.listdir(hf) if f.endswith(".safetensors"))
    print(f"checkpoint: {len(files)} file(s), "
          f"{'index' if os.path.exists(os.path.join(hf, 'model.safetensors.index.json')) else 'single file'}, "
          f"{args.dtype}")
    state = {k: v.float() for k, v in model.state_dict().items()}

    graph = path("graph.json")
    run([tool("fsdp-graphgen"), args.config, "--batch", args.batch, "-o",
         graph])

    def program(name, flags, passes):
        exe = path(name)
        run([tool("fsdp-compile"), graph, *flags, f"--passes={passes}",
             "-o", exe])
        return exe

    def load_and_dump(name, ranks, flags):
        exe = program(name, flags, f"fsdp-build-train-step{{optimizer=none "
                                   f"{F32}}}")
        out = path(name + ".d")
        run([*mpirun, "-np", str(ranks), exe, "--steps", "1", "--load", hf,
             "--dump-dir", out])
        return out

    # One rank: the parameters are the file's; the step is transformers'.
    one = load_and_dump("one", 1, [])
    rank0 = os.path.join(one, "rank0")
    ours = {n: reference.load_tensor(rank0, n, *e)
            for n, e in reference.read_manifest(rank0).items()}
    params = [n for n in ours if n in state or n + "" in state]
    exact = all(torch.equal(ours[n].float(), state[n]) for n in params)
    missing = [n for n in ours
               if not n.startswith(tuple(SKIP.split(","))) and
               n not in state]
    print(f"1 rank: {len(params)} parameters {'bitwise equal to' if exact else 'FAIL differ from'} "
          f"the file" + (f"; FAIL not in the file: {missing}" if missing
                         else ""))
    failed |= not exact or bool(missing)
    # A fresh float64 model with the file's values: casting the model itself
    # would also round its rotary frequencies (a buffer) to the file dtype.
    model = getattr(transformers, config.architectures[0])(config).double()
    model.load_state_dict({k: v.double() for k, v in state.items()})
    with torch.no_grad():
        out = model(input_ids=ours["input_ids"].long(),
                    position_ids=ours["position_ids"].long(),
                    **reference.router_kwargs(config))
    logits = out.logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           ours["labels"].long().reshape(-1),
                           ignore_index=-100)
    loss = reference.with_aux_loss(config, out, loss)
    rel = lambda a, b: ((a - b).abs().max() / b.abs().max()).item()  # noqa
    e1, e2 = rel(ours["logits"], logits), rel(ours["loss"], loss)
    bad = not (e1 <= 1e-6 and e2 <= 1e-6)
    failed |= bad
    print(f"{'FAIL ' if bad else ''}1 rank vs transformers: logits "
          f"max_rel_err {e1:.3e}, loss rel_err {e2:.3e}")

    def compare(label, many, ranks, rtol, skip):
        return harness.compare_ranks(label, one, many, ranks, rtol, skip)

    # Every other mesh: blocks equal to the 1-rank parameters; with
    # --outputs its step equals the 1-rank one, itself transformers'.
    for label, ranks, flags in args.case:
        name = "".join(c if c.isalnum() else "_" for c in label)
        many = load_and_dump(name, int(ranks), shlex.split(flags))
        failed |= compare(label, many, ranks, "0", SKIP)
        if args.outputs:
            failed |= compare(f"{label} step (loss, logits, gradients)",
                              many, ranks, "1e-5",
                              "updated.,lr,grad_sum_squares,optimizer_step")

    if args.consolidate and args.case:
        label, ranks, flags = args.case[-1]
        exe = program("train", shlex.split(flags),
                      f"fsdp-build-train-step{{lr=1e-3 {F32}}}")
        ckpt = path("ckpt")
        shutil.rmtree(ckpt, ignore_errors=True)
        run([*mpirun, "-np", ranks, exe, "--steps", "2", "--load", hf,
             "--save", ckpt])
        # What the program holds after those steps, on one rank.
        single = program("train1", [],
                         f"fsdp-build-train-step{{lr=1e-3 {F32}}}")
        held = path("held.d")
        run([*mpirun, "-np", "1", single, "--steps", "1", "--resume", ckpt,
             "--dump-dir", held])
        out = path("consolidated")
        os.makedirs(out, exist_ok=True)
        run([*mpirun, "-np", "1", exe, "--consolidate", ckpt, "--output",
             os.path.join(out, "model.safetensors")])
        config.save_pretrained(out)
        loaded = getattr(transformers, config.architectures[0]) \
            .from_pretrained(out, torch_dtype=torch.float32)
        rank0 = os.path.join(held, "rank0")
        held_t = {n: reference.load_tensor(rank0, n, *e)
                  for n, e in reference.read_manifest(rank0).items()}
        sd = loaded.state_dict()
        names = [n for n in held_t if n in sd]
        same = all(torch.equal(held_t[n].float(), sd[n]) for n in names)
        moved = any(not torch.equal(sd[n], state[n]) for n in names)
        failed |= not same or not moved
        print(f"{'' if same and moved else 'FAIL '}trained on {label}, "
              f"consolidated, from_pretrained: {len(names)} parameters "
              f"bitwise equal to the program's (and trained away from the "
              f"start: {moved})")

    if args.errors:
        exe = path("one")
        single = load_file(os.path.join(hf, files[0]))
        victim = sorted(single)[0]
        dropped = dict(single)
        del dropped[victim]
        save_file(dropped, path("missing.safetensors"))
        extra = dict(single)
        extra["model.extra.weight"] = torch.zeros(3)
        save_file(extra, path("extra.safetensors"))
        wrong = dict(single)
        wrong[victim] = torch.zeros(3, dtype=single[victim].dtype)
        save_file(wrong, path("wrong.safetensors"))
        for case, file, flags in (("missing", "missing.safetensors", []),
                                  ("extra", "extra.safetensors", []),
                                  ("extra strict", "extra.safetensors",
                                   ["--strict-load"]),
                                  ("wrong shape", "wrong.safetensors", [])):
            if len(files) > 1:
                break
            r = run([*mpirun, "-np", "1", exe, "--steps", "1", "--load",
                     path(file), *flags], ok=False)
            lines = [l for l in r.stderr.splitlines()
                     if l.startswith(("fsdp runtime error", "warning", "  "))
                     and "Process name" not in l]
            print(f"{case}: exit {r.returncode}: " + " | ".join(lines[:3]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

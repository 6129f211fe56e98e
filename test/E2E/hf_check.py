# Checks a compiled 1-rank program against Hugging Face transformers on the
# same weights: compiles the config's graph into a step with optimizer=none,
# runs it once with a dump, loads the dumped parameters into the
# transformers model built from the same config (in float64), runs it on the
# dumped inputs and compares the logits, the loss and every gradient.
# With --rope, also compares the rotary frequencies and attention factor the
# graph states with the ones transformers computes (ROPE_INIT_FUNCTIONS).
#
# Errors are relative to each tensor's largest magnitude.
#
# With --graph, the program is compiled from that graph.json (one
# fsdp_mlir.export wrote from the same config) instead of fsdp-graphgen's;
# with --factory FILE.py:FUNC the model is what FUNC builds from the config
# dict (a model that is not from Hugging Face) instead of transformers'.
# With --torch-dump DIR, DIR gets a copy of the 1-rank dump with the
# logits, loss and gradients replaced by the PyTorch ones (float32): a
# reference compare_ranks.py compares an N-rank program's dump against.
#
# Usage: HF_PYTHON hf_check.py CONFIG.json --work DIR --bin DIR
#            [--rtol 1e-6] [--grad-rtol 1e-5] [--rope] [--graph GRAPH.json]
#            [--factory FILE.py:FUNC] [--torch-dump DIR]

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                 f"{result.stdout}{result.stderr}")
    return result.stdout


def rel(a, b):
    return ((a - b).abs().max() / (b.abs().max() or 1.0)).item()


def write_torch_dump(rank0, out, logits, loss, params):
    """The dump `rank0` is in copied to `out`, with PyTorch's outputs and
    gradients in its rank0."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(os.path.dirname(rank0), out)
    out = os.path.join(out, "rank0")
    manifest = reference.read_manifest(out)
    values = {"logits": logits, "loss": loss}
    values.update({"grad." + n: p.grad for n, p in params.items()})
    for name, value in values.items():
        dtype, shape = manifest[name]
        if dtype != "f32" or list(value.shape) != list(shape):
            sys.exit(f"error: dumped '{name}' is {dtype} {shape}, PyTorch's "
                     f"{list(value.shape)}")
        value.float().numpy().tofile(os.path.join(out, name + ".bin"))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config")
    parser.add_argument("--work", required=True)
    parser.add_argument("--bin", required=True)
    parser.add_argument("--rtol", type=float, default=1e-6)
    parser.add_argument("--grad-rtol", type=float, default=1e-5)
    parser.add_argument("--rope", action="store_true")
    parser.add_argument("--graph")
    parser.add_argument("--factory")
    parser.add_argument("--torch-dump")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    graph = os.path.join(args.work, "graph.json")
    exe = os.path.join(args.work, "step")
    dump = os.path.join(args.work, "dump")
    if args.graph:
        graph = args.graph
    else:
        run([os.path.join(args.bin, "fsdp-graphgen"), args.config, "-o",
             graph])
    run([os.path.join(args.bin, "fsdp-compile"), graph,
         "--passes=fsdp-build-train-step{optimizer=none}", "-o", exe])
    run([exe, "--steps", "1", "--dump-dir", dump])
    rank0 = os.path.join(dump, "rank0")
    ours = {name: reference.load_tensor(rank0, name, *entry)
            for name, entry in reference.read_manifest(rank0).items()}

    with open(args.config) as f:
        config = json.load(f)
    torch.manual_seed(0)
    if args.factory:
        path, func = args.factory.rsplit(":", 1)
        spec = importlib.util.spec_from_file_location("factory", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = getattr(module, func)(config).double()
    else:
        config = transformers.AutoConfig.for_model(**config)
        reference.eager_experts(config)
        model = getattr(transformers, config.architectures[0])(config)
        model = model.double()
    params = {n: p for n, p in model.named_parameters()}
    with torch.no_grad():
        for name, p in params.items():
            if name not in ours:
                sys.exit(f"error: transformers parameter '{name}' is not in "
                         "the program's dump")
            p.copy_(ours[name])
    failed = False

    def report(what, err, tol):
        nonlocal failed
        bad = not err <= tol
        failed |= bad
        print(f"{'FAIL ' if bad else ''}{what} max_rel_err {err:.3e}"
              f"{' > ' + str(tol) if bad else ''}")

    if args.rope:
        rotary = model.model.rotary_emb
        with open(graph) as f:
            nodes = [n for n in json.load(f)["nodes"] if n["op"] == "rotary"]
        attrs = nodes[0].get("attrs", {})
        theta = attrs["theta"]
        half = rotary.inv_freq.numel()
        default = theta ** (-2.0 * torch.arange(half, dtype=torch.float64)
                            / (2 * half))
        freq = torch.tensor(attrs.get("inv_freq", default.tolist()),
                            dtype=torch.float64)
        # transformers computes the frequencies in float32.
        report(f"rope {config.rope_scaling.get('rope_type')} inv_freq",
               rel(freq, rotary.inv_freq.double()), 1e-6)
        report("rope attention_scaling",
               rel(torch.tensor(attrs.get("attention_scaling", 1.0)),
                   torch.tensor(float(rotary.attention_scaling))), 1e-12)
        print(f"rope frequencies scaled: "
              f"{int((rel(freq, default) > 1e-3))}")

    input_ids = ours["input_ids"].long()
    # A mixture of experts with output_router_logits adds coef times
    # transformers' load-balancing loss (aux_loss) to the loss.
    hf_config = getattr(model, "config", None)
    aux = reference.router_kwargs(hf_config)
    out = model(input_ids=input_ids,
                position_ids=ours["position_ids"].long(),
                **aux)
    logits = out.logits if hasattr(out, "logits") else \
        out[0] if isinstance(out, tuple) else out
    labels = ours["labels"].long()
    # The loss node's ignore_index (fsdp_mlir.export(ignore_index=...)).
    ignore = -100
    with open(graph) as f:
        for node in json.load(f)["nodes"]:
            if node["op"] == "cross_entropy":
                ignore = node.get("attrs", {}).get("ignore_index", -100)
    if ignore != -100:
        print(f"ignore_index {ignore}: {int((labels == ignore).sum())} of "
              f"{labels.numel()} positions ignored")
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           labels.reshape(-1), ignore_index=ignore)
    loss = reference.with_aux_loss(hf_config, out, loss)
    loss.backward()
    report("logits", rel(ours["logits"], logits.detach()), args.rtol)
    report("loss", rel(ours["loss"], loss.detach()), args.rtol)
    if aux:
        report("aux_loss", rel(ours["aux_loss"], out.aux_loss.detach()),
               args.rtol)
    worst, worst_name = 0.0, ""
    for name, p in params.items():
        e = rel(ours["grad." + name], p.grad)
        if e > worst:
            worst, worst_name = e, name
    report(f"gradients ({len(params)}, worst {worst_name})", worst,
           args.grad_rtol)
    if args.torch_dump:
        write_torch_dump(rank0, args.torch_dump, logits.detach(),
                         loss.detach(), params)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

# Gradient check of a compiled training step for any graph.json: a float64
# PyTorch interpreter of the graph (one rule per op, from
# docs/graph-format.md) computes the loss; its autograd gradients and a
# directional central finite difference of the loss are compared with the
# gradients the program dumped (fsdp-build-train-step{optimizer=none}).
#
# Usage: /usr/bin/python3 graph_reference.py --graph G.json --dump DIR
#            [--rank 0] [--rtol 1e-5] [--fd-rtol 1e-6]
# Prints `loss`, `grads ... max_rel_err` and `fd ... rel_err`; exits 1 above
# a tolerance.

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402


def attention(q, k, v, causal, window, scale):
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    seq_q, seq_k = q.shape[2], k.shape[2]
    i = torch.arange(seq_q)[:, None]
    j = torch.arange(seq_k)[None, :]
    visible = torch.ones(seq_q, seq_k, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if window:
        visible &= (i - j) < window
    mask = torch.zeros(seq_q, seq_k, dtype=q.dtype).masked_fill(
        ~visible, float("-inf"))
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    out = torch.softmax(q @ k.transpose(-1, -2) * scale + mask, -1) @ v
    return out.transpose(1, 2)


def last_two_t(x, flag):
    return x.transpose(-1, -2) if flag else x


def run_node(op, xs, a):
    """One op of docs/graph-format.md, in float64."""
    if op == "embedding":
        return F.embedding(xs[1], xs[0])
    if op == "linear":
        return F.linear(xs[0], xs[1], xs[2] if len(xs) > 2 else None)
    if op in ("matmul", "batch_matmul"):
        return last_two_t(xs[0], a.get("transpose_a")) @ \
            last_two_t(xs[1], a.get("transpose_b"))
    if op in ("add", "sub", "mul"):
        return {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op](*xs)
    if op == "neg":
        return -xs[0]
    if op == "scale":
        return xs[0] * a["factor"]
    if op == "silu":
        return F.silu(xs[0])
    if op == "relu":
        return F.relu(xs[0])
    if op == "gelu":
        return F.gelu(xs[0], approximate=a.get("approximate", "none"))
    if op == "rms_norm":
        return reference.rms_norm(xs[0], xs[1], a["eps"])
    if op == "layer_norm":
        return F.layer_norm(xs[0], xs[0].shape[-1:], xs[1],
                            xs[2] if len(xs) > 2 else None, a["eps"])
    if op == "rotary":
        return reference.rotary(xs[0], xs[1], a["theta"])
    if op == "attention":
        return attention(*xs, a.get("causal", False),
                         a.get("sliding_window"), a.get("scale"))
    if op == "softmax":
        return torch.softmax(xs[0], a["dim"])
    if op == "reshape":
        return xs[0].reshape(a["shape"])
    if op == "transpose":
        return xs[0].permute(a["perm"])
    if op == "slice":
        return xs[0].narrow(a["dim"], a["start"], a["size"])
    if op == "split":
        return list(torch.split(xs[0], a["sizes"], a["dim"]))
    if op == "concat":
        return torch.cat(xs, a["dim"])
    if op == "cast":  # the reference stays in float64
        return xs[0]
    if op == "cross_entropy":
        logits = xs[0]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               xs[1].reshape(-1),
                               ignore_index=a.get("ignore_index", -100),
                               reduction=a.get("reduction", "mean"))
    raise SystemExit(f"error: no reference for op '{op}'")


def loss_of(graph, values):
    env = dict(values)
    for node in graph["nodes"]:
        xs = []
        for ref in node["inputs"]:
            name, _, index = ref.partition(":")
            v = env[name]
            xs.append(v[int(index)] if index else
                      (v[0] if isinstance(v, list) else v))
        env[node["name"]] = run_node(node["op"], xs, node.get("attrs", {}))
    (out,) = [o for o in graph["outputs"] if o["name"] == "loss"]
    return env[out["value"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graph", required=True)
    reference.add_dump_arguments(parser)
    parser.add_argument("--fd-rtol", type=float, default=1e-6)
    args = parser.parse_args()
    with open(args.graph) as f:
        graph = json.load(f)
    directory = reference.rank_directory(args)
    manifest = reference.read_manifest(directory)
    load = lambda n: reference.load_tensor(directory, n, *manifest[n])  # noqa

    values = {i["name"]: load(i["name"]) for i in graph["inputs"]}
    params = {p["name"]: load(p["name"]).to(torch.float64).requires_grad_(True)
              for p in graph["parameters"]}
    loss = loss_of(graph, {**values, **params})
    loss.backward()

    failures = []
    ours = load("loss").item()
    err = abs(ours - loss.item()) / abs(loss.item())
    print(f"loss {ours:.9g} {loss.item():.9g} rel_err {err:.3e}")
    if not err <= args.rtol:
        failures.append(f"FAIL loss rel_err {err:.3e}")
    worst, worst_name = 0.0, ""
    for name, p in params.items():
        mine = load("grad." + name).to(torch.float64)
        scale = p.grad.abs().max().item()
        e = (mine - p.grad).abs().max().item() / scale
        if not e <= args.rtol:
            failures.append(f"FAIL grad {name} max_rel_err {e:.3e}")
        if e > worst:
            worst, worst_name = e, name
    print(f"grads {len(params)} max_rel_err {worst:.3e} ({worst_name})")

    # Directional finite difference of the float64 loss along a random
    # direction over all parameters, against our gradients.
    gen = torch.Generator().manual_seed(0)
    direction = {n: torch.randn(p.shape, generator=gen, dtype=torch.float64)
                 for n, p in params.items()}
    h = 1e-6
    with torch.no_grad():
        plus = loss_of(graph, {**values, **{n: p + h * direction[n]
                                            for n, p in params.items()}})
        minus = loss_of(graph, {**values, **{n: p - h * direction[n]
                                             for n, p in params.items()}})
    fd = (plus - minus).item() / (2 * h)
    ours_dd = sum((load("grad." + n).to(torch.float64) * direction[n]).sum()
                  .item() for n in params)
    fd_err = abs(fd - ours_dd) / abs(fd)
    print(f"fd directional {fd:.9g} ours {ours_dd:.9g} rel_err {fd_err:.3e}")
    if not fd_err <= args.fd_rtol:
        failures.append(f"FAIL fd rel_err {fd_err:.3e}")
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

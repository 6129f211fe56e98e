# Recomputes every case written by fsdp-runtime-kernel-test (with or without
# --grad) with PyTorch and prints one line per case with its max relative error: max |out - ref| over
# max |ref| (the error relative to the result's scale, which stays meaningful
# where single elements are near zero). References are computed in float64
# from the exact operand values; f32 results must be within 1e-5, bf16 and
# f16 results within 1e-2, casts and data movement exact. Gradients come from
# torch.autograd over the forward references, optimizer steps from
# torch.optim on float64 copies of the parameters.
#
# Each backward kernel's gradients are also checked against finite
# differences, one line "fd <case> <input> rel_err <e>" per differentiable
# input: with a seeded float64 direction v, the central difference
# (<f(x + h v), dy> - <f(x - h v), dy>) / 2h, h = 1e-6, of the float64
# forward reference f must match <our dx, v> within 1e-5 relative error for
# f32 gradients, 2e-2 for bf16 and f16 (3e-2 for attention_grad, whose row
# sums read the rounded forward output). A low-precision gradient of more
# than 4096 elements (the flash-attention shapes) is left to the float64
# reference above: rounding each element of a long gradient adds up, in the
# projection, to more than the bound. reduce_sum_to is checked as the transpose of
# broadcasting ("bcast"), pad as the transpose of slicing ("slice").
#
# Usage: /usr/bin/python3 check_kernels.py <dir>

import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

# References on one intra-op thread, as in test/E2E/reference.py (a race on
# the first vectorized cos of a process when two threads share it).
torch.set_num_threads(1)

TOLERANCE = {"f32": 1e-5, "bf16": 1e-2, "f16": 1e-2}
EXACT_OPS = {"embedding", "transpose", "slice", "concat", "reshape", "cast",
             "pad"}


def load(directory, dtype, file, shape):
    """Returns the tensor as float64 (floats) or int64 (indices)."""
    path = os.path.join(directory, file)
    if dtype == "f32":
        array = np.fromfile(path, dtype=np.float32).astype(np.float64)
    elif dtype == "bf16":
        bits = np.fromfile(path, dtype=np.uint16).astype(np.uint32) << 16
        array = bits.view(np.float32).astype(np.float64)
    elif dtype == "f16":
        array = np.fromfile(path, dtype=np.float16).astype(np.float64)
    else:
        array = np.fromfile(path, dtype=np.int32 if dtype == "i32"
                            else np.int64).astype(np.int64)
    return torch.from_numpy(array.reshape(shape))


def read_manifest(directory):
    cases = []
    with open(os.path.join(directory, "manifest.txt")) as f:
        for line in f:
            words = line.split()
            if words[0] == "case":
                cases.append({"name": words[1], "op": words[2], "attrs": {},
                              "in": {}, "out": {}, "dtypes": {}})
                continue
            case = cases[-1]
            if words[0] == "attr":
                case["attrs"][words[1]] = words[2]
                continue
            name, dtype, file = words[1:4]
            shape = [int(d) for d in words[4:]]
            case[words[0]][name] = load(directory, dtype, file, shape)
            case["dtypes"][words[0] + "." + name] = dtype
    return cases


def rotary(x, positions, attrs):
    d = x.shape[-1]
    theta = float(attrs["theta"])
    inv_freq = theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
    if "inv_freq" in attrs:
        inv_freq = torch.tensor([float(f) for f in
                                 attrs["inv_freq"].split(",")],
                                dtype=torch.float64)
    scaling = float(attrs.get("scaling", 1.0))
    angle = positions.to(torch.float64)[..., None] * inv_freq  # [B, S, D/2]
    cos = angle.cos()[:, :, None, :] * scaling
    sin = angle.sin()[:, :, None, :] * scaling
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(q, k, v, causal, window, scale, with_lse=False):
    """The attention result, and with `with_lse` each query's log-sum-exp of
    its visible scores [b, nq, s]."""
    s, nq, nkv = q.shape[1], q.shape[2], k.shape[2]
    # Query head h reads KV head h // (nq // nkv).
    k = k.repeat_interleave(nq // nkv, dim=2)
    v = v.repeat_interleave(nq // nkv, dim=2)
    scores = torch.einsum("bind,bjnd->bnij", q, k) * scale
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    visible = torch.ones(s, s, dtype=torch.bool)
    if causal:
        visible &= j <= i
    if window > 0:
        visible &= (i - j) < window
    scores = scores.masked_fill(~visible, -math.inf)
    out = torch.einsum("bnij,bjnd->bind", scores.softmax(-1), v)
    return (out, torch.logsumexp(scores, -1)) if with_lse else out


def cast_reference(x, dst):
    torch_type = {"f32": torch.float32, "bf16": torch.bfloat16,
                  "f16": torch.float16}[dst]
    return x.to(torch.float32).to(torch_type).to(torch.float64)


def vjp(fn, inputs, dy):
    """Gradients of fn(*inputs) with respect to each input, given dy."""
    inputs = [x.detach().clone().requires_grad_() for x in inputs]
    return torch.autograd.grad(fn(*inputs), inputs, dy)


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def optimizer_steps(case):
    """Runs torch.optim on the recorded grads; returns the final state."""
    a, i = case["attrs"], case["in"]
    param = i["param0"].clone()
    lr, wd = float(a["lr"]), float(a["weight_decay"])
    if case["op"] == "adamw":
        opt = torch.optim.AdamW([param], lr=lr, weight_decay=wd,
                                betas=(float(a["beta1"]), float(a["beta2"])),
                                eps=float(a["eps"]))
    else:
        opt = torch.optim.SGD([param], lr=lr, weight_decay=wd,
                              momentum=float(a["momentum"]))
    step = 0
    while "grad%d" % step in i:
        param.grad = float(a["grad_scale"]) * i["grad%d" % step]
        opt.step()
        step += 1
    state = opt.state[param]
    refs = {"param": param.detach()}
    for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
        if state.get(key) is not None:
            refs[key] = state[key]
    return refs


def activation(attrs):
    """The reference of an Activations.def entry: torch.nn.functional's
    function of the same name."""
    return getattr(F, attrs["activation"])


def grad_reference(case):
    """References of the backward and optimizer kernels; None if not one."""
    op, a, i = case["op"], case["attrs"], case["in"]
    flag = lambda key: a[key] != "0"
    if "activation" in a and op.endswith("_grad"):
        return {"dx": vjp(activation(a), [i["x"]], i["dy"])[0]}
    if op == "gelu_grad":
        fn = lambda x: F.gelu(x, approximate=a["approximate"])
        return {"dx": vjp(fn, [i["x"]], i["dy"])[0]}
    if op == "rms_norm_grad":
        fn = lambda x, w: rms_norm(x, w, float(a["eps"]))
        dx, dw = vjp(fn, [i["x"], i["weight"]], i["dy"])
        return {"dx": dx, "dweight": dw}
    if op == "layer_norm_grad":
        h = i["x"].shape[-1]
        bias = torch.zeros(h, dtype=torch.float64)
        fn = lambda x, w, b: F.layer_norm(x, (h,), w, b, float(a["eps"]))
        dx, dw, db = vjp(fn, [i["x"], i["weight"], bias], i["dy"])
        return {"dx": dx, "dweight": dw, "dbias": db}
    if op == "rotary_grad":
        fn = lambda x: rotary(x, i["positions"], a)
        return {"dx": vjp(fn, [torch.zeros_like(i["dy"])], i["dy"])[0]}
    if op == "attention_grad":
        fn = lambda q, k, v: attention(q, k, v, flag("causal"),
                                       int(float(a["sliding_window"])),
                                       float(a["scale"]))
        dq, dk, dv = vjp(fn, [i["q"], i["k"], i["v"]], i["dout"])
        return {"dq": dq, "dk": dk, "dv": dv}
    if op == "softmax_grad":
        fn = lambda x: torch.softmax(x, int(a["dim"]))
        return {"y": fn(i["x"]), "dx": vjp(fn, [i["x"]], i["dy"])[0]}
    if op == "embedding_grad":
        vocab = case["out"]["dtable"].shape[0]
        table = torch.zeros(vocab, i["dy"].shape[-1], dtype=torch.float64)
        fn = lambda t: F.embedding(i["ids"], t)
        return {"dtable": vjp(fn, [table], i["dy"])[0]}
    if op == "cross_entropy_grad":
        labels = i["labels"]
        fn = lambda x: F.cross_entropy(
            x.reshape(-1, x.shape[-1]), labels.reshape(-1),
            ignore_index=int(a["ignore_index"]),
            reduction=a["reduction"]).reshape(i["dloss"].shape)
        return {"dlogits": vjp(fn, [i["logits"]], i["dloss"])[0]}
    if op == "reduce_sum_to":
        x = i["x"]
        out = torch.zeros(case["out"]["out"].shape, dtype=torch.float64)
        fn = lambda y: y.broadcast_to(x.shape)
        return {"out": vjp(fn, [out], x)[0]}
    if op == "pad":
        x, dim = i["x"], int(a["dim"])
        shape = list(x.shape)
        shape[dim] += int(a["before"]) + int(a["after"])
        out = torch.zeros(shape, dtype=torch.float64)
        out.narrow(dim, int(a["before"]), x.shape[dim]).copy_(x)
        return {"out": out}
    if op == "sum_squares":
        return {"out": i["x"].pow(2).sum()}
    if op in ("adamw", "sgd"):
        return optimizer_steps(case)
    return None


FD_STEP = 1e-6
FD_TOLERANCE = {"f32": 1e-5, "bf16": 2e-2, "f16": 2e-2}
# attention_grad takes its row sums Σ_j P·dP as Σ_d dO·O from the forward's
# output, rounded to bf16/f16 (flash-attention's Δ, which a ring step needs
# over the merged output): a low-precision query gradient gets that
# rounding too.
FD_TOLERANCE_OF = {("attention_grad", "bf16"): 3e-2,
                   ("attention_grad", "f16"): 3e-2}
FD_MAX_LOW_PRECISION = 4096


def fd_setup(case):
    """The forward reference, its float64 evaluation points and upstream
    gradient for a directional finite-difference check of a backward kernel:
    (fn, points, dy, checks), where fn takes the points (a dict) and checks
    lists (input, our gradient's output name). None if the op has none."""
    op, a, i = case["op"], case["attrs"], case["in"]
    gen = torch.Generator().manual_seed(20240601)
    rand = lambda shape: torch.randn(shape, generator=gen, dtype=torch.float64)
    flag = lambda key: a[key] != "0"
    if op.endswith("_grad") and ("activation" in a or op in ("gelu_grad",
                                                          "softmax_grad")):
        if "activation" in a:
            fn = lambda p: activation(a)(p["x"])
        elif op == "gelu_grad":
            fn = lambda p: F.gelu(p["x"], approximate=a["approximate"])
        else:
            fn = lambda p: torch.softmax(p["x"], int(a["dim"]))
        return fn, {"x": i["x"]}, i["dy"], [("x", "dx")]
    if op == "rms_norm_grad":
        fn = lambda p: rms_norm(p["x"], p["weight"], float(a["eps"]))
        return (fn, {"x": i["x"], "weight": i["weight"]}, i["dy"],
                [("x", "dx"), ("weight", "dweight")])
    if op == "layer_norm_grad":
        h = i["x"].shape[-1]
        fn = lambda p: F.layer_norm(p["x"], (h,), p["weight"], p["bias"],
                                    float(a["eps"]))
        points = {"x": i["x"], "weight": i["weight"],
                  "bias": torch.zeros(h, dtype=torch.float64)}
        checks = [("x", "dx"), ("weight", "dweight")]
        if "dbias" in case["out"]:
            checks.append(("bias", "dbias"))
        return fn, points, i["dy"], checks
    if op == "rotary_grad":
        # Linear in x, which the case does not record: any point will do.
        fn = lambda p: rotary(p["x"], i["positions"], a)
        return fn, {"x": rand(i["dy"].shape)}, i["dy"], [("x", "dx")]
    if op == "attention_grad":
        fn = lambda p: attention(p["q"], p["k"], p["v"], flag("causal"),
                                 int(float(a["sliding_window"])),
                                 float(a["scale"]))
        return (fn, {"q": i["q"], "k": i["k"], "v": i["v"]}, i["dout"],
                [("q", "dq"), ("k", "dk"), ("v", "dv")])
    if op == "embedding_grad":
        shape = (case["out"]["dtable"].shape[0], i["dy"].shape[-1])
        fn = lambda p: F.embedding(i["ids"], p["table"])
        return fn, {"table": rand(shape)}, i["dy"], [("table", "dtable")]
    if op == "cross_entropy_grad":
        labels = i["labels"]
        fn = lambda p: F.cross_entropy(
            p["logits"].reshape(-1, p["logits"].shape[-1]), labels.reshape(-1),
            ignore_index=int(a["ignore_index"]),
            reduction=a["reduction"]).reshape(i["dloss"].shape)
        return (fn, {"logits": i["logits"]}, i["dloss"],
                [("logits", "dlogits")])
    if op == "reduce_sum_to":
        # The transpose of broadcasting out's shape to x's: x is its dy.
        x = i["x"]
        fn = lambda p: p["bcast"].broadcast_to(x.shape)
        return (fn, {"bcast": rand(case["out"]["out"].shape)}, x,
                [("bcast", "out")])
    if op == "pad":
        # The transpose of slicing x's extent out of out's shape: x is its dy.
        x, dim, before = i["x"], int(a["dim"]), int(a["before"])
        fn = lambda p: p["slice"].narrow(dim, before, x.shape[dim])
        return (fn, {"slice": rand(case["out"]["out"].shape)}, x,
                [("slice", "out")])
    return None


def finite_differences(case):
    """Directional finite-difference checks of the case's gradients:
    [(input, rel_err, ok)]. For each input x, with a seeded random direction
    v, compares (<f(x + h v), dy> - <f(x - h v), dy>) / 2h over the float64
    forward reference f with <our dx, v>."""
    setup = fd_setup(case)
    if setup is None:
        return []
    fn, points, dy, checks = setup
    results = []
    for index, (name, out_name) in enumerate(checks):
        x = points[name]
        dtype = case["dtypes"]["out." + out_name]
        if dtype != "f32" and x.numel() > FD_MAX_LOW_PRECISION:
            continue
        gen = torch.Generator().manual_seed(1000 + index)
        v = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            plus = fn(dict(points, **{name: x + FD_STEP * v}))
            minus = fn(dict(points, **{name: x - FD_STEP * v}))
        # <f(x+hv), dy> - <f(x-hv), dy>, taken difference first.
        d = ((plus - minus) * dy).sum().item() / (2 * FD_STEP)
        ours = (case["out"][out_name].to(torch.float64) * v).sum().item()
        err = abs(d - ours) / max(abs(d), 1e-30)
        bound = FD_TOLERANCE_OF.get((case["op"], dtype), FD_TOLERANCE[dtype])
        results.append((name, err, err <= bound))
    return results


def reference(case):
    refs = grad_reference(case)
    if refs is not None:
        return refs
    op, a, i = case["op"], case["attrs"], case["in"]
    flag = lambda key: a[key] != "0"
    if op == "embedding":
        return {"out": F.embedding(i["ids"], i["table"])}
    if op == "linear":
        return {"out": F.linear(i["x"], i["weight"], i.get("bias"))}
    if op in ("matmul", "batch_matmul"):
        lhs, rhs = i["a"], i["b"]
        if flag("transpose_a"):
            lhs = lhs.transpose(-1, -2)
        if flag("transpose_b"):
            rhs = rhs.transpose(-1, -2)
        return {"out": torch.matmul(lhs, rhs)}
    if op in ("add", "sub", "mul"):
        fn = {"add": torch.add, "sub": torch.sub, "mul": torch.mul}[op]
        return {"out": fn(i["x"], i["y"])}
    if op == "neg":
        return {"out": -i["x"]}
    if op == "scale":
        return {"out": i["x"] * float(a["factor"])}
    if "activation" in a:
        return {"out": activation(a)(i["x"])}
    if op == "gelu":
        return {"out": F.gelu(i["x"], approximate=a["approximate"])}
    if op == "rms_norm":
        x = i["x"]
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + float(a["eps"]))
        return {"out": x * rms * i["weight"]}
    if op == "layer_norm":
        return {"out": F.layer_norm(i["x"], i["x"].shape[-1:], i["weight"],
                                    i.get("bias"), float(a["eps"]))}
    if op == "rotary":
        return {"out": rotary(i["x"], i["positions"], a)}
    if op == "attention":
        out, lse = attention(i["q"], i["k"], i["v"], flag("causal"),
                             int(float(a["sliding_window"])),
                             float(a["scale"]), with_lse=True)
        return {"out": out, "lse": lse}
    if op == "softmax":
        return {"out": torch.softmax(i["x"], int(a["dim"]))}
    if op == "transpose":
        perm = [int(p) for p in a["perm"].split(",")]
        return {"out": i["x"].permute(perm)}
    if op == "slice":
        return {"out": i["x"].narrow(int(a["dim"]), int(a["start"]),
                                     int(a["size"]))}
    if op == "concat":
        return {"out": torch.cat([i["x0"], i["x1"]], int(a["dim"]))}
    if op == "reshape":
        return {"out": i["x"].reshape(case["out"]["out"].shape)}
    if op == "cast":
        return {"out": cast_reference(i["x"], case["dtypes"]["out.out"])}
    if op == "cross_entropy":
        ignore = int(a["ignore_index"])
        logits, labels = i["logits"], i["labels"]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                               labels.reshape(-1), ignore_index=ignore,
                               reduction=a["reduction"])
        count = (labels != ignore).sum()
        return {"out": loss.reshape(labels.shape) if a["reduction"] == "none"
                else loss, "count": count}
    raise ValueError("no reference for op " + op)


def error(out, ref, exact):
    """Max relative error; exact comparisons treat NaN as equal to NaN."""
    if out.shape != ref.shape:
        return math.inf
    out, ref = out.to(torch.float64), ref.to(torch.float64)
    if exact:
        same = (out == ref) | (out.isnan() & ref.isnan())
        return 0.0 if bool(same.all()) else math.inf
    scale = max(ref.abs().max().item(), 1e-30)
    return (out - ref).abs().max().item() / scale


def main():
    cases = read_manifest(sys.argv[1])
    failed = 0
    for case in cases:
        refs = reference(case)
        worst, ok = 0.0, True
        for name, out in case["out"].items():
            dtype = case["dtypes"]["out." + name]
            exact = case["op"] in EXACT_OPS or dtype in ("i32", "i64")
            err = error(out, refs[name], exact)
            worst = max(worst, err)
            ok = ok and err <= (0.0 if exact else TOLERANCE[dtype])
        failed += not ok
        print("%-31s %-18s max_rel_err=%.2e %s" %
              (case["name"], case["op"], worst, "OK" if ok else "FAIL"))
    print("%d of %d cases passed" % (len(cases) - failed, len(cases)))
    # Directional finite differences of each backward kernel's gradients.
    fd_checks, fd_failed = 0, 0
    for case in cases:
        for name, err, ok in finite_differences(case):
            fd_checks += 1
            fd_failed += not ok
            print("fd %-31s %-7s rel_err %.2e %s" %
                  (case["name"], name, err, "OK" if ok else "FAIL"))
    if fd_checks:
        print("%d of %d finite-difference checks passed" %
              (fd_checks - fd_failed, fd_checks))
    return 1 if failed or fd_failed else 0


if __name__ == "__main__":
    sys.exit(main())

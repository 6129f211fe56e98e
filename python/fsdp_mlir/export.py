"""A PyTorch model as a graph.json: torch.export, then ATen ops mapped to the
graph format's ops (docs/graph-format.md), with the subgraphs the passes
know raised to their coarse ops.

Raising works on what torch.export keeps of the model: each node's module
path and class (`nn_module_stack`) and the ATen pattern around it.

- A module whose class name ends in `RMSNorm` becomes one `rms_norm` of its
  input and `<path>.weight`, with the module's `variance_epsilon` or `eps`.
- Rotary embedding: `x * cos + cat(-x2, x1) * sin` (Hugging Face's
  `rotate_half`), where cos and sin come from a rotary-embedding module's
  inverse frequencies and the `position_ids` input, becomes one `rotary`
  with those frequencies and the module's `attention_scaling`.
- `scaled_dot_product_attention` (no mask; causal or not) on
  `[B, N, S, D]` transposes of `[B, S, N, D]` values becomes one
  `attention`; grouped-query key/value heads repeated by
  `unsqueeze/expand/reshape` (`repeat_kv`) are read once (the op is
  grouped-query itself).

`transpose(1, 2)` pairs around attention cost nothing: values carry their
layout, and a transpose is only written when an op that is not raised
reads the transposed form. An ATen op with no mapping is an error naming
the op and the user's source line.
"""

import operator

import torch

DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16",
               torch.float16: "f16", torch.int64: "i64", torch.int32: "i32"}


class ExportError(Exception):
    """An op or pattern the exporter cannot map, with where it came from."""


def _source(node):
    trace = node.meta.get("stack_trace") or ""
    lines = [l.strip() for l in trace.strip().splitlines() if l.strip()]
    # The last frame is the user's line that made the op.
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("File "):
            return lines[i] + (": " + lines[i + 1] if i + 1 < len(lines)
                               else "")
    return "(no source line recorded)"


def _module(node):
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    path, cls = list(stack.values())[-1]
    cls = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
    return path, cls.rsplit(".", 1)[-1]


def _target(node):
    return str(node.target)


class _Value:
    """A graph value: its name in the graph, and whether it is the
    transpose(1, 2) of that value (`bnsd`) rather than the value itself."""

    def __init__(self, name, bnsd=False):
        self.name, self.bnsd = name, bnsd


class Exporter:
    def __init__(self, model, ep):
        self.model = model
        self.nodes, self.values, self.names = [], {}, set()
        sig = ep.graph_signature
        self.params = dict(sig.inputs_to_parameters)
        self.user_inputs = list(sig.user_inputs)
        self.graph = ep.graph
        self.placeholders = {n.name: n for n in self.graph.nodes
                             if n.op == "placeholder"}
        # Each module's first op (metadata checks aside): where its input
        # enters.
        self.first_op = {}
        for n in self.graph.nodes:
            if n.op == "call_function" and "assert" not in _target(n):
                self.first_op.setdefault(_module(n)[0], n)

    # -- helpers --------------------------------------------------------

    def fail(self, node, what):
        raise ExportError(f"{what} (ATen op {_target(node)}, node "
                          f"'{node.name}'), at {_source(node)}")

    def fresh(self, base):
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def add(self, node, op, inputs, attrs=None, name=None, module=None):
        path, _ = _module(node) if node is not None else ("", "")
        entry = {"name": self.fresh(name or path or op), "op": op,
                 "inputs": inputs}
        if attrs:
            entry["attrs"] = attrs
        if module or path:
            entry["module"] = module or path
        self.nodes.append(entry)
        return entry["name"]

    def shape(self, node):
        return list(node.meta["val"].shape)

    # -- values ---------------------------------------------------------

    def value(self, node):
        """The graph value of `node`, emitting what it needs first."""
        if not isinstance(node, torch.fx.Node):
            raise ExportError(f"a constant {node!r} where a tensor is needed")
        if node in self.values:
            return self.values[node]
        v = self.emit(node)
        self.values[node] = v
        return v

    def plain(self, node):
        """The value itself, writing a transpose if it is held as one."""
        v = self.value(node)
        if not v.bnsd:
            return v.name
        name = self.add(node, "transpose", [v.name],
                        {"perm": [0, 2, 1, 3]})
        self.values[node] = _Value(name)
        return name

    def emit(self, node):
        if node.op == "placeholder":
            if node.name in self.params:
                return _Value(self.params[node.name])
            if node.name in self.user_inputs:
                return _Value(node.name)
            self.fail(node, "a buffer read outside a raised pattern")
        t = _target(node)
        path, cls = _module(node)
        if cls.endswith("RMSNorm"):
            return self.rms_norm(node, path)
        args = node.args
        if t in ("aten.to.dtype", "aten.alias.default",
                 "aten.contiguous.default", "aten.clone.default",
                 "aten.dropout.default"):
            if t == "aten.to.dtype" and args[1] != node.args[0].meta[
                    "val"].dtype:
                return _Value(self.add(node, "cast", [self.plain(args[0])],
                                       {"dtype": DTYPES[args[1]]}))
            return self.value(args[0])
        if t == "aten.embedding.default":
            return _Value(self.add(node, "embedding",
                                   [self.plain(args[0]), self.plain(args[1])]))
        if t == "aten.linear.default":
            ins = [self.plain(args[0]), self.plain(args[1])]
            if len(args) > 2 and args[2] is not None:
                ins.append(self.plain(args[2]))
            return _Value(self.add(node, "linear", ins))
        if t in ("aten.add.Tensor", "aten.mul.Tensor", "aten.sub.Tensor"):
            rotary = self.rotary(node) if t == "aten.add.Tensor" else None
            if rotary:
                return rotary
            if not all(isinstance(a, torch.fx.Node) for a in args[:2]):
                if t == "aten.mul.Tensor":
                    other = args[1] if isinstance(args[0], torch.fx.Node) \
                        else args[0]
                    x = args[0] if isinstance(args[0], torch.fx.Node) \
                        else args[1]
                    return _Value(self.add(node, "scale", [self.plain(x)],
                                           {"factor": float(other)}))
                self.fail(node, "a scalar operand")
            op = {"aten.add.Tensor": "add", "aten.mul.Tensor": "mul",
                  "aten.sub.Tensor": "sub"}[t]
            return _Value(self.add(node, op, [self.plain(args[0]),
                                              self.plain(args[1])]))
        if t in ("aten.silu.default", "aten.relu.default",
                 "aten.neg.default"):
            return _Value(self.add(node, t.split(".")[1],
                                   [self.plain(args[0])]))
        if t == "aten.gelu.default":
            approximate = node.kwargs.get("approximate", "none")
            return _Value(self.add(node, "gelu", [self.plain(args[0])],
                                   {"approximate": approximate}))
        if t in ("aten.view.default", "aten.reshape.default"):
            shape = self.shape(node)
            return _Value(self.add(node, "reshape", [self.plain(args[0])],
                                   {"shape": shape}))
        if t == "aten.transpose.int":
            dims = sorted(d % len(self.shape(node)) for d in args[1:3])
            if dims == [1, 2] and len(self.shape(node)) == 4:
                v = self.value(args[0])
                return _Value(v.name, not v.bnsd)
            perm = list(range(len(self.shape(node))))
            perm[dims[0]], perm[dims[1]] = perm[dims[1]], perm[dims[0]]
            return _Value(self.add(node, "transpose", [self.plain(args[0])],
                                   {"perm": perm}))
        if t == "aten.scaled_dot_product_attention.default":
            return self.attention(node)
        self.fail(node, "no mapping to a graph op")

    # -- raised patterns ------------------------------------------------

    def rms_norm(self, node, path):
        """One rms_norm for the module at `path`: its input is the first
        operand the module's first node reads."""
        first = self.first_op[path]
        # The module's f32 copy of its input is its input (f32 models).
        if node is first or _target(node) == "aten.to.dtype" and \
                node.args[0] is first.args[0]:
            return self.value(first.args[0])
        module = self.model.get_submodule(path)
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        if eps is None:
            self.fail(node, f"RMSNorm module '{path}' has no eps")
        users = [u for u in node.users if _module(u)[0] != path]
        if not users:
            self.fail(node, f"an RMSNorm internal value of '{path}' used")
        name = self.add(node, "rms_norm",
                        [self.plain(first.args[0]), path + ".weight"],
                        {"eps": float(eps)}, name=path, module=path)
        return _Value(name)

    def rotary_tables(self, node):
        """(position_ids node, inv_freq, attention_scaling, 0 for cos or 1
        for sin) when `node` is a rotary embedding's cos or sin (maybe
        unsqueezed), else None."""
        while _target(node) in ("aten.unsqueeze.default", "aten.to.dtype"):
            node = node.args[0]
        if node.target is not operator.getitem:
            return None
        wrap = node.args[0]
        if "wrap_with_set_grad_enabled" not in _target(wrap):
            return None
        positions = wrap.args[3]
        path, _ = _module(node)
        module = self.model.get_submodule(path)
        inv_freq = [float(f) for f in getattr(module, "inv_freq")]
        scaling = float(getattr(module, "attention_scaling", 1.0))
        return positions, inv_freq, scaling, node.args[1]

    def rotary(self, node):
        a, b = node.args[:2]
        if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)
                and _target(a) == _target(b) == "aten.mul.Tensor"):
            return None
        x, cos = a.args
        rot, sin = b.args
        tc, ts = self.rotary_tables(cos), self.rotary_tables(sin)
        if not tc or not ts or tc[3] != 0 or ts[3] != 1:
            return None
        if _target(rot) != "aten.cat.default":
            return None
        neg, first = rot.args[0]
        if _target(neg) != "aten.neg.default":
            return None
        second = neg.args[0]
        d = self.shape(x)[-1]
        halves = [(n.args[0], n.args[1] % 4, n.args[2], min(n.args[3], d))
                  for n in (first, second)
                  if _target(n) == "aten.slice.Tensor" and len(n.args) == 4]
        if halves != [(x, 3, 0, d // 2), (x, 3, d // 2, d)]:
            return None
        v = self.value(x)
        positions = self.plain(tc[0])
        theta = float(getattr(getattr(self.model, "config", None),
                              "rope_theta", 10000.0))
        attrs = {"theta": theta}
        # Frequencies theta's own (computed in f32) stay implicit; scaled
        # ones are listed.
        half = len(tc[1])
        default = [theta ** (-2.0 * i / (2 * half)) for i in range(half)]
        if any(abs(f - g) > 1e-6 * g for f, g in zip(tc[1], default)):
            attrs["inv_freq"] = tc[1]
        if tc[2] != 1.0:
            attrs["attention_scaling"] = tc[2]
        # rotary runs on [B, S, N, D]: the value held transposed is that.
        if not v.bnsd:
            self.fail(node, "rotary embedding on a [B, S, N, D] transpose")
        name = self.add(node, "rotary", [v.name, positions], attrs)
        return _Value(name, True)

    def unrepeated(self, node):
        """A key/value before repeat_kv's unsqueeze/expand/reshape."""
        if _target(node) == "aten.reshape.default":
            e = node.args[0]
            if _target(e) == "aten.expand.default":
                u = e.args[0]
                if _target(u) == "aten.unsqueeze.default" and u.args[1] == 2:
                    return u.args[0]
        return node

    def attention(self, node):
        q, k, v = node.args[:3]
        mask = node.args[3] if len(node.args) > 3 else node.kwargs.get(
            "attn_mask")
        dropout = node.args[4] if len(node.args) > 4 else node.kwargs.get(
            "dropout_p", 0.0)
        causal = node.args[5] if len(node.args) > 5 else node.kwargs.get(
            "is_causal", False)
        scale = node.kwargs.get("scale")
        if mask is not None or dropout:
            self.fail(node, "attention with a mask tensor or dropout")
        vals = [self.value(q), self.value(self.unrepeated(k)),
                self.value(self.unrepeated(v))]
        if not all(x.bnsd for x in vals):
            self.fail(node, "attention on values that are not [B, N, S, D] "
                      "transposes")
        attrs = {"causal": bool(causal)}
        if scale is not None:
            attrs["scale"] = float(scale)
        name = self.add(node, "attention", [x.name for x in vals], attrs)
        return _Value(name, True)

    # -- the whole graph -------------------------------------------------

    def run(self):
        out = [n for n in self.graph.nodes if n.op == "output"][0]
        logits = out.args[0][0]
        logits_name = self.plain(logits)
        self.add(None, "cross_entropy", [logits_name, "labels"],
                 name="loss")
        return logits_name


def export(model, example_inputs, model_name=None):
    """The graph.json (a dict) of `model`'s forward on `example_inputs`
    (a dict with `input_ids` and `position_ids` [B, S]) followed by the
    mean cross-entropy of the logits against a `labels` input, already
    shifted as docs/graph-format.md says."""
    model = model.train()
    kwargs = dict(example_inputs)
    kwargs.setdefault("use_cache", False)
    ep = torch.export.export(model, (), kwargs, strict=False)
    exporter = Exporter(model, ep)
    logits = exporter.run()
    inputs = []
    for name in exporter.user_inputs:
        node = exporter.placeholders.get(name)
        if node is None or name not in example_inputs:
            continue
        val = node.meta["val"]
        inputs.append({"name": name, "shape": list(val.shape),
                       "dtype": DTYPES[val.dtype]})
    ids = example_inputs["input_ids"]
    inputs.append({"name": "labels", "shape": list(ids.shape),
                   "dtype": "i64"})
    used = {i for n in exporter.nodes for i in n["inputs"]}
    std = getattr(getattr(model, "config", None), "initializer_range", 0.02)
    params = []
    for name, p in model.named_parameters():
        if name in used:
            params.append({"name": name, "shape": list(p.shape),
                           "dtype": DTYPES[p.dtype],
                           "init": {"kind": "ones"} if name.endswith(
                               "norm.weight") else
                           {"kind": "normal", "std": std}})
    return {"format": "fsdp-graph", "version": 1,
            "model": model_name or type(model).__name__,
            "inputs": inputs, "parameters": params,
            "nodes": exporter.nodes,
            "outputs": [{"name": "loss", "value": "loss"},
                        {"name": "logits", "value": logits}]}

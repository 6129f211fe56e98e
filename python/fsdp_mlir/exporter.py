"""A PyTorch model as a graph.json: torch.export, then ATen ops mapped to the
graph format's ops (docs/graph-format.md), with the subgraphs the passes
know raised to their coarse ops.

Raising works on what torch.export keeps of the model: each node's module
path and class (`nn_module_stack`), the ATen pattern around it, and the
values of what depends on no input (masks).

- A module whose class name ends in `RMSNorm` becomes one `rms_norm` of its
  input and `<path>.weight`, with the module's `variance_epsilon` or `eps`;
  a tanh-approximated GELU module (`NewGELUActivation`, `GELUTanh`, ...)
  becomes one `gelu` with `approximate: tanh`. Each raised module is run
  once on random values against the op it becomes (a Gemma-style
  `1 + weight` norm is an error, not a different model).
- Rotary embedding: `x * cos + cat(-x2, x1) * sin` (Hugging Face's
  `rotate_half`), where cos and sin come from a rotary-embedding module's
  inverse frequencies and the `position_ids` input, becomes one `rotary`
  with those frequencies and the module's `attention_scaling`.
- `scaled_dot_product_attention` on `[B, N, S, D]` transposes of
  `[B, S, N, D]` values becomes one `attention`; grouped-query key/value
  heads repeated by `unsqueeze/expand/reshape` (`repeat_kv`) are read once
  (the op is grouped-query itself), as with `enable_gqa`. A mask tensor
  that depends on no input is evaluated, and so is one that depends on
  `position_ids` alone (transformers 5 builds its masks from the
  positions) for the positions the runtime feeds, 0..S-1 in every row
  (unpacked rows): a causal mask becomes `causal: true`, a causal band of
  width W `sliding_window: W`; any other mask (padding, a bias) is an
  error.
- A Conv1D (`addmm` of a flattened input) becomes `matmul` + `add` on the
  unflattened value, and `split` + `getitem` one multi-result `split`.

`transpose(1, 2)` pairs around attention cost nothing: values carry their
layout, and a transpose is only written when an op that is not raised
reads the transposed form; views that do not change the shape are
dropped. An ATen op with no mapping is an error naming the op and the
user's source line.
"""

import inspect
import math
import operator
import os

import torch

DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16",
          torch.float16: "f16", torch.int64: "i64", torch.int32: "i32"}

# Module classes computing GELU's tanh approximation from elementary ops.
TANH_GELUS = ("NewGELUActivation", "FastGELUActivation", "GELUTanh",
              "PytorchGELUTanh", "GELUPytorchTanh")

# ATen ops that are the value of their first operand.
IDENTITIES = ("aten.alias.default", "aten.contiguous.default",
              "aten.clone.default", "aten.detach.default")


class ExportError(Exception):
    """An op or pattern the exporter cannot map, with where it came from."""


def _source(node):
    """The user's line that made the op: the innermost frame outside
    torch's own modules (a dropout is reported where the model calls it,
    not in torch/nn/modules/dropout.py)."""
    trace = node.meta.get("stack_trace") or ""
    lines = [l.strip() for l in trace.strip().splitlines() if l.strip()]
    frames = [(lines[i] + (": " + lines[i + 1] if i + 1 < len(lines) and
                           not lines[i + 1].startswith("File ") else ""))
              for i in range(len(lines)) if lines[i].startswith("File ")]
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    outside = [f for f in frames if torch_dir not in f.split(",")[0]]
    if outside or frames:
        return (outside or frames)[-1]
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


def _raised_kind(cls):
    if cls.endswith("RMSNorm"):
        return "rms_norm"
    if cls in TANH_GELUS:
        return "gelu"
    return None


def _no_values(tensor):
    """Whether `tensor` has shape but no data (meta or fake)."""
    from torch._subclasses.fake_tensor import FakeTensor
    return tensor.is_meta or isinstance(tensor, FakeTensor)


def _arg(node, i, name, default):
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


class _Value:
    """A graph value: its name in the graph, whether it is the
    transpose(1, 2) of that value (`bnsd`) rather than the value itself,
    and its shape when that differs from the ATen node's (a Conv1D's
    unflattened product)."""

    def __init__(self, name, bnsd=False, shape=None):
        self.name, self.bnsd, self.shape = name, bnsd, shape


class Exporter:
    def __init__(self, model, ep):
        self.model = model
        self.nodes, self.values, self.names = [], {}, set()
        self.consts = {}
        self.init = {}
        self.packed = False
        sig = ep.graph_signature
        # A tied parameter keeps the name named_parameters() gives it
        # first (GPT-2's table is `transformer.wte.weight`, not `lm_head`).
        first_name = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            first_name.setdefault(id(p), name)
        by_name = dict(model.named_parameters(remove_duplicate=False))
        self.params = {ph: first_name[id(by_name[fqn])]
                       for ph, fqn in sig.inputs_to_parameters.items()}
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
        self.verified = set()
        self.tables = {}
        self.meta_tables = {}
        self.graph_module = ep.graph_module
        self.graph_signature = sig

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

    def param(self, node, init):
        """The parameter `node` reads, recording how it is initialized
        (norm weights ones, biases zeros)."""
        name = self.plain(node)
        if node.op == "placeholder" and node.name in self.params:
            self.init.setdefault(name, init)
        return name

    def constant(self, node):
        """The value of `node` when it depends on no input, parameter or
        buffer (a mask built from aranges), else None."""
        if node not in self.consts:
            self.consts[node] = self.evaluate(node, {})
        return self.consts[node]

    def evaluate(self, node, inputs):
        """The value of `node` computed from the placeholder values
        `inputs` ({node: tensor}) alone, else None when it depends on
        another input, parameter or buffer: its ancestors run in graph
        order."""
        needed, stack = set(), [node]
        while stack:
            n = stack.pop()
            if n in needed or n in inputs:
                continue
            if n.op != "call_function":
                return None
            needed.add(n)
            stack.extend(n.all_input_nodes)
        env = dict(inputs)
        look = lambda a: env[a] if isinstance(a, torch.fx.Node) else a
        for n in self.graph.nodes:
            if n in needed:
                env[n] = n.target(
                    *torch.fx.node.map_aggregate(n.args, look),
                    **torch.fx.node.map_aggregate(n.kwargs, look))
        return env[node]

    def positional_mask(self, mask):
        """The value of a mask that depends on the `position_ids` input
        only (transformers 5 builds its causal and sliding-window masks
        from the positions, and splits packed rows where they restart),
        for the positions the runtime feeds, 0..S-1 in every row; None
        when it depends on another input or differs for positions
        starting elsewhere (it would be a mask of their values)."""
        positions = self.placeholders.get("position_ids")
        if positions is None or "position_ids" not in self.user_inputs:
            return None
        val = positions.meta["val"]
        rows = torch.arange(val.shape[-1], dtype=val.dtype).expand(
            tuple(val.shape))
        m = self.evaluate(mask, {positions: rows})
        if m is None or not torch.equal(
                m, self.evaluate(mask, {positions: rows + 5})):
            return None
        return m

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
        args = node.args
        # Fused ATen ops map directly, whatever module holds them.
        if t == "aten.rms_norm.default":
            return self.aten_rms_norm(node)
        if t == "aten.layer_norm.default":
            return self.layer_norm(node)
        if t == "aten.gelu.default":
            approximate = node.kwargs.get("approximate", "none")
            return _Value(self.add(node, "gelu", [self.plain(args[0])],
                                   {"approximate": approximate}))
        kind = _raised_kind(cls)
        if kind:
            return self.raised_module(node, path, kind)
        if t in IDENTITIES:
            return self.value(args[0])
        if t == "aten.dropout.default":
            if args[1] and _arg(node, 2, "train", True):
                self.fail(node, f"dropout with p = {args[1]} (the graph "
                          "has no dropout; export with p = 0 or in eval "
                          "mode)")
            return self.value(args[0])
        if t.startswith("aten.to.") or t == "aten._to_copy.default":
            # A device move is the value; a dtype change is a cast.
            dtype = node.meta["val"].dtype
            if dtype != args[0].meta["val"].dtype:
                return _Value(self.add(node, "cast", [self.plain(args[0])],
                                       {"dtype": DTYPES[dtype]}))
            return self.value(args[0])
        if t == "aten.embedding.default":
            return _Value(self.add(node, "embedding",
                                   [self.param(args[0], None),
                                    self.plain(args[1])]))
        if t == "aten.linear.default":
            ins = [self.plain(args[0]), self.plain(args[1])]
            if len(args) > 2 and args[2] is not None:
                ins.append(self.param(args[2], {"kind": "zeros"}))
            return _Value(self.add(node, "linear", ins))
        if t in ("aten.addmm.default", "aten.mm.default"):
            return self.conv1d(node)
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
        if t in ("aten.view.default", "aten.reshape.default"):
            v = self.value(args[0])
            shape = self.shape(node)
            if not v.bnsd and (v.shape or self.shape(args[0])) == shape:
                return _Value(v.name)
            # A transposed value viewed as its own shape stays held so.
            if v.bnsd and self.shape(args[0]) == shape:
                return v
            return _Value(self.add(node, "reshape", [self.plain(args[0])],
                                   {"shape": shape}))
        if t in ("aten.transpose.int", "aten.permute.default"):
            rank = len(self.shape(node))
            if t == "aten.transpose.int":
                dims = sorted(d % rank for d in args[1:3])
                perm = list(range(rank))
                perm[dims[0]], perm[dims[1]] = perm[dims[1]], perm[dims[0]]
            else:
                perm = [d % rank for d in args[1]]
            if perm == [0, 2, 1, 3]:
                v = self.value(args[0])
                return _Value(v.name, not v.bnsd)
            return _Value(self.add(node, "transpose", [self.plain(args[0])],
                                   {"perm": perm}))
        if t in ("aten.split.Tensor", "aten.split_with_sizes.default"):
            shape = self.shape(args[0])
            dim = _arg(node, 2, "dim", 0) % len(shape)
            if t == "aten.split.Tensor":
                size = args[1]
                sizes = [min(size, shape[dim] - s)
                         for s in range(0, shape[dim], size)]
            else:
                sizes = list(args[1])
            return _Value(self.add(node, "split", [self.plain(args[0])],
                                   {"dim": dim, "sizes": sizes}))
        if node.target is operator.getitem and _target(args[0]) in (
                "aten.split.Tensor", "aten.split_with_sizes.default"):
            whole = self.value(args[0]).name
            return _Value(whole if args[1] == 0 else f"{whole}:{args[1]}")
        if t == "aten.scaled_dot_product_attention.default":
            return self.attention(node)
        self.fail(node, "no mapping to a graph op")

    # -- raised patterns ------------------------------------------------

    def verify_module(self, node, path, kind, eps):
        """Runs the module at `path` once (on CPU, in float64, with random
        weights in place of its own, which may be meta or fake: a model
        exported without weights) against the op it is raised to."""
        if path in self.verified:
            return
        self.verified.add(path)
        module = self.model.get_submodule(path)
        gen = torch.Generator().manual_seed(0)
        weights = {n: torch.rand(p.shape, generator=gen,
                                 dtype=torch.float64) + 0.5
                   for n, p in module.named_parameters()}
        with torch.no_grad():
            x = torch.randn([2, self.shape(node)[-1]], generator=gen,
                            dtype=torch.float64) * 3
            got = torch.func.functional_call(module, weights, (x,))
            if kind == "rms_norm":
                want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) \
                    * weights["weight"]
            else:
                want = torch.nn.functional.gelu(x, approximate="tanh")
        err = ((got - want).abs().max() / want.abs().max()).item()
        if not err < 1e-6:
            self.fail(node, f"module '{path}' ({_module(node)[1]}) does not "
                      f"compute {kind} (relative difference {err:.2e} on "
                      "random values)")

    def raised_module(self, node, path, kind):
        """One op for the module at `path` (an RMSNorm or a tanh GELU): its
        input is the first operand the module's first node reads."""
        first = self.first_op[path]
        # The module's f32 copy of its input is its input (f32 models).
        if node is first or _target(node) == "aten.to.dtype" and \
                node.args[0] is first.args[0]:
            return self.value(first.args[0])
        users = [u for u in node.users if _module(u)[0] != path]
        if not users:
            self.fail(node, f"an internal value of module '{path}' used")
        x = self.plain(first.args[0])
        if kind == "gelu":
            self.verify_module(node, path, kind, None)
            return _Value(self.add(node, "gelu", [x],
                                   {"approximate": "tanh"}, name=path,
                                   module=path))
        module = self.model.get_submodule(path)
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        if eps is None:
            self.fail(node, f"RMSNorm module '{path}' has no eps")
        weight = path + ".weight"
        if weight not in self.params.values():
            self.fail(node, f"RMSNorm module '{path}' has no parameter "
                      f"'{weight}'")
        self.verify_module(node, path, kind, float(eps))
        self.init.setdefault(weight, {"kind": "ones"})
        return _Value(self.add(node, "rms_norm", [x, weight],
                               {"eps": float(eps)}, name=path, module=path))

    def aten_rms_norm(self, node):
        x, normalized, weight = node.args[:3]
        eps = _arg(node, 3, "eps", None)
        if len(normalized) != 1 or weight is None:
            self.fail(node, "rms_norm over more than the last dimension or "
                      "without a weight")
        if eps is None:
            eps = torch.finfo(x.meta["val"].dtype).eps
        return _Value(self.add(node, "rms_norm",
                               [self.plain(x),
                                self.param(weight, {"kind": "ones"})],
                               {"eps": float(eps)}))

    def layer_norm(self, node):
        x, normalized = node.args[:2]
        weight = _arg(node, 2, "weight", None)
        bias = _arg(node, 3, "bias", None)
        eps = _arg(node, 4, "eps", 1e-5)
        if len(normalized) != 1 or weight is None:
            self.fail(node, "layer_norm over more than the last dimension "
                      "or without a weight")
        ins = [self.plain(x), self.param(weight, {"kind": "ones"})]
        if bias is not None:
            ins.append(self.param(bias, {"kind": "zeros"}))
        path, _ = _module(node)
        return _Value(self.add(node, "layer_norm", ins, {"eps": float(eps)},
                               name=path or None))

    def conv1d(self, node):
        """addmm(bias, x.view(-1, K), W) (Hugging Face's Conv1D, weight
        [K, N]) as matmul + add on x itself: the flattening view and the
        view back cost nothing."""
        t = _target(node)
        if t == "aten.addmm.default":
            bias, a, w = node.args[:3]
            if node.kwargs.get("beta", 1) != 1 or \
                    node.kwargs.get("alpha", 1) != 1:
                self.fail(node, "addmm with beta or alpha")
        else:
            bias, (a, w) = None, node.args[:2]
        x, shape = a, self.shape(a)
        if _target(a) in ("aten.view.default", "aten.reshape.default") and \
                self.shape(a.args[0])[-1] == shape[-1]:
            x, shape = a.args[0], self.shape(a.args[0])
        out = shape[:-1] + [self.shape(node)[-1]]
        path, _ = _module(node)
        mm = self.add(node, "matmul", [self.plain(x), self.plain(w)],
                      {"transpose_a": False, "transpose_b": False},
                      name=(path + ".matmul") if path and bias is not None
                      else None)
        if bias is None:
            return _Value(mm, shape=out)
        return _Value(self.add(node, "add",
                               [mm, self.param(bias, {"kind": "zeros"})]),
                      shape=out)

    def rotary_tables(self, node):
        """(position_ids node, inv_freq, attention_scaling, 0 for cos or 1
        for sin) when `node` is a rotary embedding's cos or sin (maybe
        unsqueezed), else None. The rotary module runs either inside a
        no-grad wrapper (PyTorch 2.11 with transformers 4) or inline
        (transformers 5)."""
        while _target(node) in ("aten.unsqueeze.default", "aten.to.dtype"):
            node = node.args[0]
        if node.target is operator.getitem:
            wrap = node.args[0]
            if "wrap_with_set_grad_enabled" not in _target(wrap):
                return None
            if wrap not in self.tables:
                self.tables[wrap] = self.wrapped_rotary(wrap)
            return self.tables[wrap] + (node.args[1],)
        # Inline: cos or sin of the angles, times attention_scaling.
        trig, factor = node, 1.0
        while _target(trig) == "aten.mul.Tensor" and \
                not isinstance(trig.args[1], torch.fx.Node):
            factor *= float(trig.args[1])
            trig = trig.args[0]
        index = {"aten.cos.default": 0,
                 "aten.sin.default": 1}.get(_target(trig))
        if index is None or not isinstance(trig.args[0], torch.fx.Node):
            return None
        angles = trig.args[0]
        path, _ = _module(angles)
        if angles not in self.tables:
            self.tables[angles] = self.inline_rotary(angles, path)
        scaling = self.tables[angles][2]
        if abs(factor - scaling) > 1e-6 * abs(scaling):
            self.fail(node, f"rotary module '{path}' scales cos/sin by "
                      f"{factor}, not its attention_scaling {scaling}")
        return self.tables[angles] + (index,)

    def rotary_frequencies(self, node, path):
        """(inv_freq, attention_scaling) of the rotary module at `path`."""
        module = self.model.get_submodule(path)
        inv_freq = getattr(module, "inv_freq", None)
        scaling = getattr(module, "attention_scaling", 1.0)
        if inv_freq is None:
            self.fail(node, f"rotary module '{path}' has no inv_freq")
        if path in self.meta_tables:
            inv_freq, scaling = self.meta_tables[path]
        elif _no_values(inv_freq):
            self.fail(node, f"rotary module '{path}' has its frequencies "
                      "on the meta device and no rule to compute them")
        return inv_freq, scaling

    def check_rotary(self, node, path, positions, inv_freq, scaling, run):
        """(position_ids node, inv_freq, attention_scaling) once `run`
        (sample positions -> (cos, sin)) computes cos/sin of cat(f, f),
        f = position · inv_freq, times attention_scaling."""
        with torch.no_grad():
            cos, sin = run(positions)
            angles = positions[..., None].double() * inv_freq.double()
            angles = torch.cat([angles, angles], -1)
            err = max(((cos - angles.cos() * scaling).abs().max()),
                      ((sin - angles.sin() * scaling).abs().max())).item()
        # The module rounds cos/sin to the model's dtype (bf16: 2^-8).
        if not err < max(1e-4, 2 * torch.finfo(cos.dtype).eps):
            self.fail(node, f"rotary module '{path}' does not compute "
                      "cos/sin of cat(f, f), f = position * inv_freq "
                      f"(difference {err:.2e} on sample positions)")
        return [float(f) for f in inv_freq], float(scaling)

    def wrapped_rotary(self, wrap):
        """The tables of the no-grad rotary module `wrap` calls."""
        path, _ = _module(wrap)
        inv_freq, scaling = self.rotary_frequencies(wrap, path)
        operands = wrap.args[2:]
        ints = [a for a in operands if isinstance(a, torch.fx.Node) and
                not a.meta["val"].dtype.is_floating_point]
        if len(ints) != 1:
            self.fail(wrap, f"rotary module '{path}' without one integer "
                      "position input")
        body = self.graph_module.get_submodule(wrap.args[1].target)

        def run(positions):
            return body(*[positions if a is ints[0] else inv_freq.float()
                          for a in operands])[:2]
        return (ints[0],) + self.check_rotary(
            wrap, path, torch.arange(0, 96, 3).reshape(1, -1), inv_freq,
            scaling, run)

    def inline_rotary(self, angles, path):
        """The tables of a rotary module whose ops are inline: `angles`
        (the argument of its cos and sin) computed from the one integer
        input and the module's buffers."""
        inv_freq, scaling = self.rotary_frequencies(angles, path)
        found, stack, seen = [], [angles], set()
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder":
                found.append(n)
            stack.extend(n.all_input_nodes)
        buffers = self.graph_signature.inputs_to_buffers
        ints = [n for n in found if n.name not in buffers]
        if len(ints) != 1 or ints[0].meta["val"].dtype.is_floating_point:
            self.fail(angles, f"rotary module '{path}' without one integer "
                      "position input")
        given = {}
        for n in found:
            if n.name in buffers:
                fqn = buffers[n.name]
                given[n] = inv_freq if fqn == (path + ".inv_freq") \
                    else self.model.get_buffer(fqn)
        shape = tuple(ints[0].meta["val"].shape)
        numel = math.prod(shape)

        def run(positions):
            x = self.evaluate(angles, {**given, ints[0]: positions})
            return x.cos() * scaling, x.sin() * scaling
        # Positions below 96, as for the wrapped form: f32 angles of large
        # positions differ from the double reference by their rounding.
        sample = (torch.arange(numel) % 32 * 3).reshape(shape)
        return (ints[0],) + self.check_rotary(angles, path, sample,
                                              inv_freq, scaling, run)

    def rotary(self, node):
        a, b = node.args[:2]
        if not (isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node)
                and _target(a) == _target(b) == "aten.mul.Tensor"):
            return None
        x, cos = a.args
        rot, sin = b.args
        if not all(isinstance(n, torch.fx.Node) for n in (x, cos, rot, sin)):
            return None
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
        theta = _rope_theta(getattr(self.model, "config", None))
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
        while _target(node) in IDENTITIES:
            node = node.args[0]
        if _target(node) == "aten.reshape.default":
            e = node.args[0]
            if _target(e) == "aten.expand.default":
                u = e.args[0]
                if _target(u) == "aten.unsqueeze.default" and u.args[1] == 2:
                    return u.args[0]
        return node

    def check_documents(self, node, mask, s, window):
        """Fails unless the causal mask `mask` (a function of position_ids)
        splits rows where the positions restart: for sample packed rows,
        query i sees key j iff j <= i, i - j < window and j is in i's
        document."""
        positions = self.placeholders.get("position_ids")
        if positions is None or "position_ids" not in self.user_inputs:
            self.fail(node, "packed=True needs the position_ids input")
        shape = tuple(positions.meta["val"].shape)
        lengths = [1, 3, max(1, s // 3), s]
        rows, at = [], 0
        while len(rows) < s:
            n = lengths[at % len(lengths)]
            rows += list(range(n))
            at += 1
        pos = torch.tensor(rows[:s], dtype=positions.meta["val"].dtype)
        m = self.evaluate(mask, {positions: pos.expand(shape)})
        allowed = (m if m.dtype == torch.bool else m == 0)
        allowed = torch.broadcast_to(allowed, allowed.shape[:-2] + (s, s))
        allowed = allowed.reshape(-1, s, s)[0]
        i = torch.arange(s).unsqueeze(1)
        j = torch.arange(s).unsqueeze(0)
        want = (j <= i) & (j >= i - pos.unsqueeze(1))
        if window:
            want &= i - j < window
        if not torch.equal(allowed, want):
            self.fail(node, "packed=True, but the model's attention mask does "
                      "not split rows where position_ids restart at 0")

    def mask(self, node, mask, s):
        """(causal, sliding window or None) that the constant mask `mask`
        of an `s`-token attention is."""
        m = self.constant(mask)
        if m is None:
            m = self.positional_mask(mask)
        if m is None:
            self.fail(node, "an attention mask that depends on the inputs "
                      "(padding): only causal and sliding-window masks are "
                      "raised")
        if m.dtype == torch.bool:
            allowed = m
        else:
            if not bool(((m == 0) | (m <= -1e30)).all()):
                self.fail(node, "an additive attention mask with values "
                          "other than 0 and -inf (a bias)")
            allowed = m == 0
        allowed = torch.broadcast_to(allowed, allowed.shape[:-2] + (s, s))
        rows = allowed.reshape(-1, s, s)
        if not bool((rows == rows[0]).all()):
            self.fail(node, "an attention mask that differs across the "
                      "batch or heads")
        allowed = rows[0]
        if bool(allowed.all()):
            return False, None
        i = torch.arange(s).unsqueeze(1)
        j = torch.arange(s).unsqueeze(0)
        window = int(allowed[-1].sum())
        if torch.equal(allowed, (j <= i) & (i - j < window)):
            return True, (window if window < s else None)
        self.fail(node, "an attention mask that is neither causal nor a "
                  "causal sliding window")

    def attention(self, node):
        q, k, v = node.args[:3]
        mask = _arg(node, 3, "attn_mask", None)
        dropout = _arg(node, 4, "dropout_p", 0.0)
        causal = _arg(node, 5, "is_causal", False)
        scale = node.kwargs.get("scale")
        if dropout:
            self.fail(node, "attention with dropout")
        window = None
        if mask is not None:
            if causal:
                self.fail(node, "attention with both a mask and is_causal")
            causal, window = self.mask(node, mask, self.shape(q)[2])
        vals = [self.value(q), self.value(self.unrepeated(k)),
                self.value(self.unrepeated(v))]
        if not all(x.bnsd for x in vals):
            self.fail(node, "attention on values that are not [B, N, S, D] "
                      "transposes")
        attrs = {"causal": bool(causal)}
        if window is not None:
            attrs["sliding_window"] = window
        d = self.shape(q)[-1]
        # 1/sqrt(D) stated explicitly is the default.
        if scale is not None and abs(scale * math.sqrt(d) - 1) > 1e-12:
            attrs["scale"] = float(scale)
        inputs = [x.name for x in vals]
        if self.packed:
            if not causal or mask is None:
                self.fail(node, "packed=True needs causal attention masked "
                          "from position_ids (transformers 5's masks)")
            self.check_documents(node, mask, self.shape(q)[2], window)
            attrs["packed"] = True
            inputs.append(self.plain(self.placeholders["position_ids"]))
        name = self.add(node, "attention", inputs, attrs)
        return _Value(name, True)

    # -- the whole graph -------------------------------------------------

    def run(self, ignore_index):
        out = [n for n in self.graph.nodes if n.op == "output"][0]
        logits = out.args[0][0]
        logits_name = self.plain(logits)
        attrs = {"ignore_index": ignore_index} if ignore_index != -100 \
            else None
        self.add(None, "cross_entropy", [logits_name, "labels"], attrs,
                 name="loss")
        return logits_name


def _rope_theta(config):
    """The rotary base: transformers 5's `rope_parameters`, else 4's
    `rope_theta`, else 10000."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", 10000.0))


def _rope_init(module):
    """The rule computing a rotary module's (inv_freq, attention_scaling)
    from its config: transformers 4's `rope_init_fn(config, device)`, or
    5's `compute_default_rope_parameters` and ROPE_INIT_FUNCTIONS by
    `rope_type`; None for a module without one."""
    init = getattr(module, "rope_init_fn", None)
    if init is not None:
        return lambda: init(module.config, "cpu")
    rope_type = getattr(module, "rope_type", None)
    if rope_type is None or not hasattr(module, "config"):
        return None
    if rope_type == "default":
        default = getattr(module, "compute_default_rope_parameters", None)
        return default and (lambda: default(module.config))
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    init = ROPE_INIT_FUNCTIONS.get(rope_type)
    return init and (lambda: init(module.config))


def _init_std(model, name):
    """The normal init's std: the config's initializer_range, scaled as
    Hugging Face's GPT-2 scales its residual projections."""
    config = getattr(model, "config", None)
    std = getattr(config, "initializer_range", 0.02)
    if getattr(config, "model_type", None) == "gpt2" and \
            name.endswith("c_proj.weight"):
        std /= math.sqrt(2 * config.n_layer)
    return std


def _export_meta(model, kwargs):
    """torch.export of a model built on the meta device (no weights), in
    place: its tensors become fake CPU tensors (shapes only; torch's meta
    device cannot run autocast regions such as Hugging Face's rotary
    embedding). Rotary frequencies are computed first from the modules'
    own rule (transformers' rope_init_fn): {module path: (inv_freq,
    attention_scaling)}."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    tables = {}
    for path, module in model.named_modules():
        inv_freq = getattr(module, "inv_freq", None)
        init = _rope_init(module)
        if isinstance(inv_freq, torch.Tensor) and inv_freq.is_meta and init:
            tables[path] = init()
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        fake = {k: torch.empty(v.shape, dtype=v.dtype) if isinstance(
            v, torch.Tensor) else v for k, v in kwargs.items()}
        ep = torch.export.export(model, (), fake, strict=False)
    return ep, tables


def export(model, example_inputs, ignore_index=-100, model_name=None,
           packed=False):
    """The graph.json (a dict) of `model`'s forward on `example_inputs`
    (a dict of its inputs by name, `input_ids` [B, S] among them, usually
    with `position_ids`) followed by the mean cross-entropy of the logits
    against an int64 input `labels` (the name the runtime's data loader
    fills), already shifted as docs/graph-format.md says; positions
    labelled `ignore_index` do not count. The model's forward returns the logits first (a tensor, a
    tuple, or a Hugging Face output). A model on the meta device is
    exported without weights (its tensors become fake, in place).

    With `packed`, rows hold several documents, position_ids restarting
    at 0 where each starts: each attention of the graph sees only its
    query's document (`packed` attention), once the model's own mask is
    checked to split rows there (transformers 5 does, from the
    positions)."""
    if "labels" in example_inputs:
        raise ExportError("'labels' is among the example inputs: the graph "
                          "computes the loss from the logits itself, so "
                          "the model must not take labels")
    model = model.train()
    kwargs = dict(example_inputs)
    if "use_cache" in inspect.signature(model.forward).parameters:
        kwargs.setdefault("use_cache", False)
    tables = {}
    if any(t.is_meta for t in model.parameters()):
        ep, tables = _export_meta(model, kwargs)
    else:
        ep = torch.export.export(model, (), kwargs, strict=False)
    exporter = Exporter(model, ep)
    exporter.meta_tables = tables
    exporter.packed = packed
    logits = exporter.run(ignore_index)
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
    params = []
    for name, p in model.named_parameters():
        if name in used:
            init = exporter.init.get(name) or {
                "kind": "normal", "std": _init_std(model, name)}
            params.append({"name": name, "shape": list(p.shape),
                           "dtype": DTYPES[p.dtype], "init": init})
    return {"format": "fsdp-graph", "version": 1,
            "model": model_name or type(model).__name__,
            "inputs": inputs, "parameters": params,
            "nodes": exporter.nodes,
            "outputs": [{"name": "loss", "value": "loss"},
                        {"name": "logits", "value": logits}]}

# Checks a compiled program's forward pass against a PyTorch reference.
#
# A program run with `--dump-dir D` writes, per rank r, `D/rank<r>/manifest.txt`
# (one line per tensor: `<name> <dtype> <d0>x<d1>x...`, `scalar` for rank 0)
# and `D/rank<r>/<name>.bin` (raw little-endian data; bf16 as uint16 bits).
# This script rebuilds the forward pass of the Hugging Face model family named
# by the config's `architectures[0]` in plain PyTorch, reading the config
# fields the way lib/Import/GraphGen.cpp does, feeds it the dumped parameters
# and inputs, and compares with the dumped `logits` and `loss`. The reference
# runs in float64 on the exact dumped values, so the difference measures the
# program's error alone.
#
# Errors are relative to the result's scale: for logits max |ours - ref| over
# max |ref|, for the loss |ours - ref| / |ref|. Every parameter in the dump
# must be used by the reference and every parameter it needs must be in the
# dump.
#
# Usage: /usr/bin/python3 reference.py --config CONFIG.json --dump DIR
#                                      [--rank 0] [--rtol 1e-5]
# Exit status: 0 within tolerance, 1 when a comparison FAILs, 2 when the dump
# does not match the config.

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

# Every script that imports this module computes its CPU references on one
# intra-op thread. With two, about 1 process in 100 (torch 2.11 from PyPI,
# MKL's vector math) got the first float32 cos of the process wrong in the
# calling thread's half of the tensor: transformers' rotary-embedding cos
# off by up to 1.5e-4, which moved q_proj and k_proj gradients by 1.3e-4
# against the 1e-5 tolerance. Later calls in the same process were exact,
# and 300 processes of the same step on one thread were all exact.
torch.set_num_threads(1)

INPUTS = ("input_ids", "position_ids", "labels")
OUTPUTS = ("loss", "logits")
FLOAT_DTYPES = {"f32", "bf16", "f16"}
INT_DTYPES = {"i32", "i64"}


class DumpError(Exception):
    """The dump or the config cannot be checked (exit status 2)."""


#===------------------------------------------------------------------------===#
# Dump files
#===------------------------------------------------------------------------===#


def eager_experts(config):
    """A transformers config with its experts (if any) in eager form: their
    grouped kernel has no float64."""
    if hasattr(config, "_experts_implementation"):
        config._experts_implementation = "eager"
    return config


def router_kwargs(config):
    """The forward keyword that makes a transformers mixture of experts
    with output_router_logits return its load-balancing loss (aux_loss)."""
    aux = getattr(config, "output_router_logits", False)
    return {"output_router_logits": True} if aux else {}


def with_aux_loss(config, out, loss):
    """transformers' training loss: `loss` plus router_aux_loss_coef times
    the load-balancing loss when the config asks for it."""
    if not router_kwargs(config):
        return loss
    return loss + config.router_aux_loss_coef * out.aux_loss


def read_manifest(directory):
    """Returns {name: (dtype, shape)} in manifest order."""
    path = os.path.join(directory, "manifest.txt")
    if not os.path.isfile(path):
        raise DumpError(f"no manifest at '{path}'")
    entries = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split()
            if not words:
                continue
            where = f"{path}:{number}"
            if len(words) != 3:
                raise DumpError(f"{where}: expected '<name> <dtype> <shape>'")
            name, dtype, dims = words
            if dtype not in FLOAT_DTYPES | INT_DTYPES:
                raise DumpError(f"{where}: unknown dtype '{dtype}'")
            try:
                shape = () if dims == "scalar" else tuple(
                    int(d) for d in dims.split("x"))
            except ValueError:
                raise DumpError(f"{where}: bad shape '{dims}'") from None
            if name in entries:
                raise DumpError(f"{where}: tensor '{name}' listed twice")
            entries[name] = (dtype, shape)
    return entries


def load_tensor(directory, name, dtype, shape):
    """Reads a dumped tensor: floats as float64 (exactly), ints as int64."""
    path = os.path.join(directory, name + ".bin")
    if not os.path.isfile(path):
        raise DumpError(f"tensor '{name}' is in the manifest but '{path}' "
                        "does not exist")
    if dtype == "bf16":
        bits = np.fromfile(path, dtype="<u2").astype(np.uint32) << 16
        array = bits.view(np.float32)
    else:
        array = np.fromfile(path, dtype={"f32": "<f4", "f16": "<f2",
                                         "i32": "<i4", "i64": "<i8"}[dtype])
    count = math.prod(shape)
    if array.size != count:
        raise DumpError(f"'{path}' holds {array.size} {dtype} elements, the "
                        f"manifest says {count} ({format_shape(shape)})")
    array = array.astype(np.float64 if dtype in FLOAT_DTYPES else np.int64)
    return torch.from_numpy(array.reshape(shape))


def format_shape(shape):
    return "x".join(str(d) for d in shape) if shape else "scalar"


#===------------------------------------------------------------------------===#
# Config, read as GraphGen reads it
#===------------------------------------------------------------------------===#


def get(config, key, default):
    """A field, or `default` when absent or null (as transformers does)."""
    value = config.get(key)
    return default if value is None else value


def get_nullable(config, key, default):
    """`default` only when absent; an explicit null stays None."""
    return config[key] if key in config else default


class ModelSpec:
    """The model's structure with GraphGen's defaults resolved."""

    FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral",
                "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                "GPT2LMHeadModel": "gpt2"}

    def __init__(self, config):
        archs = config.get("architectures")
        if not isinstance(archs, list) or not archs:
            raise DumpError("config has no 'architectures' list")
        self.architecture = archs[0]
        if self.architecture not in self.FAMILIES:
            raise DumpError(f"unsupported architecture '{self.architecture}' "
                            f"(supported: {', '.join(self.FAMILIES)})")
        self.family = self.FAMILIES[self.architecture]
        if self.family == "gpt2":
            self._read_gpt2(config)
        else:
            self._read_llama_like(config)

    def _read_llama_like(self, config):
        family = self.family
        self.vocab = config["vocab_size"]
        self.hidden = config["hidden_size"]
        self.intermediate = config["intermediate_size"]
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = get(config, "num_key_value_heads", self.heads)
        # Qwen3Config defaults head_dim to 128 (null: derived); others derive.
        head_dim = (get_nullable(config, "head_dim", 128) if family == "qwen3"
                    else get(config, "head_dim", None))
        self.eps = get(config, "rms_norm_eps", 1e-6)
        self.tie = get(config, "tie_word_embeddings", False)
        if get(config, "hidden_act", "silu") != "silu":
            raise DumpError("only hidden_act 'silu' is supported")
        if "rope_theta" in config and config["rope_theta"] is not None:
            self.theta = float(config["rope_theta"])
        else:
            params = get(config, "rope_parameters", {})
            self.theta = float(get(params, "rope_theta", 10000.0))
        # GraphGen applies no rope scaling; neither does the reference.
        scaling = get(config, "rope_scaling", None) or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind != "default":
            print(f"note: rope_scaling type '{kind}' is ignored, as GraphGen "
                  "ignores it", file=sys.stderr)

        self.qkv_bias = self.out_bias = self.mlp_bias = self.qk_norm = False
        if family == "llama":
            self.qkv_bias = self.out_bias = get(config, "attention_bias",
                                                False)
            self.mlp_bias = get(config, "mlp_bias", False)
            self.windows = [None] * self.layers
        elif family == "mistral":
            # MistralAttention has no biases; the window is on every layer.
            self.windows = [get_nullable(config, "sliding_window", 4096)
                            ] * self.layers
        elif family == "qwen2":
            # Qwen2Attention: q/k/v biases always, never an o_proj bias.
            self.qkv_bias = True
            self.windows = self._qwen_windows(config)
        else:
            self.qkv_bias = self.out_bias = get(config, "attention_bias",
                                                False)
            self.qk_norm = True
            self.windows = self._qwen_windows(config)

        if self.heads % self.kv_heads:
            raise DumpError("num_key_value_heads does not divide "
                            "num_attention_heads")
        if head_dim is None:
            if self.hidden % self.heads:
                raise DumpError("num_attention_heads does not divide "
                                "hidden_size and no head_dim is given")
            head_dim = self.hidden // self.heads
        if head_dim % 2:
            raise DumpError(f"head dim {head_dim} must be even for rotary")
        self.head_dim = head_dim

    def _qwen_windows(self, config):
        """A window only with use_sliding_window, on the layers layer_types
        marks sliding, or else on the layers from max_window_layers on."""
        use = get(config, "use_sliding_window", False)
        window = get_nullable(config, "sliding_window", 4096)
        first = get(config, "max_window_layers", 28)
        types = get(config, "layer_types", None)
        if types is not None and len(types) != self.layers:
            raise DumpError("layer_types must have one entry per layer")
        windows = []
        for l in range(self.layers):
            sliding = (types[l] == "sliding_attention" if types is not None
                       else l >= first)
            windows.append(window if use and window is not None and sliding
                           else None)
        return windows

    def _read_gpt2(self, config):
        self.vocab = config["vocab_size"]
        self.hidden = config["n_embd"]
        self.layers = config["n_layer"]
        self.heads = self.kv_heads = config["n_head"]
        self.max_positions = config["n_positions"]
        self.intermediate = get(config, "n_inner", 4 * self.hidden)
        self.eps = get(config, "layer_norm_epsilon", 1e-5)
        self.tie = get(config, "tie_word_embeddings", True)
        self.scale_attn_weights = get(config, "scale_attn_weights", True)
        self.scale_by_layer = get(config, "scale_attn_by_inverse_layer_idx",
                                  False)
        act = get(config, "activation_function", "gelu_new")
        if act in ("gelu_new", "gelu_pytorch_tanh"):
            self.gelu = "tanh"
        elif act == "gelu":
            self.gelu = "none"
        else:
            raise DumpError(f"unsupported activation_function '{act}'")
        if self.hidden % self.heads:
            raise DumpError("n_head does not divide n_embd")
        self.head_dim = self.hidden // self.heads

    def parameter_shapes(self):
        """{name: shape} of every parameter, as named_parameters() names
        them (a tied lm_head is not listed)."""
        shapes = {}
        h, inter = self.hidden, self.intermediate

        def linear(module, n_in, n_out, bias):
            shapes[module + ".weight"] = (n_out, n_in)
            if bias:
                shapes[module + ".bias"] = (n_out,)

        if self.family == "gpt2":
            shapes["transformer.wte.weight"] = (self.vocab, h)
            shapes["transformer.wpe.weight"] = (self.max_positions, h)
            for l in range(self.layers):
                p = f"transformer.h.{l}."
                for module, n_in, n_out in (("attn.c_attn", h, 3 * h),
                                            ("attn.c_proj", h, h),
                                            ("mlp.c_fc", h, inter),
                                            ("mlp.c_proj", inter, h)):
                    # Conv1D: weight [in, out].
                    shapes[p + module + ".weight"] = (n_in, n_out)
                    shapes[p + module + ".bias"] = (n_out,)
                for norm in ("ln_1", "ln_2"):
                    shapes[p + norm + ".weight"] = (h,)
                    shapes[p + norm + ".bias"] = (h,)
            shapes["transformer.ln_f.weight"] = (h,)
            shapes["transformer.ln_f.bias"] = (h,)
        else:
            n, kv, d = self.heads, self.kv_heads, self.head_dim
            shapes["model.embed_tokens.weight"] = (self.vocab, h)
            for l in range(self.layers):
                p = f"model.layers.{l}."
                linear(p + "self_attn.q_proj", h, n * d, self.qkv_bias)
                linear(p + "self_attn.k_proj", h, kv * d, self.qkv_bias)
                linear(p + "self_attn.v_proj", h, kv * d, self.qkv_bias)
                linear(p + "self_attn.o_proj", n * d, h, self.out_bias)
                if self.qk_norm:
                    shapes[p + "self_attn.q_norm.weight"] = (d,)
                    shapes[p + "self_attn.k_norm.weight"] = (d,)
                linear(p + "mlp.gate_proj", h, inter, self.mlp_bias)
                linear(p + "mlp.up_proj", h, inter, self.mlp_bias)
                linear(p + "mlp.down_proj", inter, h, self.mlp_bias)
                shapes[p + "input_layernorm.weight"] = (h,)
                shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes["model.norm.weight"] = (h,)
        if not self.tie:
            shapes["lm_head.weight"] = (self.vocab, h)
        return shapes


#===------------------------------------------------------------------------===#
# Reference forward
#===------------------------------------------------------------------------===#


class Params:
    """Parameter lookup that records which names the forward used."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.used = set()

    def __getitem__(self, name):
        self.used.add(name)
        return self.tensors[name]


def rms_norm(x, weight, eps):
    # As in Hugging Face: the statistics in at least float32.
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rotary(x, positions, theta):
    """Rotate-half rotary embedding of x [B, S, N, D] (docs/graph-format)."""
    d = x.shape[-1]
    inv_freq = theta ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[..., None] * inv_freq  # [B, S, D/2]
    cos = angle.cos().to(x.dtype)[:, :, None, :]
    sin = angle.sin().to(x.dtype)[:, :, None, :]
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attention(q, k, v, scale, window):
    """Causal attention; q [B, S, Nq, D], k [B, S, Nkv, D], v [B, S, Nkv, Dv].
    Query head h reads KV head h // (Nq / Nkv); key j is visible to query i
    iff j <= i and, with a window W, i - j < W."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, N, S, D]
    seq = q.shape[2]
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    visible = j <= i
    if window is not None:
        visible &= (i - j) < window
    mask = torch.zeros(seq, seq, dtype=q.dtype).masked_fill(~visible,
                                                             float("-inf"))
    scores = q @ k.transpose(-1, -2) * scale + mask
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2)  # [B, S, Nq, Dv]


def forward_llama_like(spec, p, input_ids, position_ids):
    b, s = input_ids.shape
    n, kv, d = spec.heads, spec.kv_heads, spec.head_dim
    x = F.embedding(input_ids, p["model.embed_tokens.weight"])
    for l in range(spec.layers):
        pre = f"model.layers.{l}."
        attn = pre + "self_attn."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], spec.eps)

        def project(proj, norm, heads):
            y = F.linear(h, p[attn + proj + ".weight"],
                         p[attn + proj + ".bias"] if spec.qkv_bias else None)
            y = y.reshape(b, s, heads, d)
            if norm and spec.qk_norm:
                y = rms_norm(y, p[attn + norm + ".weight"], spec.eps)
            return y

        q = rotary(project("q_proj", "q_norm", n), position_ids, spec.theta)
        k = rotary(project("k_proj", "k_norm", kv), position_ids, spec.theta)
        v = project("v_proj", None, kv)
        a = attention(q, k, v, 1.0 / math.sqrt(d), spec.windows[l])
        a = F.linear(a.reshape(b, s, n * d), p[attn + "o_proj.weight"],
                     p[attn + "o_proj.bias"] if spec.out_bias else None)
        x = x + a

        mlp = pre + "mlp."
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], spec.eps)

        def proj(name, y):
            return F.linear(y, p[mlp + name + ".weight"],
                            p[mlp + name + ".bias"] if spec.mlp_bias else None)

        x = x + proj("down_proj", F.silu(proj("gate_proj", h)) *
                     proj("up_proj", h))
    x = rms_norm(x, p["model.norm.weight"], spec.eps)
    head = p["model.embed_tokens.weight" if spec.tie else "lm_head.weight"]
    return F.linear(x, head)


def forward_gpt2(spec, p, input_ids, position_ids):
    b, s = input_ids.shape
    n, d, h = spec.heads, spec.head_dim, spec.hidden
    if int(position_ids.max()) >= spec.max_positions:
        raise DumpError(f"position_ids reach {int(position_ids.max())}, "
                        f"beyond n_positions ({spec.max_positions})")

    def conv1d(module, y):  # transformers Conv1D: weight [in, out]
        return y @ p[module + ".weight"] + p[module + ".bias"]

    def layer_norm(module, y):
        return F.layer_norm(y, (h,), p[module + ".weight"],
                            p[module + ".bias"], spec.eps)

    x = (F.embedding(input_ids, p["transformer.wte.weight"]) +
         F.embedding(position_ids, p["transformer.wpe.weight"]))
    for l in range(spec.layers):
        pre = f"transformer.h.{l}."
        qkv = conv1d(pre + "attn.c_attn", layer_norm(pre + "ln_1", x))
        q, k, v = (t.reshape(b, s, n, d) for t in qkv.split(h, dim=2))
        scale = 1.0 / math.sqrt(d) if spec.scale_attn_weights else 1.0
        if spec.scale_by_layer:
            scale /= l + 1
        a = attention(q, k, v, scale, None).reshape(b, s, h)
        x = x + conv1d(pre + "attn.c_proj", a)
        m = conv1d(pre + "mlp.c_fc", layer_norm(pre + "ln_2", x))
        m = F.gelu(m, approximate=spec.gelu)
        x = x + conv1d(pre + "mlp.c_proj", m)
    x = layer_norm("transformer.ln_f", x)
    head = p["transformer.wte.weight" if spec.tie else "lm_head.weight"]
    return F.linear(x, head)


def forward(spec, params, input_ids, position_ids, labels):
    """Returns (logits, loss) in the parameters' dtype; `params` is a Params."""
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= spec.vocab:
        raise DumpError(f"input_ids outside [0, {spec.vocab})")
    run = forward_gpt2 if spec.family == "gpt2" else forward_llama_like
    logits = run(spec, params, input_ids, position_ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           labels.reshape(-1), ignore_index=-100,
                           reduction="mean")
    return logits, loss


#===------------------------------------------------------------------------===#
# Checking a dump
#===------------------------------------------------------------------------===#


def add_dump_arguments(parser):
    """Adds --dump (a program's --dump-dir), --rank (whose tensors: 0) and
    --rtol (1e-5) to `parser`."""
    parser.add_argument("--dump", required=True,
                        help="the program's --dump-dir")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--rtol", type=float, default=1e-5)


def rank_directory(args):
    """The folder of --rank's tensors in --dump."""
    return os.path.join(args.dump, f"rank{args.rank}")


def load_dump(spec, directory):
    """Returns (params, inputs, outputs) as {name: tensor}, after checking
    that the dump's parameters are exactly the ones the model has."""
    manifest = read_manifest(directory)
    expected = spec.parameter_shapes()
    problems = []
    for name in INPUTS + OUTPUTS:
        if name not in manifest:
            problems.append(f"the dump has no '{name}'")
    for name, shape in expected.items():
        if name not in manifest:
            problems.append(f"parameter '{name}' ({format_shape(shape)}) "
                            f"that {spec.architecture} needs is not in the "
                            "dump")
        elif manifest[name][1] != shape:
            problems.append(f"parameter '{name}' is "
                            f"{format_shape(manifest[name][1])} in the dump, "
                            f"the config gives {format_shape(shape)}")
        elif manifest[name][0] not in FLOAT_DTYPES:
            problems.append(f"parameter '{name}' has integer dtype "
                            f"{manifest[name][0]}")
    for name in manifest:
        if name not in expected and name not in INPUTS + OUTPUTS:
            hint = (" (tie_word_embeddings: the head is the embedding)"
                    if name == "lm_head.weight" and spec.tie else "")
            problems.append(f"tensor '{name}' in the dump is not consumed "
                            f"by the {spec.architecture} reference{hint}")
    if problems:
        raise DumpError("\n".join(problems))

    tensors = {name: load_tensor(directory, name, *manifest[name])
               for name in manifest}
    shape = tuple(manifest["input_ids"][1])
    for name in INPUTS:
        if manifest[name][0] not in INT_DTYPES or manifest[name][1] != shape:
            raise DumpError(f"'{name}' is {manifest[name][0]} "
                            f"{format_shape(manifest[name][1])}; expected an "
                            f"integer [B, S] like input_ids "
                            f"({format_shape(shape)})")
    if len(shape) != 2:
        raise DumpError(f"input_ids must be [B, S], got {format_shape(shape)}")
    if manifest["loss"][1] != ():
        raise DumpError("'loss' must be a scalar")
    if manifest["logits"][1] != shape + (spec.vocab,):
        raise DumpError(f"'logits' is {format_shape(manifest['logits'][1])}, "
                        f"expected {format_shape(shape + (spec.vocab,))}")
    params = {name: tensors[name] for name in expected}
    inputs = {name: tensors[name] for name in INPUTS}
    outputs = {name: tensors[name] for name in OUTPUTS}
    return params, inputs, outputs


def compare(spec, params, inputs, outputs, rtol):
    """Prints the errors; returns the FAIL lines."""
    p = Params({k: v.to(torch.float64) for k, v in params.items()})
    with torch.no_grad():
        logits, loss = forward(spec, p, inputs["input_ids"],
                               inputs["position_ids"], inputs["labels"])
    unused = sorted(set(params) - p.used)
    if unused:  # parameter_shapes() and the forward disagree
        raise DumpError("the reference did not use: " + ", ".join(unused))

    failures = []
    ours = outputs["logits"]
    scale = logits.abs().max().item()
    err = (ours - logits).abs().max().item() / scale
    print(f"logits max_rel_err {err:.3e}")
    if not err <= rtol:  # NaN fails too
        failures.append(f"FAIL logits max_rel_err {err:.3e} > rtol {rtol:g}")

    ours_loss, ref_loss = outputs["loss"].item(), loss.item()
    if math.isnan(ref_loss):  # every label is ignore_index
        err = 0.0 if math.isnan(ours_loss) else math.inf
    else:
        err = abs(ours_loss - ref_loss) / max(abs(ref_loss), 1e-30)
    print(f"loss {ours_loss:.9g} {ref_loss:.9g} rel_err {err:.3e}")
    if not err <= rtol:
        failures.append(f"FAIL loss rel_err {err:.3e} > rtol {rtol:g}")
    return failures


def main():
    parser = argparse.ArgumentParser(
        description="Compares a program's dumped logits and loss with a "
        "PyTorch float64 reference forward.")
    parser.add_argument("--config", required=True,
                        help="the Hugging Face config.json the graph came from")
    add_dump_arguments(parser)
    args = parser.parse_args()

    try:
        with open(args.config) as f:
            config = json.load(f)
        try:
            spec = ModelSpec(config)
        except KeyError as e:
            raise DumpError(f"'{args.config}' lacks field {e}") from None
        params, inputs, outputs = load_dump(spec, rank_directory(args))
        failures = compare(spec, params, inputs, outputs, args.rtol)
    except (DumpError, OSError, json.JSONDecodeError) as e:
        for line in str(e).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

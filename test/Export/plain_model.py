"""A small decoder-only transformer in plain PyTorch, not from Hugging
Face: its own module names (`tok_emb`, `blocks.N.attn.wq`, `ffn.w1`, ...),
torch's own `nn.RMSNorm` and `nn.LayerNorm`, a rotary embedding and
grouped-query attention through `scaled_dot_product_attention(enable_gqa)`.
`build(config)` makes it from a dict (Inputs/plain.json); with
`"norm_offset": true` its norms compute x̂·(1 + w), Gemma's convention,
which the exporter must refuse rather than raise to `rms_norm`."""

import torch
from torch import nn
import torch.nn.functional as F


class OffsetRMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * (1 + self.weight)


class Rotary(nn.Module):
    def __init__(self, dim, theta):
        super().__init__()
        self.register_buffer(
            "inv_freq", 1.0 / theta ** (torch.arange(0, dim, 2).float() / dim),
            persistent=False)

    @torch.no_grad()
    def forward(self, positions):
        angles = positions[:, :, None].float() * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + turned * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["heads"], c["kv_heads"]
        self.head_dim = c["hidden"] // c["heads"]
        self.wq = nn.Linear(c["hidden"], self.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(c["hidden"], self.kv_heads * self.head_dim,
                            bias=False)
        self.wv = nn.Linear(c["hidden"], self.kv_heads * self.head_dim,
                            bias=False)
        self.wo = nn.Linear(self.heads * self.head_dim, c["hidden"], bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           enable_gqa=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class SwiGLU(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.w3 = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.w2 = nn.Linear(c["ffn"], c["hidden"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def norm(c):
    if c.get("norm_offset"):
        return OffsetRMSNorm(c["hidden"], 1e-5)
    return nn.RMSNorm(c["hidden"], eps=1e-5)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm1 = norm(c)
        self.attn = Attention(c)
        self.norm2 = nn.LayerNorm(c["hidden"], eps=1e-5)
        self.ffn = SwiGLU(c)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.ffn(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok_emb = nn.Embedding(c["vocab"], c["hidden"])
        self.rotary = Rotary(c["hidden"] // c["heads"], c.get("theta", 1e4))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm_f = norm(c)
        self.head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, input_ids, position_ids):
        x = self.tok_emb(input_ids)
        cos, sin = self.rotary(position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm_f(x))


def build(config):
    return TinyTransformer(config)

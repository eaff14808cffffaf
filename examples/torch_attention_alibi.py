"""Causal attention with an ALiBi bias, written once as index expressions; texpr_ad derives its
gradient, and PyTorch trains through it.

    scores[b, h, i, j] = q[b, h, i, :] . k[b, h, j, :] / sqrt(D) - slope[h] * (i - j),  j <= i
    out[b, h, i, :]    = softmax_j(scores[b, h, i, :]) @ v[b, h, :, :]

Run it (`python examples/torch_attention_alibi.py`) to check the derived gradient against PyTorch
autograd of a reference implementation (`reference`) and with torch.autograd.gradcheck.
"""
from __future__ import annotations

import math

import torch

import texpr_ad.torch as tt
from texpr_ad import te


def alibi_attention(q: te.Tensor, k: te.Tensor, v: te.Tensor, slope: te.Tensor) -> te.Tensor:
    """q, k, v: (B, H, T, D); slope: (H,) per-head ALiBi slopes (no gradient wanted, but given)."""
    B, H, T, D = q.shape
    scale = 1.0 / math.sqrt(float(D.value))
    d = te.reduce_axis((0, D), name="d")
    s = te.compute((B, H, T, T), lambda b, h, i, j: te.sum(q[b, h, i, d] * k[b, h, j, d], axis=d)
                   * scale - slope[h] * (i - j).astype(q.dtype), name="scores")
    j1 = te.reduce_axis((0, T), name="j1")  # row max over the causal window, a constant shift
    mx = te.compute((B, H, T), lambda b, h, i: te.stop_gradient(
        te.max(s[b, h, i, j1], axis=j1, where=j1 <= i)), name="row_max")
    e = te.compute((B, H, T, T), lambda b, h, i, j: te.if_then_else(
        j <= i, te.exp(s[b, h, i, j] - mx[b, h, i]), 0.0), name="e")
    j2 = te.reduce_axis((0, T), name="j2")
    den = te.compute((B, H, T), lambda b, h, i: te.sum(e[b, h, i, j2], axis=j2, where=j2 <= i),
                     name="den")
    j3 = te.reduce_axis((0, T), name="j3")
    return te.compute((B, H, T, D), lambda b, h, i, c: te.sum(
        e[b, h, i, j3] * v[b, h, j3, c], axis=j3, where=j3 <= i) / den[b, h, i], name="out")


def alibi_slopes(n_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """The ALiBi paper's geometric slopes 2^(-8 h / H), h = 1..H."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n_heads) for h in range(n_heads)], dtype=dtype)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:
    """The same attention in plain PyTorch (autograd differentiates it)."""
    T = q.shape[2]
    i = torch.arange(T)
    bias = -slope.reshape(-1, 1, 1) * (i.reshape(-1, 1) - i.reshape(1, -1)).to(q.dtype)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    s = s.masked_fill(i.reshape(1, -1) > i.reshape(-1, 1), float("-inf"))
    return torch.softmax(s, -1) @ v


attention = tt.custom_op(alibi_attention, name="alibi_attention")


def main(B: int = 2, H: int = 3, T: int = 6, D: int = 4, seed: int = 0) -> dict[str, float]:
    """Max abs differences of output and gradients vs the reference (float64), and gradcheck."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, dtype=torch.float64, generator=g).requires_grad_()
               for _ in range(3))
    slope = alibi_slopes(H, torch.float64)
    out = attention(q, k, v, slope)
    ref = reference(q, k, v, slope)
    cot = torch.randn(out.shape, dtype=out.dtype, generator=g)
    ours = torch.autograd.grad(out, (q, k, v), cot)
    theirs = torch.autograd.grad(ref, (q, k, v), cot)
    res = {"forward": (out - ref).abs().max().item()}
    res.update({f"grad_{n}": (a - b).abs().max().item()
                for n, a, b in zip("qkv", ours, theirs, strict=True)})
    small = [x.detach()[:1, :2, :4, :3].clone().requires_grad_() for x in (q, k, v)]
    res["gradcheck"] = float(torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, slope[:2]), small))
    return res


if __name__ == "__main__":
    for name, val in main().items():
        print(f"{name:10s} {val:.3g}")

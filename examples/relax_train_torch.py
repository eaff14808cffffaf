"""Train plain PyTorch models in TVM Relax with `train_torch`, step by step against PyTorch.

A small GPT (token + position embeddings, one pre-LayerNorm block with causal self-attention
written by hand, GELU MLP, tied-free LM head) trained with Adam, the same GPT with
`F.scaled_dot_product_attention(is_causal=True)`, a ResNet-style CNN (conv-BatchNorm-ReLU stem,
one residual block, global average pool) trained with SGD+momentum, a U-Net-style model
(GroupNorm, SiLU, strided conv down, bilinear upsampling, skip concatenation) trained with Adam,
and a Mixer-style model (token MLP, cumsum/where/clamp branch, logsumexp pool) trained with
SGD+momentum.  Each starts from the same weights in PyTorch and in TVM; the script prints for
each the Relax op count, the ops whose gradient texpr_ad derived, both loss curves, the gradient
check and the step times, then a table of them.

    .venv/bin/python examples/relax_train_torch.py
"""
from __future__ import annotations

import copy
import math
import time
from statistics import median

import torch
import torch.nn.functional as F
from torch import nn

from texpr_ad.relax_bridge import train_torch


class Block(nn.Module):
    """Pre-LayerNorm transformer block.  qkv has no bias: a key bias has a zero gradient (it adds
    the same q.b to every score of a row), so Adam would move it by rounding noise, differently
    in any two implementations.  `sdpa=True` computes the attention with
    `F.scaled_dot_product_attention(is_causal=True)` instead of by hand."""

    def __init__(self, d: int, heads: int, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            y = att.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 11, d: int = 16, heads: int = 2, ctx: int = 8,
                 sdpa: bool = False) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.block, self.ln = Block(d, heads, sdpa), nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.block(x)))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


class ResNet(nn.Module):
    def __init__(self, c: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c),
                                  nn.ReLU())
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(y)))
        return self.fc(x.mean((2, 3)))


class UNet(nn.Module):
    """U-Net-style: GroupNorm + SiLU, a strided conv down, bilinear upsampling back, and the
    skip connection concatenated with `torch.cat`; per-pixel class logits."""

    def __init__(self, c: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.inc, self.gn1 = nn.Conv2d(3, c, 3, padding=1), nn.GroupNorm(2, c)
        self.down, self.gn2 = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.GroupNorm(2, 2 * c)
        self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.up, self.gn3 = nn.Conv2d(3 * c, c, 3, padding=1), nn.GroupNorm(2, c)
        self.out = nn.Conv2d(c, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.silu(self.gn1(self.inc(x)))
        d = F.silu(self.gn2(self.down(h)))
        d = d + F.silu(self.mid(d))
        u = F.interpolate(d, scale_factor=2, mode="bilinear", align_corners=False)
        return self.out(F.silu(self.gn3(self.up(torch.cat([u, h], dim=1)))))


class Mixer(nn.Module):
    """MLP-Mixer-style: a token-mixing MLP, a gated cumulative-mean branch (`cumsum`,
    `torch.where`, `clamp`), a channel MLP, and a `logsumexp` pool over tokens."""

    def __init__(self, t: int = 6, d: int = 8, classes: int = 3) -> None:
        super().__init__()
        self.embed, self.gate, self.head = nn.Linear(3, d), nn.Linear(d, d), nn.Linear(d, classes)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.tok = nn.Sequential(nn.Linear(t, 2 * t), nn.GELU(), nn.Linear(2 * t, t))
        self.ch = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        h = self.embed(x)
        y = self.ln1(h)
        h = h + self.tok(y.transpose(1, 2)).transpose(1, 2)
        mean = y.cumsum(dim=1) / torch.arange(1, t + 1, dtype=y.dtype).reshape(1, t, 1)
        g = self.gate(y)
        h = h + torch.where(g > 0, mean, g).clamp(-1.0, 1.0)
        h = h + self.ch(self.ln2(h))
        return self.head(torch.logsumexp(h, dim=1) - math.log(t))


def gpt_case(seed: int = 0, batch: int = 2, ctx: int = 8, sdpa: bool = False) -> tuple:
    """(model, optimizer factory, inputs, targets, loss) of the GPT (`sdpa`: attention by
    `F.scaled_dot_product_attention`; the same weights either way)."""
    torch.manual_seed(seed)
    model = GPT(ctx=ctx, sdpa=sdpa)
    idx = torch.randint(0, 11, (batch, ctx + 1))
    adam = lambda ps: torch.optim.Adam(ps, lr=1e-2)  # noqa: E731
    return model, adam, (idx[:, :-1],), (idx[:, 1:],), lm_loss


def resnet_case(seed: int = 0, batch: int = 4, size: int = 6) -> tuple:
    """(model, optimizer factory, inputs, targets, loss) of the ResNet-style CNN."""
    torch.manual_seed(seed)
    model = ResNet()
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 3, (batch,))
    return (model, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), (x,), (y,),
            F.cross_entropy)


def unet_case(seed: int = 0, batch: int = 2, size: int = 8) -> tuple:
    """(model, optimizer factory, inputs, targets, loss) of the U-Net (per-pixel classes)."""
    torch.manual_seed(seed)
    model = UNet()
    x, y = torch.randn(batch, 3, size, size), torch.randint(0, 3, (batch, size, size))
    return model, lambda ps: torch.optim.Adam(ps, lr=1e-2), (x,), (y,), F.cross_entropy


def mixer_case(seed: int = 0, batch: int = 4, tokens: int = 6) -> tuple:
    """(model, optimizer factory, inputs, targets, loss) of the Mixer."""
    torch.manual_seed(seed)
    model = Mixer(t=tokens)
    x, y = torch.randn(batch, tokens, 3), torch.randint(0, 3, (batch,))
    return (model, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), (x,), (y,),
            F.cross_entropy)


CASES = {"gpt": gpt_case, "gpt-sdpa": lambda: gpt_case(sdpa=True), "resnet": resnet_case,
         "unet": unet_case, "mixer": mixer_case}


def torch_curve(model: nn.Module, make_opt, inputs, targets, loss_fn, steps: int):
    """PyTorch eager from a copy of `model`: (losses, median seconds per step after the first,
    the trained model)."""
    model = copy.deepcopy(model)
    opt = make_opt(model.parameters())
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(*inputs), *targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, median(times[1:] or times), model


def tvm_curve(model: nn.Module, make_opt, inputs, targets, loss_fn, steps: int):
    """TVM Relax: (losses, median seconds per step after the first, the trainer)."""
    trainer = train_torch(model, inputs, loss_fn, make_opt(model.parameters()),
                          example_targets=targets)
    losses, times = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        losses.append(trainer.step(inputs, targets))
        times.append(time.perf_counter() - t0)
    return losses, median(times[1:] or times), trainer


def main(steps: int = 10) -> None:
    # tiny shapes: one thread is PyTorch eager's fastest (two threads on a busy 2-core machine
    # were 10-25x slower); the TVM step is timed as it comes
    torch.set_num_threads(1)
    rows = []
    for name, case in CASES.items():
        model, make_opt, inputs, targets, loss_fn = case()
        want, t_torch, _ = torch_curve(model, make_opt, inputs, targets, loss_fn, steps)
        got, t_tvm, trainer = tvm_curve(model, make_opt, inputs, targets, loss_fn, steps)
        err = max(trainer.gradient_errors.values())
        print(f"{name}: {sum(trainer.ops.values())} Relax ops ({len(trainer.ops)} kinds); derived "
              f"gradients: {trainer.derived_ops}; no-grad: {trainer.no_grad_ops}")
        print(f"  worst gradient error vs torch.autograd: {err:.1e}")
        print("  loss torch:", " ".join(f"{v:.6f}" for v in want[:5]))
        print("  loss tvm:  ", " ".join(f"{v:.6f}" for v in got[:5]))
        print(f"  step (median): tvm {t_tvm * 1e3:.2f} ms, torch eager {t_torch * 1e3:.2f} ms "
              f"(compile {trainer.compile_seconds:.0f} s)")
        rows.append((name, sum(trainer.ops.values()), trainer.derived_ops, err, t_tvm, t_torch))
    print(f"\n{'model':9} {'ops':>4}  {'grad err':>8}  {'tvm ms':>7}  {'eager ms':>8}  "
          "derived gradients")
    for name, n, derived, err, t_tvm, t_torch in rows:
        short = ", ".join(d.removeprefix("relax.") for d in derived)
        print(f"{name:9} {n:4d}  {err:8.1e}  {t_tvm * 1e3:7.2f}  {t_torch * 1e3:8.2f}  {short}")

if __name__ == "__main__":
    main()

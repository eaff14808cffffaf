"""Train two plain PyTorch models in TVM Relax with `train_torch`, step by step against PyTorch.

A small GPT (token + position embeddings, one pre-LayerNorm block with causal self-attention
written by hand, GELU MLP, tied-free LM head) trained with Adam, and a ResNet-style CNN
(conv-BatchNorm-ReLU stem, one residual block, global average pool) trained with SGD+momentum.
Both start from the same weights in PyTorch and in TVM; the script prints both loss curves, the
gradient check, and the step times.

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
    in any two implementations."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 11, d: int = 16, heads: int = 2, ctx: int = 8) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.block, self.ln, self.head = Block(d, heads), nn.LayerNorm(d), nn.Linear(d, vocab)

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


def gpt_case(seed: int = 0, batch: int = 2, ctx: int = 8) -> tuple:
    """(model, optimizer factory, inputs, targets, loss) of the GPT."""
    torch.manual_seed(seed)
    model = GPT(ctx=ctx)
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
    for name, case in (("gpt", gpt_case), ("resnet", resnet_case)):
        model, make_opt, inputs, targets, loss_fn = case()
        want, t_torch, _ = torch_curve(model, make_opt, inputs, targets, loss_fn, steps)
        got, t_tvm, trainer = tvm_curve(model, make_opt, inputs, targets, loss_fn, steps)
        print(f"{name}: {sum(trainer.ops.values())} Relax ops ({len(trainer.ops)} kinds); derived "
              f"gradients: {trainer.derived_ops}; no-grad: {trainer.no_grad_ops}")
        print(f"  worst gradient error vs torch.autograd: "
              f"{max(trainer.gradient_errors.values()):.1e}")
        print("  loss torch:", " ".join(f"{v:.6f}" for v in want[:5]))
        print("  loss tvm:  ", " ".join(f"{v:.6f}" for v in got[:5]))
        print(f"  step (median): tvm {t_tvm * 1e3:.2f} ms, torch eager {t_torch * 1e3:.2f} ms "
              f"(compile {trainer.compile_seconds:.0f} s)")


if __name__ == "__main__":
    main()

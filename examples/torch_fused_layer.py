"""A fused custom layer, gelu(x @ W^T + b), defined once as an index expression and trained in
PyTorch: texpr_ad derives the backward and compiles forward and backward to Numba kernels.

Run it (`python examples/torch_fused_layer.py`) to train a two-layer regression net built on it
for a few Adam steps, and to check the layer against PyTorch autograd of F.gelu(F.linear(...)).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import texpr_ad.torch as tt
from texpr_ad import te


def linear_bias_gelu(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
    """y[n, o] = gelu(sum_i x[n, i] * w[o, i] + b[o]), gelu(z) = z * (1 + erf(z / sqrt 2)) / 2."""
    k = te.reduce_axis((0, x.shape[1]), name="k")
    z = te.compute((x.shape[0], w.shape[0]),
                   lambda n, o: te.sum(x[n, k] * w[o, k], axis=k) + b[o], name="z")
    return te.compute(z.shape, lambda n, o: 0.5 * z[n, o] * (1.0 + te.erf(z[n, o] * 0.7071067811865476)),
                      name="y")


fused = tt.custom_op(linear_bias_gelu, name="linear_bias_gelu")


class FusedGELULinear(torch.nn.Module):
    """nn.Linear followed by GELU, as one texpr_ad operator."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        lin = torch.nn.Linear(n_in, n_out)  # its initialization
        self.weight, self.bias = lin.weight, lin.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused(x, self.weight, self.bias)


def main(steps: int = 30, seed: int = 0) -> dict[str, float]:
    """Train y = sin(x . u) with FusedGELULinear -> Linear; the first and last losses, and the
    max abs gradient difference of the layer against PyTorch autograd (float64)."""
    torch.manual_seed(seed)
    x = torch.randn(64, 16)
    target = torch.sin(x @ torch.randn(16, 1))
    net = torch.nn.Sequential(FusedGELULinear(16, 32), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())

    args = [torch.randn(5, 7, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64),
            torch.randn(3, dtype=torch.float64)]
    ours = [a.clone().requires_grad_() for a in args]
    theirs = [a.clone().requires_grad_() for a in args]
    fused(*ours).pow(2).sum().backward()
    F.gelu(F.linear(*theirs)).pow(2).sum().backward()
    err = max((a.grad - b.grad).abs().max().item() for a, b in zip(ours, theirs, strict=True))
    ok = torch.autograd.gradcheck(fused, [a.clone().requires_grad_() for a in args])
    return {"first_loss": losses[0], "last_loss": losses[-1], "grad_vs_torch": err,
            "gradcheck": float(ok)}


if __name__ == "__main__":
    for name, val in main().items():
        print(f"{name:14s} {val:.4g}")

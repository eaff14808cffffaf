"""A model with a texpr_ad op, trained by tests/frontends/test_ddp.py in spawned processes.

The op is defined at module level: a process started with `spawn` imports this module, which
registers `texpr_ad::ddp_rms_scale` in that process.
"""
from __future__ import annotations

import os

import torch

import texpr_ad.torch as tt
from texpr_ad import te


def rms_scale(x, g):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / d.astype("float64"),
                    name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


rms = tt.custom_op(rms_scale, name="ddp_rms_scale")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8).double()
        self.g = torch.nn.Parameter(torch.ones(8, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms(self.lin(x), self.g).sum(-1)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(16, 8, generator=gen, dtype=torch.float64),
            torch.randn(16, generator=gen, dtype=torch.float64))


def train(net: torch.nn.Module, x: torch.Tensor, t: torch.Tensor, steps: int = 3) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        ((net(x) - t) ** 2).mean().backward()
        opt.step()


def ddp_worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank: its half of the batch, gradients all-reduced (averaged) by DDP over gloo."""
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        net = torch.nn.parallel.DistributedDataParallel(Net())
        x, t = data()
        rows = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        train(net, x[rows], t[rows])
        torch.save({k: v.detach() for k, v in net.module.state_dict().items()},
                   f"{out}.{rank}")
    finally:
        dist.destroy_process_group()

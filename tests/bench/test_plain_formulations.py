"""Every plain formulation (bench/plain.py) computes the registry workload's forward and
gradients, checked against PyTorch at the quick sizes through the bench's vjp pair."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import plain  # noqa: E402
from bench.vjp import vjp  # noqa: E402
from bench.workloads import WORKLOADS  # noqa: E402
from texpr_ad.testing import rel_error  # noqa: E402

TOL = 1e-4


def _torch_ref(w, g: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.from_numpy(a.copy()) for a in w.arrays]
    diff = [ts[k].requires_grad_(True) for k in w.float_inputs]
    y = w.torch_fn(*ts)
    grads = torch.autograd.grad(y, diff, torch.from_numpy(g).reshape(y.shape))
    return y.detach().numpy(), [x.numpy() for x in grads]


def test_every_workload_has_a_plain_formulation():
    assert set(plain.PLAIN) == set(WORKLOADS)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_plain_matches_torch(name: str):
    w = plain.make(name + plain.SUFFIX, quick=True)
    assert w.name == name + ":plain"
    shape = tuple(int(s.value) for s in w.output.shape)
    g = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    y_ref, g_ref = _torch_ref(w, g)
    fwd, bwd = vjp([w.output], list(w.inputs))
    (y,), res = fwd(*w.arrays)
    assert y.shape == y_ref.shape
    assert rel_error(y, y_ref) < TOL, f"{name}: forward differs from torch"
    grads = bwd(res, g)
    assert len(grads) == len(w.inputs)
    for k, want in zip(w.float_inputs, g_ref, strict=True):
        assert grads[k].shape == want.shape
        assert rel_error(grads[k], want) < TOL, f"{name}: gradient of input {k} differs"
    assert all(grads[k] is None for k in range(len(w.inputs)) if k not in w.float_inputs)

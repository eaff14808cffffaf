"""A scatter's large output is passed in as `np.zeros` by the caller (`Zeroing.FRESH`,
schedule/cpu_scatter.zeroing): the plan decides and prints it, the source neither allocates nor fills
the target, and the values match NumPy, including rows no index reaches and on every call (a
reused array would keep the previous sums).  Smaller or intermediate targets keep their
in-kernel zeroing.  No timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.schedule.plan import Zeroing


def _embedding_grad(rows: int, dim: int = 256, n: int = 512):
    table = te.placeholder((rows, dim), "float32", name="table")
    ids = te.placeholder((n,), "int64", name="ids")
    y = te.compute((n, dim), lambda i, j: table[ids[i], j], name="emb")
    h = te.placeholder(y.shape, "float32", name="head")
    (dt,) = ta.grad(y, [table], head=h)
    return ta.build([dt], [table, ids, h]), (rows, dim, n)


def _check(k, rows: int, dim: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, rows // 2, n).astype(np.int64)  # the upper half is never written
    head = rng.standard_normal((n, dim)).astype(np.float32)
    want = np.zeros((rows, dim), np.float64)
    np.add.at(want, ids, head)
    (got,) = k(np.zeros((rows, dim), np.float32), ids, head)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_large_scatter_output_is_zeroed_by_the_caller():
    k, shape = _embedding_grad(32768)  # 32 MiB of float32: the threshold
    st = k.plan.stage(k.plan.outputs[0].name)
    assert st.cpu.zero is Zeroing.FRESH, str(k.plan)
    assert k.plan.zeroed == (st.tensor,)
    assert "zeroed: np.zeros by the caller (32 MiB or more: fresh pages" in str(k.plan)
    name = st.tensor.name
    assert f"{name} = np.empty" not in k.source and f"{name} = np.zeros" not in k.source
    assert "_z in prange" not in k.source and ".fill(0)" not in k.source, k.source
    head = next(ln for ln in k.source.splitlines() if ln.startswith("def texpr_kernel("))
    assert head.endswith(f", {name}):"), head  # the last argument
    for seed in (0, 1):  # a new zeroed array per call: the second call's sums start from 0
        _check(k, *shape, seed)


def test_the_torch_op_passes_a_zeroed_target_too():
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt

    def emb(table, ids):
        return te.compute((ids.shape[0], table.shape[1]), lambda i, j: table[ids[i], j],
                          name="emb")
    op = tt.custom_op(emb, name="fresh_zeroing_emb")
    rng = np.random.default_rng(2)
    table = torch.zeros((32768, 256), dtype=torch.float32, requires_grad=True)
    ids = torch.from_numpy(rng.integers(0, 1000, 512).astype(np.int64))
    for seed in (3, 4):
        g = torch.from_numpy(rng.standard_normal((512, 256)).astype(np.float32))
        (got,) = torch.autograd.grad(op(table, ids), table, g)
        (want,) = torch.autograd.grad(torch.nn.functional.embedding(ids, table), table, g)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows", [32767, 1024])
def test_smaller_targets_keep_the_in_kernel_zeroing(rows):
    k, shape = _embedding_grad(rows)
    st = k.plan.stage(k.plan.outputs[0].name)
    assert st.cpu.zero is not Zeroing.FRESH and not k.plan.zeroed, str(k.plan)
    _check(k, *shape, 5)

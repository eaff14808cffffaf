"""Scatter blocking (schedule/cpu_scatter.scatter_block) and the index dims computed once before the
block loop (the plan's `block_indices`: an Indices node of its loop tree, schedule/stageloops.py).  Decisions on the plan and the source;
results against float64 NumPy; a bad index still raises.  No timing."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels.kernel import KernelIndexError


def _segment_grad(d: int):
    """The gradient of a segment sum over sorted offsets: a scatter over (s, r, k) into
    dx[r, k], parallel over k (the target's last dim, the only injective axis)."""
    x = te.placeholder((300, d), "float32", name="x")
    off = te.placeholder((11,), "int64", name="offsets")

    def body(s, k):
        r = te.reduce_axis((off[s], off[s + 1]), "r")
        return te.sum(x[r, k], axis=r)
    y = te.compute((10, d), body, name="seg")
    h = te.placeholder((10, d), "float32", name="head")
    (dx,) = ta.grad(y, [x], head=h)
    return ta.build([dx], [x, off, h])


@pytest.mark.parametrize("d, block", [(64, 16), (256, 64)])
def test_a_scatter_over_columns_runs_blocks_of_them_innermost(d, block):
    k = _segment_grad(d)
    assert f"blocks of {block} k values per prange iteration, k innermost" in str(k.plan), str(k.plan)
    assert [str(e) for e in k.plan.stage("dx").cpu.block_indices] == ["r"], str(k.plan)
    assert "hoisted: r (loop-invariant: computed once before the block loops" in str(k.plan)
    lines = k.source.splitlines()
    at = next(n for n, ln in enumerate(lines) if "for k in range(" in ln)
    assert "= _chk(r, " in lines[at - 1], k.source  # the row index checked once per row
    r = np.random.default_rng(3)
    xs, hs = r.standard_normal((300, d)).astype("f4"), r.standard_normal((10, d)).astype("f4")
    off = np.concatenate([[0], np.sort(r.integers(0, 300, 9)), [300]]).astype(np.int64)
    (got,) = k(xs, off, hs)
    want = np.zeros((300, d))
    for s in range(10):
        want[off[s]:off[s + 1]] += hs[s]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    bad = off.copy()
    bad[5] = 400  # a row past x: the hoisted check still raises, naming the scatter
    with pytest.raises(KernelIndexError, match="scatter index is out of bounds"):
        k(xs, bad, hs)


def test_the_renderer_hoists_only_what_the_plan_says():
    """A plan changed by hand to hoist nothing computes the row index inside the block loop:
    same values (the renderer follows the plan's `block_indices`, it does not decide)."""
    from dataclasses import replace

    from texpr_ad.kernels.cpu_kernel import CpuKernel
    from texpr_ad.schedule.plan import with_cpu
    k = _segment_grad(64)
    st = k.plan.stage("dx")
    plain = CpuKernel(replace(k.plan, stages=tuple(with_cpu(s, block_indices=()) if s is st else s
                                                   for s in k.plan.stages)))
    lines = plain.source.splitlines()
    at = next(n for n, ln in enumerate(lines) if "for k in range(" in ln)
    assert "_chk(r, " not in lines[at - 1] and "_chk(r, " in "".join(lines[at:]), plain.source
    r = np.random.default_rng(4)
    xs, hs = r.standard_normal((300, 64)).astype("f4"), r.standard_normal((10, 64)).astype("f4")
    off = np.concatenate([[0], np.sort(r.integers(0, 300, 9)), [300]]).astype(np.int64)
    np.testing.assert_array_equal(plain(xs, off, hs)[0], k(xs, off, hs)[0])


def _bag_grad(v: int, d: int):
    """The gradient of a mean over bags of gathered rows (embedding_bag): a scatter-add into
    dw[idx[n, r], k], rows in the order the indices list them."""
    w = te.placeholder((v, d), "float32", name="w")
    idx = te.placeholder((40, 4), "int64", name="idx")
    r = te.reduce_axis((0, 4), "r")
    y = te.compute((40, d), lambda n, k: te.sum(w[idx[n, r], k], axis=r) / 4.0, name="bag")
    h = te.placeholder((40, d), "float32", name="head")
    (dw,) = ta.grad(y, [w], head=h)
    return ta.build([dw], [idx, h])


@pytest.mark.parametrize("d, block", [(128, 128), (512, 256), (16, 16)])
def test_a_scatter_into_gathered_rows_walks_the_indices_once_per_row_of_up_to_256(d, block):
    """Each block walks every index again and misses on each gathered row again: rows of up to
    SCATTER_GATHER_BLOCK values run in one block (before: blocks of 64 of a 128-wide table)."""
    k = _bag_grad(50, d)
    assert f"blocks of {block} k values per prange iteration" in str(k.plan), str(k.plan)
    assert "a gathered row" in str(k.plan), str(k.plan)
    r = np.random.default_rng(5)
    idx, hs = r.integers(0, 50, (40, 4)), r.standard_normal((40, d)).astype("f4")
    (got,) = k(idx, hs)
    want = np.zeros((50, d))
    for n in range(40):
        for j in range(4):
            want[idx[n, j]] += hs[n].astype(np.float64) / 4.0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)

"""How a row-accumulated reduction folds its rows is the plan's decision (schedule/cpu.row_folds:
`Accumulate.unroll`, `Accumulate.row_block`); the renderer only spells it out.  The plan says it,
the source follows it, and a plan changed by hand renders the change with the same values (the
same terms in the same order).  Float64 NumPy references; no timing."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels.cpu_kernel import CpuKernel
from texpr_ad.schedule.plan import with_cpu


def _column_sum(rows: int, where: bool = False):
    """y[j] = sum_{i, k} x[i, k, j]: too few outputs to parallelize over, so i splits into
    chunks and each chunk folds whole rows along j (k-i-j order)."""
    x = te.placeholder((rows, 48, 96), "float32", name="x")
    i, k = te.reduce_axis((0, rows), "i"), te.reduce_axis((0, 48), "k")
    cond = {"where": (i * k) % 3 != 0} if where else {}  # (not affine: stays a condition)
    y = te.compute((96,), lambda j: te.sum(x[i, k, j], axis=[i, k], **cond), name="y")
    return ta.build([y], [x])


def _with(kern, **acc):
    """The kernel of `kern`'s plan with stage y's accumulation changed by hand."""
    st = kern.plan.stage("y")
    new = with_cpu(st, accumulate=replace(st.cpu.accumulate, **acc))
    return CpuKernel(replace(kern.plan, stages=tuple(new if s is st else s for s in kern.plan.stages)))


def _x(rows: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, 48, 96)).astype(np.float32)


def test_the_plan_unrolls_the_row_fold_and_the_source_follows():
    k = _column_sum(64)
    acc = k.plan.stage("y").cpu.accumulate
    assert acc.row is not None and acc.split is not None and acc.unroll == 4, str(k.plan)
    assert "unrolled by 4" in str(k.plan) and "for k_g in range(" in k.source, k.source
    rolled = _with(k, unroll=1)
    assert "unrolled" not in str(rolled.plan) and "k_g" not in rolled.source, rolled.source
    x = _x(64)
    (a,), (b,) = k(x), rolled(x)
    np.testing.assert_array_equal(a, b)  # same terms, same order
    np.testing.assert_allclose(a, x.astype(np.float64).sum((0, 1)), rtol=1e-4, atol=1e-4)


def test_a_condition_keeps_the_row_fold_rolled():
    k = _column_sum(64, where=True)
    assert k.plan.stage("y").cpu.accumulate.unroll == 1, str(k.plan)
    assert "k_g" not in k.source, k.source
    x = _x(64)
    i, kk = np.meshgrid(np.arange(64), np.arange(48), indexing="ij")
    ref = np.where(((i * kk) % 3 != 0)[..., None], x.astype(np.float64), 0.0).sum((0, 1))
    np.testing.assert_allclose(k(x)[0], ref, rtol=1e-4, atol=1e-4)


def test_a_wide_row_adds_float32_row_blocks_where_the_plan_says():
    k = _column_sum(128)  # 6144 terms per output: a wide sum, its row float64
    acc = k.plan.stage("y").cpu.accumulate
    assert acc.row_block == 1 and acc.unroll == 4, str(k.plan)  # 64 // 48 rows of i per block
    assert "a float32 row per 1 terms" in str(k.plan) and "y_blk" in k.source, k.source
    plain = _with(k, row_block=0)
    assert "y_blk" not in plain.source, plain.source
    x = _x(128)
    ref, scale = x.astype(np.float64).sum((0, 1)), np.abs(x).sum((0, 1))
    for kern in (k, plain):  # float32 rounding of float64, not one float32 chain's 6144 terms
        assert (np.abs(kern(x)[0] - ref) <= 1e-7 * scale + 1e-7 * np.abs(ref)).all()


def _gather_sum(bags: int = 64, length: int = 6):
    """An embedding bag: y[n, k] = sum_r w[ids[n, r], k], rows of w accumulated along k."""
    w = te.placeholder((50, 128), "float32", name="w")
    ids = te.placeholder((bags, length), "int64", name="ids")
    r = te.reduce_axis((0, length), "r")
    y = te.compute((bags, 128), lambda n, k: te.sum(w[ids[n, r], k], axis=r), name="y")
    return ta.build([y], [w, ids])


def test_indices_read_from_data_are_computed_and_checked_once_per_row():
    """The row loop over k does not change `ids[n, r]`: the plan says so (`Accumulate.indices`),
    and the source computes and checks it before the row loop, so the loop holds no check (a
    call that stores) and vectorizes.  Values match NumPy; a bad index still raises, naming the
    read."""
    from texpr_ad.kernels.kernel import KernelIndexError
    kern = _gather_sum()
    acc = kern.plan.stage("y").cpu.accumulate
    assert acc.row is not None and [str(e) for e in acc.indices] == ["ids[n, r]"], str(kern.plan)
    assert "indices read from data (ids[n, r]) computed and checked once per row" in str(kern.plan)
    lines = kern.source.splitlines()
    for at, ln in enumerate(lines):
        if ln.strip().startswith("for k in range(") and "w[" in lines[at + 2]:
            assert "_chk(" not in "\n".join(lines[at:at + 8]), kern.source
            assert "_chk(ids[n, " in lines[at - 1], kern.source
    rng = np.random.default_rng(4)
    ws = rng.standard_normal((50, 128)).astype(np.float32)
    ids = rng.integers(0, 50, (64, 6)).astype(np.int64)
    (got,) = kern(ws, ids)
    np.testing.assert_allclose(got, ws.astype(np.float64)[ids].sum(1), rtol=1e-5, atol=1e-5)
    ids[3, 5] = 50
    try:
        kern(ws, ids)
    except KernelIndexError as e:
        assert "w[ids[n, r], k]" in str(e) or "ids[n, " in str(e), str(e)
    else:
        raise AssertionError("an index past w was not refused")


def test_a_data_index_under_a_guard_stays_under_it():
    """`-1` marks an empty slot (a padded bag): read only where a select or the reduction's
    where= allows it, so its index is not computed before the row loop, and no call raises."""
    w = te.placeholder((50, 128), "float32", name="w")
    ids = te.placeholder((64, 6), "int64", name="ids")
    r, q = te.reduce_axis((0, 6), "r"), te.reduce_axis((0, 6), "q")
    by_select = te.compute((64, 128), lambda n, k: te.sum(te.if_then_else(
        ids[n, r] >= 0, w[ids[n, r], k], 0.0), axis=r), name="y")
    by_where = te.compute((64, 128), lambda n, k: te.sum(w[ids[n, q], k], axis=q,
                                                          where=ids[n, q] >= 0), name="y")
    rng = np.random.default_rng(6)
    ws = rng.standard_normal((50, 128)).astype(np.float32)
    iv = rng.integers(-1, 50, (64, 6)).astype(np.int64)
    want = np.where((iv >= 0)[..., None], ws.astype(np.float64)[np.maximum(iv, 0)], 0).sum(1)
    for y in (by_select, by_where):
        kern = ta.build([y], [w, ids])
        assert kern.plan.stage("y").cpu.accumulate.indices == (), str(kern.plan)
        np.testing.assert_allclose(kern(ws, iv)[0], want, rtol=1e-5, atol=1e-5)

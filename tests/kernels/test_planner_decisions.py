"""CPU planner decisions (no timing): BLAS dispatch, row accumulation, split partial sums,
race-free scatters; each decision is checked on the plan and, on small shapes, its kernel is
checked against an independent NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.ops import nn, shape
from texpr_ad.schedule import ScheduleError, plan_kernel
from texpr_ad.schedule.plan import ComputeStage, ScatterStage
from texpr_ad.schedule.cpu_contract import _copied

SEED = 1234


def rng():
    print(f"seed {SEED}")
    return np.random.default_rng(SEED)


def _dense(n=32, k=64, m=48):
    x = te.placeholder((n, k), "float32", name="x")
    w = te.placeholder((m, k), "float32", name="w")
    b = te.placeholder((m,), "float32", name="bias")
    y = nn.dense(x, w, b)
    head = te.placeholder(y.shape, "float32", name="head")
    return x, w, b, y, head


def test_dense_forward_is_dispatched_to_blas():
    x, w, b, y, _ = _dense()
    plan = plan_kernel([y], [x, w, b])
    st = plan.stage("T_dense")
    assert isinstance(st, ComputeStage) and st.cpu.contraction is not None
    assert st.cpu.contraction.a is x and st.cpu.contraction.b is w
    assert "contraction -> BLAS" in str(plan)
    assert plan.stage("T_add").cpu.contraction is None  # the bias add stays a loop


def test_dense_adjoints_are_contractions_and_bias_gradient_is_split():
    x, w, b, y, head = _dense(n=1024)
    dx, dw, db = ta.grad(y, [x, w, b], head=head)
    plan = plan_kernel([dx, dw, db], [x, w, b, head])
    assert plan.stage(dx.op.name).cpu.contraction is not None
    assert plan.stage(dw.op.name).cpu.contraction is not None
    dbias = plan.stage(db.op.name)
    assert dbias.cpu.contraction is None and dbias.cpu.accumulate is not None
    assert dbias.cpu.accumulate.split is not None and dbias.cpu.accumulate.chunks >= 2  # partial sums
    assert dbias.cpu.accumulate.row is dbias.axes[-1]  # whole rows, contiguous reads
    assert "parallel partial results" in str(plan)
    r = rng()
    xs, ws, bs, hs = (r.standard_normal(s).astype("float32")
                      for s in ((1024, 64), (48, 64), (48,), (1024, 48)))
    gx, gw, gb = ta.build([dx, dw, db], [x, w, b, head])(xs, ws, bs, hs)
    np.testing.assert_allclose(gx, hs.astype(np.float64) @ ws, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, hs.T.astype(np.float64) @ xs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb, hs.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4)


def test_blas_override_off_keeps_loops_and_bad_override_is_an_error():
    x, w, b, y, _ = _dense()
    plan = plan_kernel([y], [x, w, b], overrides={"T_dense": {"blas": False}})
    assert plan.stage("T_dense").cpu.contraction is None and plan.stage("T_dense").parallel
    with pytest.raises(ScheduleError, match="not a contraction"):
        plan_kernel([y], [x, w, b], overrides={"T_add": {"blas": True}})


def test_small_contractions_stay_in_loops_symbolic_ones_go_to_blas():
    """A symbolic product may be large at the call (loops would be ~100x slower there); a small
    static one stays in loops (a BLAS call would cost more than it computes)."""
    n = te.var("n")
    a = te.placeholder((n, 64), "float32", name="a")
    c = te.placeholder((64, 64), "float32", name="c")
    assert plan_kernel([nn.matmul(a, c)], [a, c]).stages[0].cpu.contraction is not None
    a2 = te.placeholder((4, 4), "float32", name="a2")
    assert plan_kernel([nn.matmul(a2, a2)], [a2]).stages[0].cpu.contraction is None


def test_transposed_batch_matmul_and_output_permutation_match_numpy():
    x = te.placeholder((3, 16, 24), "float32", name="x")
    y = te.placeholder((3, 20, 16), "float32", name="y")
    k = te.reduce_axis((0, 16), name="k")
    # out[j, b, i] = sum_k x[b, k, i] * y[b, j, k]: transposed operands, permuted output
    out = te.compute((20, 3, 24), lambda j, b, i: te.sum(x[b, k, i] * y[b, j, k], axis=k),
                     name="out")
    plan = plan_kernel([out], [x, y])
    c = plan.stages[0].cpu.contraction
    assert c is not None and c.out_perm is not None
    r = rng()
    xs, ys = r.standard_normal((3, 16, 24)).astype("float32"), r.standard_normal((3, 20, 16)).astype("float32")
    (got,) = ta.build([out], [x, y])(xs, ys)
    want = np.einsum("bki,bjk->jbi", xs.astype(np.float64), ys.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_embedding_scatter_is_race_free():
    table = te.placeholder((100, 16), "float32", name="table")
    idx = te.placeholder((64,), "int64", name="indices")
    y = shape.take(table, idx, 0)
    head = te.placeholder(y.shape, "float32", name="head")
    (dt,) = ta.grad(y, [table], head=head)
    plan = plan_kernel([dt], [table, idx, head])
    (sc,) = [s for s in plan.stages if isinstance(s, ScatterStage)]
    # parallel only over an axis that one target index dim equals exactly (injective)
    if sc.parallel_axis is not None:
        assert all(u.index[sc.parallel_dim] is sc.parallel_axis for u in sc.updates)
    r = rng()
    ts, hs = r.standard_normal((100, 16)).astype("float32"), r.standard_normal((64, 16)).astype("float32")
    ids = r.integers(0, 10, 64)  # many repeats: a race would lose updates
    (got,) = ta.build([dt], [table, idx, head])(ts, ids, hs)
    want = np.zeros((100, 16))
    np.add.at(want, ids, hs.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_full_reduction_to_a_scalar_is_split_and_column_sums_accumulate_rows():
    x = te.placeholder((256, 128), "float32", name="x")
    i, j = te.reduce_axis((0, 256), name="i"), te.reduce_axis((0, 128), name="j")
    total = te.compute((), lambda: te.sum(te.tanh(x[i, j]), axis=[i, j]), name="total")
    st = plan_kernel([total], [x]).stages[0]
    assert st.cpu.accumulate is not None and st.cpu.accumulate.split is not None and st.cpu.accumulate.row is None
    i2 = te.reduce_axis((0, 256), name="i2")
    cols = te.compute((8, 128), lambda a, c: te.max(x[i2, c] * (a + 1), axis=i2), name="cols")
    st2 = plan_kernel([cols], [x]).stages[0]
    assert st2.cpu.accumulate is not None and st2.cpu.accumulate.row is st2.axes[-1]
    r = rng()
    xs = r.standard_normal((256, 128)).astype("float32")
    got_t, got_c = ta.build([total, cols], [x])(xs)
    np.testing.assert_allclose(got_t, np.tanh(xs.astype(np.float64)).sum(), rtol=1e-4)
    want = np.stack([(xs * (a + 1)).max(0) for a in range(8)])
    np.testing.assert_allclose(got_c, want, rtol=1e-6)


def test_layer_norm_gamma_gradient_plan_and_values():
    x = te.placeholder((2048, 32), "float32", name="x")
    g = te.placeholder((32,), "float32", name="g")
    b = te.placeholder((32,), "float32", name="b")
    y = ew.layer_norm(x, g, b)
    head = te.placeholder(y.shape, "float32", name="head")
    dg, db = ta.grad(y, [g, b], head=head)
    plan = plan_kernel([dg, db], [x, g, b, head])
    assert plan.stage(db.op.name).cpu.accumulate is not None
    r = rng()
    xs, gs, bs, hs = (r.standard_normal(s).astype("float32") for s in ((2048, 32), (32,), (32,), (2048, 32)))
    got_g, got_b = ta.build([dg, db], [x, g, b, head])(xs, gs, bs, hs)
    x64 = xs.astype(np.float64)
    xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got_g, (hs * xhat).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_b, hs.astype(np.float64).sum(0), rtol=1e-4, atol=1e-4)


def test_strided_conv_input_gradient_factor_is_col2im_layout():
    """The factored sum P of a stride-2 convolution's input gradient follows the col2im loop:
    P[n, c, ry, rx, y, x], one w^T @ head[n] per image, no operand or result copied (it was
    P[n, y, x, c, ry, rx]: head transposed into BLAS layout, and the col2im loop read P with a
    stride of c * 9 along its innermost axis).  Planning only: nothing is compiled."""
    x = te.placeholder((8, 64, 56, 56), "float32", name="x")
    w = te.placeholder((128, 64, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, 2, 1)
    head = te.placeholder(y.shape, "float32", name="head")
    (dx,) = ta.grad(y, [x], head=head)
    plan = plan_kernel([dx], [x, w, head])
    (p,) = [s for s in plan.stages if s.name.endswith("_factor")]
    assert tuple(int(d.value) for d in p.tensors[0].shape) == (8, 64, 3, 3, 28, 28), str(plan)
    c = p.cpu.contraction
    assert c is not None and c.shared == "a" and c.a is w and c.b is head, str(plan)
    assert c.out_perm is None and _copied(c) == 0, str(plan)
    # ... and what is left of the sum scatters P in order (schedule/cpu_col2im.py), proven in
    # the gather's domain (no condition), in parallel over the channels
    col = plan.stage("dconv2d_pad")
    assert isinstance(col, ScatterStage) and col.parallel_axis is not None, str(plan)
    assert col.order[-1] is col.updates[0].value.indices[-1], str(plan)
    assert col.updates[0].condition.same_as(te.const(True, "bool")), str(plan)

@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_uses_im2col_and_factored_contractions(stride):
    torch = pytest.importorskip("torch")
    x = te.placeholder((2, 8, 12, 12), "float32", name="x")
    w = te.placeholder((16, 8, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, stride, 1)
    head = te.placeholder(y.shape, "float32", name="head")
    dx, dw = ta.grad(y, [x, w], head=head)
    fwd = plan_kernel([y], [x, w])
    assert fwd.stage("conv2d_im2col") and fwd.stage("conv2d").cpu.contraction is not None
    bwd = plan_kernel([dx, dw], [x, w, head])
    assert bwd.stage(dw.op.name).cpu.contraction is not None  # weight gradient: im2col + BLAS
    if stride == 1:  # input gradient: the windows boxed, the head gathered (im2col) and BLAS
        st = bwd.stage("dconv2d_pad")
        assert st.cpu.contraction is not None and any(n.startswith("boxed:") for n in st.notes)
    else:  # the hull of a strided window is 3x its size: the sum over f factored out to BLAS
        factored = [s for s in bwd.stages if s.name.endswith("_factor")]
        assert factored and factored[0].cpu.contraction is not None
        # laid out as Caffe's col2im buffer P[n, c, ry, rx, y, x] (see the next test)
        shape_ = tuple(int(d.value) for d in factored[0].tensors[0].shape)
        assert shape_ == (2, 8, 3, 3, 6, 6), str(bwd)
    r = rng()
    xs, ws = r.standard_normal((2, 8, 12, 12)).astype("float32"), r.standard_normal((16, 8, 3, 3)).astype("float32")
    tx, tw = torch.from_numpy(xs.astype(np.float64)).requires_grad_(), torch.from_numpy(ws.astype(np.float64)).requires_grad_()
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1)
    hs = r.standard_normal(tuple(ty.shape)).astype("float32")
    gx, gw = torch.autograd.grad(ty, [tx, tw], torch.from_numpy(hs.astype(np.float64)))
    (got_y,) = ta.build([y], [x, w])(xs, ws)
    got_dx, got_dw = ta.build([dx, dw], [x, w, head])(xs, ws, hs)
    np.testing.assert_allclose(got_y, ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dx, gx.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dw, gw.numpy(), rtol=1e-4, atol=1e-4)


def test_rowwise_chain_shares_one_prange():
    x = te.placeholder((256, 64), "float32", name="x")
    y = ew.softmax(x, -1)
    plan = plan_kernel([y], [x])
    joined = [s.name for s in plan.stages if plan.joined(s.name)]
    assert joined and not plan.joined(plan.stages[0].name)
    assert [n.kind for n in plan.nest] == ["prange"], str(plan)  # one loop shared by all
    src = ta.build([y], [x]).source
    assert src.count("prange(") == 1
    xs = rng().standard_normal((256, 64)).astype("float32")
    x64 = xs.astype(np.float64)
    want = np.exp(x64 - x64.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(ta.build([y], [x])(xs)[0], want, rtol=1e-5, atol=1e-6)



def test_small_serial_stages_join_the_prange_of_their_group():
    """batch_norm's per-channel scalars (mean = sum / n, ...) are too small for a prange of
    their own; they join the channel prange, so one prange covers every statistic of a
    channel while its data is in cache; alone, a small stage stays serial."""
    x = te.placeholder((4, 8, 6, 6), "float32", name="x")
    g, b = te.placeholder((8,), "float32", name="g"), te.placeholder((8,), "float32", name="b")
    y = ew.batch_norm_train(x, g, b, 1, 1e-5)
    head = te.placeholder(y.shape, "float32", name="head")
    grads = ta.grad(y, [x, g, b], head=head)
    plan = plan_kernel(list(grads), [x, g, b, head])
    mean = plan.stage("batch_norm_mean")
    assert plan.joined(mean.name) and mean.parallel and any("joined although small" in n for n in mean.notes)
    group = [s.name for s in plan.stages if plan.joined(s.name)]
    assert {"batch_norm_var_red1", "batch_norm_var", "db"} <= set(group)
    assert plan.stages[0].parallel and not plan.joined(plan.stages[0].name)  # the group's head opens it
    m = te.placeholder((8,), "float32", name="m")
    alone = te.compute((8,), lambda c: m[c] * 2.0, name="alone")
    lone_plan = plan_kernel([alone], [m])
    lone = lone_plan.stage("alone")
    assert not lone.parallel and lone_plan.loop_of("alone") is None  # nothing to join: stays serial
    r = rng()
    arrs = [r.standard_normal((4, 8, 6, 6)).astype("float32"), r.standard_normal(8).astype("float32"),
            r.standard_normal(8).astype("float32"), r.standard_normal((4, 8, 6, 6)).astype("float32")]
    got = ta.build(list(grads), [x, g, b, head])(*arrs)
    want = te.evaluate(list(grads), {x: arrs[0], g: arrs[1], b: arrs[2], head: arrs[3]})
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=2e-4, atol=2e-5)

# -- memory: plain reads inlined, row buffers, workspace --------------------------------------

def _ew_chain(n=64, m=48):
    x, w, b = (te.placeholder(s, "float32", name=nm) for s, nm in (((n, m), "x"), ((m,), "w"),
                                                                  ((m,), "b")))
    from texpr_ad.ops import reduction
    y = reduction.sum(ew.multiply(ew.tanh(ew.add(ew.multiply(x, w), b)), ew.sigmoid(x)))
    return x, w, b, y


def test_broadcast_of_the_head_is_inlined_not_materialized():
    x, w, b, y = _ew_chain()
    head = te.placeholder((), "float32", name="head")
    grads = ta.grad(y, [x, w, b], head=head)
    plan = plan_kernel(grads, [x, w, b, head])
    names = [s.name for s in plan.stages]
    broadcasts = [i for i in plan.inlined if "plain read" in i.reason]
    assert broadcasts, str(plan)  # d(sum)/dx = head broadcast: re-read, never stored
    assert all(i.stage not in names for i in broadcasts)


def test_joined_intermediates_become_row_buffers_and_the_kernel_is_right():
    x, w, b, y = _ew_chain()
    head = te.placeholder((), "float32", name="head")
    dx, dw, db = ta.grad(y, [x, w, b], head=head)
    k = ta.build([dx, dw, db], [x, w, b, head])
    rows = [s for s in k.plan.stages if k.plan.place(s.name) == "row buffer"]
    assert {s.name for s in rows} >= {"tanh", "sigmoid"}, str(k.plan)
    assert "row buffer" in str(k.plan)
    for s in rows:  # allocated inside the prange, without the parallel dim
        assert f"    {s.name} = np.empty((48,)" in k.source
    r = rng()
    xs, ws, bs = (r.standard_normal(s).astype("float32") for s in ((64, 48), (48,), (48,)))
    hs = np.array(1.5, np.float32)
    gx, gw, gb = k(xs, ws, bs, hs)
    x64, w64, b64 = (a.astype(np.float64) for a in (xs, ws, bs))
    t, s = np.tanh(x64 * w64 + b64), 1 / (1 + np.exp(-x64))
    du = 1.5 * s * (1 - t * t)
    np.testing.assert_allclose(gx, 1.5 * t * s * (1 - s) + du * w64, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(gw, (du * x64).sum(0), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(gb, du.sum(0), rtol=2e-5, atol=2e-5)


def test_batched_dot_products_stay_loops_not_blas():
    x, w, b, y = _ew_chain(n=4096, m=64)  # dw[j] = sum_i dadd[i, j] * x[i, j]: batch j, m = n = 1
    head = te.placeholder((), "float32", name="head")
    dx, dw, db = ta.grad(y, [x, w, b], head=head)
    st = plan_kernel([dx, dw, db], [x, w, b, head]).stage(dw.op.name)
    assert st.cpu.contraction is None and st.cpu.accumulate is not None


def test_large_intermediates_are_reused_workspace_arguments():
    x = te.placeholder((8, 16, 34, 34), "float32", name="x")
    w = te.placeholder((16, 16, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, stride=1, padding=1)
    k = ta.build([y], [x, w], plan_overrides={"conv2d": {"implicit": False}})  # a stored gather
    signature = k.source.split("def texpr_kernel(")[1].split(")")[0]
    assert "conv2d_im2col" in signature, k.source  # 8*34*34*144 floats: passed in, not allocated
    assert "conv2d_im2col = np.empty" not in k.source
    r = rng()
    xs, wss = r.standard_normal((8, 16, 34, 34)).astype("float32"), r.standard_normal((16, 16, 3, 3)).astype("float32")
    y1 = k(xs, wss)[0]
    y2 = k(xs * 2, wss)[0]  # a second call reuses the buffers: still right
    xp = np.pad((xs * 2).astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # n c y x ky kx
    want = np.einsum("ncyxij,ocij->noyx", win, wss.astype(np.float64))
    np.testing.assert_allclose(y2, want, rtol=1e-4, atol=1e-4)
    assert not np.shares_memory(y1, y2)


def test_im2col_streams_along_the_contiguous_axis():
    x = te.placeholder((8, 16, 34, 34), "float32", name="x")
    w = te.placeholder((16, 16, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, stride=1, padding=1)
    plan = plan_kernel([y], [x, w], overrides={"conv2d": {"implicit": False}})  # not in place
    col = next(s for s in plan.stages if s.name.endswith("_im2col"))
    # per batch entry n: K rows, pixel columns (the product with w writes y[n] in place)
    assert [a.name for a in col.axes] == ["n", "rc", "ry", "rx", "y", "x"], str(plan)
    assert col.order[-1].name == "x"
    c = plan.stage("conv2d").cpu.contraction
    assert c.shared == "a" and c.a is w and c.out_perm is None, str(plan)


def test_reshape_unflattening_splits_the_inner_loop_and_stays_right():
    x = te.placeholder((4, 6, 3, 8), "float32", name="x")
    y = shape.reshape(shape.transpose(x, (0, 2, 1, 3)), (4, 3, 48))
    k = ta.build([y], [x])
    st = k.plan.stage(y.op.name)
    assert st.cpu.split is not None and st.cpu.split.factor == 8, str(k.plan)
    assert "//" not in k.source and "%" not in k.source  # x[i0, i2_hi, i1, i2_lo]
    xs = np.arange(4 * 6 * 3 * 8, dtype=np.float32).reshape(4, 6, 3, 8)
    np.testing.assert_array_equal(k(xs)[0], xs.transpose(0, 2, 1, 3).reshape(4, 3, 48))


def test_a_value_read_through_a_split_axis_is_not_hoisted_above_its_loop():
    # dx[n, c, y, x] = g[n, c, y // 2, x // 2]: x splits into (x_hi, x_lo), and the read
    # g[..., x_hi] varies with x_hi, so it must stay inside that loop (it was hoisted above it,
    # and the kernel failed to compile with Numba's NotDefinedError)
    g = te.placeholder((2, 4, 8, 8), "float32", name="g")
    s = te.compute(g.shape, lambda n, c, y, x: g[n, c, y, x] * 0.25, name="s")
    dx = te.compute((2, 4, 16, 16), lambda n, c, y, x: s[n, c, y // 2, x // 2], name="dx")
    k = ta.build([dx], [g], plan_overrides={"s": {"inline": False}})
    st = k.plan.stage("dx")
    assert st.cpu.split is not None, str(k.plan)
    assert not any("x_hi" in str(h) for h in st.cpu.hoisted), str(k.plan)
    ga = np.random.default_rng(0).standard_normal((2, 4, 8, 8)).astype(np.float32)
    want = np.repeat(np.repeat(ga * np.float32(0.25), 2, axis=2), 2, axis=3)
    np.testing.assert_array_equal(k(ga)[0], want)


def test_a_split_full_sum_folds_each_chunk_in_vector_steps():
    # te.sum over a whole elementwise body (the plain way to write a loss): the split chunks
    # accumulate in radd-stepped scalars, so the exp/tanh body vectorizes (it was a scalar
    # accumulation into part[c], 13x slower at 4096x1024)
    x = te.placeholder((512, 256), "float32", name="x")
    i, j = te.reduce_axis((0, 512), "i"), te.reduce_axis((0, 256), "j")
    y = te.compute((), lambda: te.sum(te.tanh(x[i, j]) * te.exp(-x[i, j]), axis=[i, j]), name="y")
    k = ta.build([y], [x])
    acc = k.plan.stage("y").cpu.accumulate
    assert acc is not None and acc.split is not None and acc.vector, str(k.plan)
    assert "radd(" in k.source
    xs = np.random.default_rng(0).standard_normal((512, 256)).astype(np.float32)
    want = float((np.tanh(xs.astype(np.float64)) * np.exp(-xs.astype(np.float64))).sum())
    assert abs(float(k(xs)[0]) - want) <= 1e-5 * np.abs(np.tanh(xs) * np.exp(-xs)).sum()
    # a conditioned sum keeps the plain fold
    c = te.compute((), lambda: te.sum(x[i, j], axis=[i, j], where=x[i, j] > 0), name="c")
    kc = ta.build([c], [x])
    accc = kc.plan.stage("c").cpu.accumulate
    assert accc is None or not accc.vector
    np.testing.assert_allclose(kc(xs)[0], xs[xs > 0].astype(np.float64).sum(), rtol=1e-5)


def test_a_later_channel_sum_moves_into_the_earlier_channel_prange():
    """Plain batch_norm's backward lists dgamma (a per-channel sum over the rows) after dx (a
    prange over n * c); fuse.pull moves it back into the prange of dvar's and
    dbeta's sums, which read the same rows, and the gradients stay torch's."""
    torch = pytest.importorskip("torch")
    n, c, h, wd = 4, 8, 12, 12
    x, g, b = (te.placeholder(s, "float32", name=nm) for s, nm in
               (((n, c, h, wd), "x"), ((c,), "gamma"), ((c,), "beta")))
    cnt = float(n * h * wd)
    r1 = [te.reduce_axis((0, e), nm) for e, nm in ((n, "n"), (h, "h"), (wd, "w"))]
    r2 = [te.reduce_axis((0, e), nm) for e, nm in ((n, "n"), (h, "h"), (wd, "w"))]
    mean = te.compute((c,), lambda f: te.sum(x[r1[0], f, r1[1], r1[2]], axis=r1) / cnt, name="mean")
    var = te.compute((c,), lambda f: te.sum((x[r2[0], f, r2[1], r2[2]] - mean[f]) *
                                            (x[r2[0], f, r2[1], r2[2]] - mean[f]), axis=r2) / cnt,
                     name="var")
    y = te.compute((n, c, h, wd), lambda i, f, yy, z: (x[i, f, yy, z] - mean[f])
                   / te.sqrt(var[f] + 1e-5) * g[f] + b[f], name="bn")
    head = te.placeholder(y.shape, "float32", name="head")
    grads = ta.grad(y, [x, g, b], head=head)
    k = ta.build(list(grads), [x, g, b, head])
    dg = grads[1].op.name
    names = [s.name for s in k.plan.stages]
    assert k.plan.joined(dg) and names.index(dg) < names.index(grads[0].op.name), str(k.plan)
    r = rng()
    xs, gs, bs, hs = (r.standard_normal(s).astype("float32") for s in ((n, c, h, wd), (c,), (c,),
                                                                    (n, c, h, wd)))
    got = k(xs, gs, bs, hs)
    tx, tg, tb = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xs, gs, bs))
    ty = torch.nn.functional.batch_norm(tx, None, None, tg, tb, training=True, eps=1e-5)
    want = torch.autograd.grad(ty, [tx, tg, tb], torch.from_numpy(hs.astype(np.float64)))
    for a, w_ in zip(got, want):
        np.testing.assert_allclose(a, w_.numpy(), rtol=1e-4, atol=1e-4)

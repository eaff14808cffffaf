"""Issue #28, the core-API items: an output listed twice keeps both cotangents (1), reads in
reduce bounds survive the residual bookkeeping (6), every reducer refuses a data axis (15), a
NaN max/min has a NaN gradient (16), ragged reduce bounds are checked and may read a constant
index (17); with the members of each class found beside them."""
import ast
import itertools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.te.dag import replace_inputs

nan = np.nan
_ids = itertools.count()


def _sin(x, name="y"):
    return te.compute(x.shape, lambda i: te.sin(x[i]), name=name)


def _cos(x, name="z"):
    return te.compute(x.shape, lambda i: te.cos(x[i]), name=name)


# -- 1. an output listed twice, or also an input, or read by another output --------------------

# te function of x -> (outputs, d/dx of sum_k <h_k, output_k> as a function of x and the heads)
ALIASED = {
    "y_y": (lambda x: [_sin(x)] * 2, lambda x, h: np.cos(x) * (h[0] + h[1])),
    "x_x": (lambda x: [x, x], lambda x, h: h[0] + h[1]),
    "x_siny": (lambda x: [x, _sin(x)], lambda x, h: h[0] + np.cos(x) * h[1]),
    "y_z_y": (lambda x: (lambda y: [y, te.compute(x.shape, lambda i: y[i] * y[i], name="z"), y])(
        _sin(x)), lambda x, h: np.cos(x) * (h[0] + 2 * np.sin(x) * h[1] + h[2])),
    "y_y_z_z": (lambda x: (lambda y, z: [y, y, z, z])(_sin(x), _cos(x)),
                lambda x, h: np.cos(x) * (h[0] + h[1]) - np.sin(x) * (h[2] + h[3])),
}
X4 = np.linspace(0.1, 1.0, 4)


def _heads(n, shape=(4,)):
    rng = np.random.default_rng(1)
    return [rng.standard_normal(shape) for _ in range(n)]


@pytest.mark.parametrize("case", ALIASED)
def test_grad_sums_the_heads_of_an_output_listed_twice(case):
    """The issue: `ta.grad([Y, Y], [X], head=[H1, H2])` was cos(x) * H2 (H1 dropped)."""
    fn, want = ALIASED[case]
    X = te.placeholder((4,), "float64", name="x")
    outs = fn(X)
    H = [te.placeholder((4,), "float64", name=f"h{k}") for k in range(len(outs))]
    (g,) = ta.grad(outs, [X], head=H)
    h = _heads(len(outs))
    got = te.evaluate([g], {X: X4, **dict(zip(H, h))})[0]
    np.testing.assert_allclose(got, want(X4, h), rtol=1e-12)


def test_grad_sums_heads_with_leading_dims():
    X = te.placeholder((4,), "float64", name="x")
    Y = _sin(X)
    H1, H2 = (te.placeholder((2, 4), "float64", name=n) for n in ("H1", "H2"))
    (g,) = ta.grad([Y, Y], [X], head=[H1, H2])
    h1, h2 = _heads(2, (2, 4))
    (got,) = ta.build([g], [X, H1, H2])(X4, h1, h2)
    np.testing.assert_allclose(got, np.cos(X4) * (h1 + h2), rtol=1e-12)


@pytest.mark.parametrize("case", ["y_y", "x_siny", "y_z_y"])
def test_every_vjp_route_keeps_both_cotangents(case):
    """ta.vjp (each residual policy), custom_op.vjp and custom_op.forward/backward."""
    fn, want = ALIASED[case]
    X = te.placeholder((4,), "float64", name="x")
    outs = fn(X)
    h = _heads(len(outs))
    exp = want(X4, h)
    for save in ("auto", "none", "all"):
        fwd, bwd = ta.vjp(outs, [X], save=save)
        ys, res = fwd(X4)
        np.testing.assert_allclose(bwd(res, *h)[0], exp, rtol=1e-12, err_msg=f"ta.vjp {save}")
    op = ta.custom_op(fn, name=case)
    np.testing.assert_allclose(op.vjp(h, X4)[0], exp, rtol=1e-12, err_msg="custom_op.vjp")
    ys, res = op.forward(X4)
    np.testing.assert_allclose(op.backward(res, *h)[0], exp, rtol=1e-12, err_msg="forward/backward")
    assert not any(np.shares_memory(a, b) for a, b in itertools.combinations([X4, *ys], 2))


def test_evaluate_returns_one_fresh_array_per_output():
    """te.evaluate returned one array object for an output listed twice, and the input array
    itself for an output that is an input (writing into a result changed the other, or the
    input); the kernels return fresh arrays."""
    X = te.placeholder((4,), "float64", name="x")
    Y = _sin(X)
    x = X4.copy()
    outs = te.evaluate([Y, Y, X], {X: x})
    assert not any(np.shares_memory(a, b) for a, b in itertools.combinations([x, *outs], 2))
    outs[1][:] = 0.0
    outs[2][:] = 0.0
    np.testing.assert_array_equal(outs[0], np.sin(X4))
    np.testing.assert_array_equal(x, X4)


# fn, (weights of a.sum(), b.sum()), d/dx
FRONTEND = [(lambda x: [_sin(x)] * 2, lambda x, np_: 3 * np_.cos(x)),
            (lambda x: [x, x], lambda x, np_: 3 + 0 * x),
            (lambda x: [x, _sin(x)], lambda x, np_: 1 + 2 * np_.cos(x))]


@pytest.mark.parametrize("k", range(len(FRONTEND)), ids=["y_y", "x_x", "x_siny"])
def test_torch_op_returning_one_tensor_twice(k):
    """The issue: the gradient of a.sum() + 2 * b.sum() for fn(x) = [y, y] was 2 cos x."""
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    fn, want = FRONTEND[k]
    op = tt.custom_op(fn, name=f"core_reliability_twice_{next(_ids)}")
    x = torch.linspace(0.1, 1.0, 4, dtype=torch.float64, requires_grad=True)
    a, b = op(x)
    (a.sum() + 2 * b.sum()).backward()
    torch.testing.assert_close(x.grad, want(x.detach(), torch))
    assert a.data_ptr() != b.data_ptr() and x.data_ptr() not in (a.data_ptr(), b.data_ptr())


@pytest.mark.parametrize("k", range(len(FRONTEND)), ids=["y_y", "x_x", "x_siny"])
def test_jax_op_returning_one_array_twice(k):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    fn, want = FRONTEND[k]
    op = tj.custom_op(fn, name=f"twice_{k}")

    def loss(x):
        a, b = op(x)
        return a.sum() + 2 * b.sum()

    with jax.enable_x64(True):
        x = jnp.linspace(0.1, 1.0, 4)
        np.testing.assert_allclose(jax.grad(loss)(x), want(np.asarray(x), np), rtol=1e-12)
        np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), want(np.asarray(x), np), rtol=1e-12)


# -- 6. tensors read only in reduce bounds ------------------------------------------------------

ROWS = np.array([2, 5, 0], np.int32)
XR = np.random.default_rng(2).standard_normal((3, 5))


def _ragged_sum(x, lens):
    """Y[i] = sum_{k < L[i]} sin(X[i, k])."""
    def row(i):
        k = te.reduce_axis((0, lens[i]), name="k")
        return te.sum(te.sin(x[i, k]), axis=k)
    return te.compute((x.shape[0],), row, name="Y")


def _ragged_ref(x, lens, h):
    mask = np.arange(x.shape[1]) < lens[:, None]
    return (np.sin(x) * mask).sum(1), np.where(mask, np.cos(x) * h[:, None], 0.0)


def test_ragged_reduce_vjp_routes_against_numpy():
    """The issue: ta.vjp, custom_op and the torch op failed to compile the backward (`NameError:
    name 'L' is not defined`): the backward's inputs were found without the reduce bounds."""
    X = te.placeholder((3, 5), "float64", name="X")
    L = te.placeholder((3,), "int32", name="L")
    h = np.array([1.0, -2.0, 3.0])
    y_ref, g_ref = _ragged_ref(XR, ROWS, h)
    for save in ("auto", "none"):
        fwd, bwd = ta.vjp([_ragged_sum(X, L)], [X, L], save=save)
        (y,), res = fwd(XR, ROWS)
        np.testing.assert_allclose(y, y_ref, rtol=1e-12)
        gx, gl = bwd(res, h)
        np.testing.assert_allclose(gx, g_ref, rtol=1e-12)
        assert gl is None
    op = ta.custom_op(_ragged_sum, name="ragged")
    np.testing.assert_allclose(op.vjp(h, XR, ROWS)[0], g_ref, rtol=1e-12)
    (y,), res = op.forward(XR, ROWS)
    np.testing.assert_allclose(op.backward(res, h)[0], g_ref, rtol=1e-12)


def test_ragged_reduce_torch_and_jax_ops():
    torch = pytest.importorskip("torch")
    import texpr_ad.torch as tt
    h = np.array([1.0, -2.0, 3.0])
    _, g_ref = _ragged_ref(XR, ROWS, h)
    op = tt.custom_op(_ragged_sum, name=f"core_reliability_ragged_{next(_ids)}")
    x = torch.tensor(XR, requires_grad=True)
    (op(x, torch.from_numpy(ROWS)) * torch.from_numpy(h)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), g_ref, rtol=1e-12)
    jax = pytest.importorskip("jax")
    import texpr_ad.jax as tj
    jop = tj.custom_op(_ragged_sum, name="ragged")
    with jax.enable_x64(True):
        g = jax.grad(lambda x: (jop(x, ROWS) * h).sum())(XR)
    np.testing.assert_allclose(np.asarray(g), g_ref, rtol=1e-12)


def _segments(x, offsets):
    """The sum, max and product of sin(X[k]) over each segment offsets[s] <= k < offsets[s + 1]
    (the max's tie count and the product's partials are reductions over the same ranges)."""
    def seg(s, red):
        k = te.reduce_axis((offsets[s], offsets[s + 1]), name="k")
        return red(te.sin(x[k]), axis=k)
    n = offsets.shape[0] - 1
    return [te.compute((n,), lambda s: seg(s, red), name=name)
            for red, name in ((te.sum, "S"), (te.max, "M"), (te.prod, "P"))]


X10 = np.linspace(0.1, 3.0, 10)
HEADS3 = [np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0]), np.array([-1.0, 0.5, 1.5])]


def _segments_ref(x, off, hs, hm, hp):
    sx = np.sin(x)
    g = np.zeros_like(x)
    for s in range(len(off) - 1):
        a, b = off[s], off[s + 1]
        g[a:b] += (hs[s] + hp[s] * np.prod(sx[a:b]) / sx[a:b]) * np.cos(x[a:b])
        if b > a:
            g[a + np.argmax(sx[a:b])] += hm[s] * np.cos(x[a + np.argmax(sx[a:b])])
    return g


def test_offsets_read_in_reduce_bounds_against_numpy():
    """`reduce_axis((offsets[s], offsets[s + 1]))` as the README writes it: a sum, a max and a
    product (the max's tie count and the product's partials dropped the segment's offsets from
    their bounds: `name 's' is not defined`, even through ta.grad + ta.build)."""
    X = te.placeholder((10,), "float64", name="X")
    Off = te.placeholder((4,), "int32", name="offsets")
    off = np.array([0, 3, 3, 9], np.int32)
    fwd, bwd = ta.vjp(_segments(X, Off), [X, Off])
    (s, m, p), res = fwd(X10, off)
    np.testing.assert_allclose(s, [np.sin(X10[a:b]).sum() for a, b in zip(off, off[1:])], rtol=1e-12)
    np.testing.assert_allclose(p, [np.sin(X10[a:b]).prod() for a, b in zip(off, off[1:])], rtol=1e-12)
    gx, _ = bwd(res, *HEADS3)
    np.testing.assert_allclose(gx, _segments_ref(X10, off, *HEADS3), rtol=1e-12)


def test_offsets_computed_by_a_stage_are_part_of_the_dag():
    """Offsets computed from lengths inside the definition: the stage was not in the DAG at all
    (`te.topo_order` skipped reads in reduce bounds), so even the forward failed to compile;
    the vjp saves it (a reduction) and the backward reads the saved copy in its bounds."""
    X = te.placeholder((10,), "float64", name="X")
    lens = te.placeholder((3,), "int32", name="lens")
    j = te.reduce_axis((0, 3), name="j")
    Off = te.compute((4,), lambda s: te.sum(te.if_then_else(j < s, lens[j], 0), axis=j), name="Off")
    outs = _segments(X, Off)
    assert [t.name for t in te.topo_order(outs)] == ["X", "lens", "Off", "S", "M", "P"]
    ln = np.array([3, 0, 5], np.int32)
    off = np.concatenate([[0], np.cumsum(ln)]).astype(np.int32)
    want_s = [np.sin(X10[a:b]).sum() for a, b in zip(off, off[1:])]
    np.testing.assert_allclose(te.evaluate(outs[:1], {X: X10, lens: ln})[0], want_s)  # KeyError
    want = _segments_ref(X10, off, *HEADS3)
    for save, reads in (("auto", "saved Off"), ("none", "input lens")):
        vjp = ta.vjp(outs, [X, lens], save=save)
        (s, m, p), res = vjp.forward(X10, ln)
        np.testing.assert_allclose(s, want_s)
        assert reads in res.names, (save, res.names)
        np.testing.assert_allclose(vjp.backward(res, *HEADS3)[0], want, rtol=1e-12)


CUDA_SEGMENTS = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    X = te.placeholder((10,), "float64", name="X")
    lens = te.placeholder((3,), "int32", name="lens")
    j = te.reduce_axis((0, 3), name="j")
    Off = te.compute((4,), lambda s: te.sum(te.if_then_else(j < s, lens[j], 0), axis=j), name="Off")
    def seg(s):
        k = te.reduce_axis((Off[s], Off[s + 1]), name="k")
        return te.sum(te.sin(X[k]), axis=k)
    S = te.compute((3,), seg, name="S")
    x, ln, h = np.linspace(0.1, 3.0, 10), np.array([3, 0, 5], np.int32), np.array([1.0, 2.0, 3.0])
    fwd, bwd = ta.vjp([S], [X, lens], target="cuda")
    (s,), res = fwd(x, ln)
    print(np.asarray(bwd(res, h)[0]).tolist())
""")


def test_segments_vjp_on_the_cuda_simulator():
    """The CUDA kernels took their arguments from the stage bodies: the backward's scatter over
    `saved_Off[s] <= k < saved_Off[s + 1]` did not get saved_Off (NameError)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1",
           "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", CUDA_SEGMENTS], capture_output=True, text=True,
                       env=env, cwd=root, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    x, h = np.linspace(0.1, 3.0, 10), [1.0] * 3 + [3.0] * 5 + [0.0] * 2
    got = ast.literal_eval(p.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got, np.cos(x) * h, rtol=1e-12)


def test_a_bound_reading_another_row_keeps_its_stage_out_of_the_prange():
    """The CPU planner joined Y into Lq's prange (it read Lq only at its own row, it thought),
    but Y's bound reads Lq at the next row, which another thread may not have written yet:
    garbage bounds (a KernelIndexError past the data, or a wrong sum)."""
    from texpr_ad.schedule.planner import plan_kernel
    n = 2048  # parallel: at least 1024 rows
    X = te.placeholder((n, 8), "float64", name="X")
    L = te.placeholder((n,), "int32", name="L")
    Lq = te.compute((n,), lambda i: L[i] * 2 - L[i], name="Lq")

    def row(i):
        k = te.reduce_axis((0, Lq[(i + 1) % n]), name="k")
        return te.sum(X[i, k], axis=k)

    Y = te.compute((n,), row, name="Y")
    plan = plan_kernel([Y], [X, L], "cpu", None)
    assert [(st.name, plan.joined(st.name)) for st in plan.stages] == [("Lq", False), ("Y", False)]
    rng = np.random.default_rng(4)
    x, lens = rng.random((n, 8)), rng.integers(0, 9, n).astype(np.int32)
    (y,) = ta.build([Y], [X, L])(x, lens)
    np.testing.assert_allclose(y, [x[i, :lens[(i + 1) % n]].sum() for i in range(n)], rtol=1e-12)


def test_cse_tells_apart_bounds_reading_tensors_of_one_name():
    """Two segment sums over offsets tensors both named "off": one stage each, not merged."""
    V = te.placeholder((10,), "float64", name="V")
    O1, O2 = (te.placeholder((4,), "int32", name="off") for _ in range(2))

    def segsum(O):
        def seg(s):
            k = te.reduce_axis((O[s], O[s + 1]), name="k")
            return te.sum(V[k], axis=k)
        return te.compute((3,), seg, name="seg")

    a, b = segsum(O1), segsum(O2)
    (Z,) = te.dag.cse([te.compute((3,), lambda s: a[s] + b[s], name="Z")])
    assert sum(t.name == "seg" for t in te.topo_order([Z])) == 2
    o1, o2 = np.array([0, 1, 2, 3], np.int32), np.array([0, 5, 7, 10], np.int32)
    got = te.evaluate([Z], {V: np.arange(10.0), O1: o1, O2: o2})[0]
    np.testing.assert_allclose(got, [0 + 10, 1 + 11, 2 + 24])


def test_dag_utilities_see_reads_in_bounds():
    """inputs, placeholders and replace_inputs follow reads in reduce-axis and scatter-domain
    bounds (the ragged gradient is a scatter over `k < L[i]`)."""
    X = te.placeholder((3, 5), "float64", name="X")
    L = te.placeholder((3,), "int32", name="L")
    Y = _ragged_sum(X, L)
    assert [t.name for t in Y.op.inputs] == ["X", "L"]
    H = te.placeholder((3,), "float64", name="H")
    (dX,) = ta.grad(Y, [X], head=H)
    assert isinstance(dX.op, te.ScatterOp) and {t.name for t in dX.op.inputs} == {"X", "L", "H"}
    assert {t.name for t in te.placeholders([dX])} == {"X", "L", "H"}
    L2 = te.placeholder((3,), "int32", name="L2")
    Y2, dX2 = replace_inputs([Y, dX], {L: L2})
    assert {t.name for t in te.placeholders([Y2, dX2])} == {"X", "L2", "H"}
    lens = np.array([1, 4, 2], np.int32)
    y, g = te.evaluate([Y2, dX2], {X: XR, L2: lens, H: np.ones(3)})
    y_ref, g_ref = _ragged_ref(XR, lens, np.ones(3))
    np.testing.assert_allclose(y, y_ref, rtol=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12)


# -- 15. a data axis (or any non-axis) as axis= --------------------------------------------------

_X45 = te.placeholder((4, 5), "float64", name="X")
_mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t), name="mysum")
_argmax = te.comm_reducer(
    lambda x, y: (te.if_then_else(x[1] >= y[1], x[0], y[0]), te.max(x[1], y[1])),
    lambda t0, t1: (te.const(-1, t0), te.min_value(t1)), name="argmax")
REDUCERS = {"max": te.max, "min": te.min, "sum": te.sum, "prod": te.prod, "mysum": _mysum}
AXES = {  # what was accepted as the elementwise form for max/min (and sum/prod/mysum for exprs)
    "data axis": (lambda i, j: j, r"axis 'j' is a data axis of the compute"),
    "expression": (lambda i, j: j + 1, r"axis= must be reduce axes made with te.reduce_axis, got `j \+ 1`"),
    "constant": (lambda i, j: 2, r"axis= must be reduce axes made with te.reduce_axis, got `2`"),
}


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", REDUCERS)
def test_every_reducer_refuses_a_non_axis_as_axis_keyword(name, axis):
    """The issue: te.max(x, axis=j) with a data axis j was the elementwise max(x, j)."""
    make, msg = AXES[axis]
    with pytest.raises(te.TensorError, match=rf"te\.{name}: {msg}"):
        te.compute((4, 5), lambda i, j: REDUCERS[name](_X45[i, j], axis=make(i, j)))


def test_axis_keyword_errors_name_the_elementwise_form_and_tuple_reducers():
    with pytest.raises(te.TensorError, match=r"elementwise max of two values is te\.max\(a, b\)"):
        te.compute((4, 5), lambda i, j: te.max(_X45[i, j], axis=j))
    with pytest.raises(te.TensorError, match="te.argmax: axis 'j' is a data axis"):
        te.compute((4, 5), lambda i, j: _argmax((j, _X45[i, j]), axis=j))
    with pytest.raises(te.TensorError, match="te.argmax: axis= must be reduce axes"):
        te.compute((4, 5), lambda i, j: _argmax((j, _X45[i, j]), axis=j * 2))
    k = te.reduce_axis((0, 5), name="k")
    with pytest.raises(te.TensorError, match="te.max: got both a second operand and axis="):
        te.compute((4,), lambda i: te.max(_X45[i, 0], _X45[i, 1], axis=k))


def test_elementwise_form_refuses_where_and_init():
    """te.max(x, j, init=0.0) was the elementwise max(x, j), its init dropped in silence."""
    with pytest.raises(te.TensorError, match="te.max: axis 'j' is a data axis"):
        te.compute((4, 5), lambda i, j: te.max(_X45[i, j], j, init=0.0))
    with pytest.raises(te.TensorError, match="te.min: axis 'j' is a data axis"):
        te.compute((4, 5), lambda i, j: te.min(_X45[i, j], j, j > 0))


def test_positional_forms_are_unchanged():
    """te.max(a, b) stays elementwise (TOPI writes te.max(x, 0)), te.sum(x, k) reduces."""
    k = te.reduce_axis((0, 5), name="k")
    Y = te.compute((4, 5), lambda i, j: te.max(_X45[i, j], j) + te.min(_X45[i, j], 0.5))
    S = te.compute((4,), lambda i: te.sum(_X45[i, k], k) + te.max(_X45[i, k], k))
    x = np.random.default_rng(3).standard_normal((4, 5))
    y, s = te.evaluate([Y, S], {_X45: x})
    np.testing.assert_allclose(y, np.maximum(x, np.arange(5.0)) + np.minimum(x, 0.5))
    np.testing.assert_allclose(s, x.sum(1) + x.max(1))


# -- 16. max/min over a NaN ------------------------------------------------------------------------

NAN_ROWS = np.array([[1.0, nan, 3.0, 0.0], [3.0, 1.0, 3.0, 0.0], [nan, nan, 1.0, 2.0],
                     [-np.inf, 2.0, -np.inf, 1.0]])


def _extreme_grad_ref(a, h, kind):
    """JAX's (and torch amax's) rule: [x == y] / #{x == y}, 0/0 = NaN on a NaN row."""
    y = a.max(1) if kind == "max" else a.min(1)
    hit = (a == y[:, None]).astype(float)
    with np.errstate(invalid="ignore"):
        return hit / hit.sum(1, keepdims=True) * h[:, None]


@pytest.mark.parametrize("kind", ["max", "min"])
def test_nan_extreme_has_a_nan_gradient_kernels_and_evaluator(kind):
    """The issue: the gradient of a max over [1, NaN, 3, 0] was [0, 1, 0, 0] (finite, the output
    NaN); ties split, so a NaN, equal to nothing, leaves 0/0 in every share."""
    X = te.placeholder((4, 4), "float64", name="X")
    H = te.placeholder((4,), "float64", name="H")
    k = te.reduce_axis((0, 4), name="k")
    red = te.max if kind == "max" else te.min
    Y = te.compute((4,), lambda i: red(X[i, k], axis=k), name="Y")
    (g,) = ta.grad(Y, [X], head=H)
    h = np.array([1.0, 2.0, -1.0, 0.5])
    want = _extreme_grad_ref(NAN_ROWS, h, kind)
    assert np.isnan(want[[0, 2]]).all() and np.isfinite(want[[1, 3]]).all()
    got_eval = te.evaluate([g], {X: NAN_ROWS, H: h})[0]
    (got_kernel,) = ta.build([g], [X, H])(NAN_ROWS, h)
    fwd, bwd = ta.vjp([Y], [X])
    (_,), res = fwd(NAN_ROWS)
    for got, what in ((got_eval, "te.evaluate"), (got_kernel, "kernel"), (bwd(res, h)[0], "vjp")):
        np.testing.assert_allclose(got, want, equal_nan=True, err_msg=what)


def test_nan_extreme_with_where_init_and_forward_mode():
    """A masked-out NaN takes no part; an init that is NaN makes the row NaN; jvp agrees."""
    X = te.placeholder((2, 4), "float64", name="X")
    I = te.placeholder((2,), "float64", name="I")
    H = te.placeholder((2,), "float64", name="H")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((2,), lambda i: te.max(X[i, k], axis=k, where=k > 0, init=I[i]), name="Y")
    a = np.array([[nan, 1.0, 3.0, 3.0], [0.0, 1.0, 2.0, 0.5]])
    init = np.array([0.0, nan])
    gx, gi = ta.grad(Y, [X, I], head=H)
    got_x, got_i = te.evaluate([gx, gi], {X: a, I: init, H: np.ones(2)})
    np.testing.assert_allclose(got_x, [[0, 0, 0.5, 0.5], [0, nan, nan, nan]],
                               equal_nan=True)
    np.testing.assert_allclose(got_i, [0.0, nan], equal_nan=True)
    kx, ki = ta.build([gx, gi], [X, I, H])(a, init, np.ones(2))
    np.testing.assert_allclose(kx, got_x, equal_nan=True)
    np.testing.assert_allclose(ki, got_i, equal_nan=True)
    T = te.placeholder((2, 4), "float64", name="T")
    TI = te.placeholder((2,), "float64", name="TI")
    (ty,) = ta.jvp([Y], [X, I], [T, TI])
    got = te.evaluate([ty], {X: a, I: init, T: np.ones((2, 4)), TI: np.ones(2)})[0]
    np.testing.assert_allclose(got, [1.0, nan], equal_nan=True)


# -- 17. ragged bounds out of range, and bounds read at a constant index -----------------------

OUT_OF_RANGE = textwrap.dedent("""
    import numpy as np, texpr_ad as ta
    from texpr_ad import te
    from texpr_ad.kernels.build import KernelIndexError
    X = te.placeholder((3, 5), "float64", name="X")
    L = te.placeholder((3,), "int32", name="L")
    V = te.placeholder((10,), "float64", name="V")
    O = te.placeholder((4,), "int32", name="O")
    H = te.placeholder((3,), "float64", name="H")
    def rows(i):
        k = te.reduce_axis((0, L[i]), name="k")
        return te.sum(X[i, k], axis=k)
    def rows_max(i):
        k = te.reduce_axis((0, L[i]), name="k")
        return te.max(X[i, k], axis=k)
    def first(i):
        k = te.reduce_axis((0, L[0]), name="k")
        return te.sum(X[i, k], axis=k)
    def segs(s):
        k = te.reduce_axis((O[s], O[s + 1]), name="k")
        return te.sum(V[k], axis=k)
    def window(i):
        k = te.reduce_axis((L[i], L[i] + 2), name="k")
        return te.sum(X[i, k], axis=k)
    def strided(i):
        k = te.reduce_axis((0, L[i]), name="k")
        return te.sum(X[i, 2 * k], axis=k)
    Z = te.compute((3,), strided, name="Z")
    Y, M, F, W = (te.compute((3,), f, name=n) for f, n in (
        (rows, "Y"), (rows_max, "M"), (first, "F"), (window, "W")))
    S = te.compute((3,), segs, name="S")
    big = np.array([2, 1 << 29, 0], np.int32)
    x, v = np.ones((3, 5)), np.ones(10)
    cases = [
        ("rows", ta.build([Y], [X, L]), (x, big)),
        ("rows max", ta.build([M], [X, L]), (x, big)),
        ("rows grad", ta.build(ta.grad(Y, [X], head=H), [X, L, H]), (x, big, np.ones(3))),
        ("rows vjp", ta.vjp([Y], [X, L]).forward, (x, big)),
        ("first", ta.build([F], [X, L]), (x, np.array([1 << 29, 0, 0], np.int32))),
        ("window", ta.build([W], [X, L]), (x, np.array([0, 1 << 29, 1], np.int32))),
        ("window low", ta.build([W], [X, L]), (x, np.array([0, -(1 << 29), 1], np.int32))),
        ("segs high", ta.build([S], [V, O]), (v, np.array([0, 3, 5, 1 << 29], np.int32))),
        ("segs low", ta.build([S], [V, O]), (v, np.array([-(1 << 29), 3, 5, 10], np.int32))),
        ("strided", ta.build([Z], [X, L]), (x, big)),
    ]
    for name, f, args in cases:
        try:
            f(*args)
            print(name, "NO ERROR")
        except KernelIndexError as e:
            print(name, "RAISED", e)
""")


def test_ragged_bound_out_of_range_raises_naming_the_tensor():
    """The issue: `reduce_axis((0, L[i]))` with L[i] past the data segfaulted (the bounds were
    checked at loop entry, but the loop still ran).  In a subprocess: a regression crashes it,
    not the test run."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, "-c", OUT_OF_RANGE], capture_output=True, text=True,
                       env=env, cwd=root, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    lines = dict(line.split(" RAISED ", 1) for line in p.stdout.splitlines() if " RAISED " in line)
    assert len(lines) == 10, p.stdout
    for name, msg in lines.items():
        want = ("read V[k] of tensor 'V', dim 0" if name.startswith("segs") else
                "a scatter index is out of bounds: dX[...] dim 1" if name == "rows grad" else
                "read X[i, 2 * k] of tensor 'X', dim 1" if name == "strided" else
                "read X[i, k] of tensor 'X', dim 1")
        assert want in msg and "outside [0, " in msg, (name, msg)


def test_reduce_bound_read_at_a_constant_index():
    """The issue: `reduce_axis((0, L[0]))` raised AttributeError ('Read' object has no attribute
    'value'), its extent taken for a constant; now it reads L[0] like L[i]."""
    X = te.placeholder((3, 5), "float64", name="X")
    L = te.placeholder((2,), "int32", name="L")
    k = te.reduce_axis((0, L[0]), name="k")
    r = te.reduce_axis((L[1], 5), name="r")
    assert k.extent.same_as(L[0]) and r.extent.same_as(5 - L[1])
    Y = te.compute((3,), lambda i: te.sum(te.sin(X[i, k]), axis=k) * te.sum(X[i, r], axis=r),
                   name="Y")
    lens, h = np.array([3, 1], np.int32), np.array([1.0, 2.0, -1.0])
    a, b = np.sin(XR[:, :3]).sum(1), XR[:, 1:].sum(1)
    g_ref = np.zeros_like(XR)
    g_ref[:, :3] += (h * b)[:, None] * np.cos(XR[:, :3])
    g_ref[:, 1:] += (h * a)[:, None]
    fwd, bwd = ta.vjp([Y], [X, L])
    (y,), res = fwd(XR, lens)
    np.testing.assert_allclose(y, a * b, rtol=1e-12)
    np.testing.assert_allclose(bwd(res, h)[0], g_ref, rtol=1e-12)
    np.testing.assert_allclose(te.evaluate([Y], {X: XR, L: lens})[0], a * b, rtol=1e-12)


def test_reduce_axis_constant_bounds_still_fold():
    k = te.reduce_axis((2, 7), name="k")
    assert isinstance(k.extent, te.Const) and k.extent.value == 5
    n = te.var("n")
    assert te.reduce_axis((1, n), name="j").extent.same_as(n - 1)


def test_a_tensor_where_a_list_is_expected_is_an_error_not_a_hang():
    """`ta.build(Y, X)` (X a 1-d tensor, not [X]) iterated X[0], X[1], ... forever: a single
    tensor is now a list of one there, and iterating a tensor anywhere else is an error."""
    X = te.placeholder((4,), "float32", name="X")
    Y = te.compute((4,), lambda i: X[i] * 2.0, name="Y")
    (y,) = ta.build(Y, X)(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(y, np.arange(4, dtype=np.float32) * 2)
    with pytest.raises(te.ExprTypeError, match=r"'X' is not iterable.*pass \[X\]"):
        list(X)

"""texpr_ad.torch ops as first-class PyTorch ops (issue #27): only the gradients asked for,
scalars as arguments, named schemas, double backward, vmap, per-call overhead."""
import itertools
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import texpr_ad as ta  # noqa: E402
import texpr_ad.torch as tt  # noqa: E402
from texpr_ad import te  # noqa: E402

_ids = itertools.count()


def _name(base: str) -> str:
    """torch.library ops cannot be redefined: one fresh name per op made here."""
    return f"first_class_{base}_{next(_ids)}"


def _rms_scale(x, g):
    n, d = x.shape
    j = te.reduce_axis((0, d), name="j")
    ms = te.compute((n,), lambda i: te.sum(x[i, j] * x[i, j], axis=j) / float(d.value), name="ms")
    return te.compute((n, d), lambda i, c: x[i, c] * g[c] * te.rsqrt(ms[i] + 1e-6), name="y")


def _rms_ref(x, g):
    return x * g * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


def _scale_shift(x, w, s, b):
    """x * w * s + b with s a scalar argument used directly, b one read as b[()]."""
    return te.compute(x.shape, lambda i, j: x[i, j] * w[j] * s + b[()], name="y")


def _adjoints(op):
    """{wrt positions: names of the derived adjoints} of every pullback the op has made."""
    return {k[2]: [a.name for a in p.adjoints if a is not None]
            for k, p in op.core._pullbacks.items()}


# -- A: only the gradients asked for ------------------------------------------------------------

def test_vjp_wrt_derives_and_builds_only_the_gradients_asked_for():
    X = te.placeholder((3, 4), "float64", name="X")
    W = te.placeholder((4,), "float64", name="W")
    Y = te.compute((3, 4), lambda i, j: te.tanh(X[i, j] * W[j]), name="Y")
    fwd, bwd = ta.vjp([Y], [X, W], wrt=[X])
    assert [a is not None for a in fwd.pullback.adjoints] == [True, False]
    x, w = np.linspace(-1, 1, 12).reshape(3, 4), np.array([0.5, 1.0, 2.0, -1.0])
    (y,), res = fwd(x, w)
    dx, dw = bwd(res, np.ones_like(y))
    assert dw is None
    np.testing.assert_allclose(dx, (1 - np.tanh(x * w) ** 2) * w)
    with pytest.raises(ta.GradientError, match=r"vjp: wrt= names 'Y', which is not one of the "):
        ta.vjp([Y], [X, W], wrt=[Y])


def test_custom_op_vjp_wrt_is_cached_per_subset():
    op = ta.custom_op(_rms_scale, name="rms")
    x, g = np.random.default_rng(0).standard_normal((3, 4)), np.ones(4)
    gx_all, gg_all = op.vjp(np.ones((3, 4)), x, g)
    gx, gg = op.vjp(np.ones((3, 4)), x, g, wrt=[0])
    assert gg is None
    np.testing.assert_allclose(gx, gx_all)
    assert op.pullback([((3, 4), "float64"), ((4,), "float64")], save="none", wrt=[0]) is \
        op.pullback([((3, 4), "float64"), ((4,), "float64")], save="none", wrt=(0, 0))


def test_torch_op_derives_only_the_gradients_that_autograd_will_ask_for():
    """Before: the backward derived, built and computed dg although g did not require grad."""
    op = tt.custom_op(_rms_scale, name=_name("rms_needs"))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, dtype=torch.float64)
    op(x, g).sum().backward()
    assert _adjoints(op) == {(0,): ["dx"]}
    torch.testing.assert_close(x.grad, torch.autograd.grad(_rms_ref(x, g).sum(), x)[0])
    with torch.no_grad():  # no gradient: no residuals, no adjoint
        y = op(x, g)
    assert not y.requires_grad and _adjoints(op)[()] == []
    g.requires_grad_()
    (gx, gg) = torch.autograd.grad(op(x, g).sum(), [x, g])
    rx, rg = torch.autograd.grad(_rms_ref(x, g).sum(), [x, g])
    torch.testing.assert_close((gx, gg), (rx, rg))
    assert sorted(_adjoints(op)[(0, 1)]) == ["dg", "dx"]


def test_torch_backward_returns_none_for_inputs_not_requiring_grad():
    op = tt.custom_op(_rms_scale, name=_name("rms_none"))
    x = torch.randn(3, 4, dtype=torch.float64)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    op(x, g).sum().backward()
    assert x.grad is None and g.grad is not None
    assert _adjoints(op) == {(1,): ["dg"]}


# -- B: scalars as arguments, named schemas -----------------------------------------------------

def test_te_zero_dim_tensor_is_a_value_in_expressions():
    """Before: `x[i] * s` with s a 0-dim te tensor raised AttributeError ('item')."""
    x = te.placeholder((3,), "float64", name="x")
    s = te.placeholder((), "float64", name="s")
    y = te.compute((3,), lambda i: x[i] * s + 2.0 * s - s ** 2 + te.exp(s), name="y")
    got, = te.evaluate([y], {x: np.arange(3.0), s: np.array(0.5)})
    np.testing.assert_allclose(got, np.arange(3.0) * 0.5 + 1.0 - 0.25 + np.exp(0.5))
    with pytest.raises(te.ExprTypeError, match=r"cannot use tensor 'x' of shape \(3,\) as a "
                                               r"value in a te expression; only 0-dim tensors"):
        te.compute((3,), lambda i: x * 2.0)


def test_python_numbers_and_zero_dim_tensors_are_runtime_scalar_arguments():
    """Before: OpArgumentError for a Python float (and each value needed its own op name)."""
    op = tt.custom_op(_scale_shift, name=_name("scale_shift"))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64)
    for s, b in [(0.5, 1.0), (2.0, -3.0), (3, True)]:
        torch.testing.assert_close(op(x, w, s, b), x * w * s + float(b))
    # one signature for both float values, one for (int, bool): no kernel per value
    assert {tuple(d for _, d in k[0][2:]) for k in op.core._pullbacks} == {("<f8", "<f8"),
                                                                           ("<i8", "|b1")}
    y32 = op(x.detach().float(), w.float(), 0.5, 1.0)
    assert y32.dtype == torch.float32  # a Python float takes the tensors' float dtype
    s = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x, w.requires_grad_(), s, b))
    gx, = torch.autograd.grad(op(x, w, 0.5, 1.0).sum(), [x])  # a number gets no gradient
    torch.testing.assert_close(gx, (w * 0.5).expand(3, 4))


def test_schema_names_the_te_function_parameters():
    op = tt.custom_op(_scale_shift, name=_name("named"))
    assert str(op.forward_op._opoverload._schema).endswith(
        "(Tensor x, Tensor w, Tensor s, Tensor b, bool[] wrt) -> Tensor[]")
    star = tt.custom_op(lambda *xs: te.compute(xs[0].shape, lambda i: xs[0][i] + xs[1][i],
                                               name="s"), name=_name("star"))
    assert "(Tensor[] xs, bool[] wrt)" in str(star.forward_op._opoverload._schema)
    torch.testing.assert_close(star(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))


def test_other_arguments_are_an_error_naming_the_argument():
    op = tt.custom_op(_scale_shift, name=_name("bad_arg"))
    with pytest.raises(ta.OpArgumentError, match=r"argument 2 \('s'\) is of type list, not a torch "
                                                 r"tensor or Python number; convert it"):
        op(torch.ones(3, 4), torch.ones(4), [0.5], 1.0)


def test_scalars_under_torch_compile_fullgraph_and_opcheck():
    op = tt.custom_op(_scale_shift, name=_name("compiled"))
    f = torch.compile(lambda x, w, s: op(x, w, s, 0.25).sum(), fullgraph=True, backend="aot_eager")
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    s = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    f(x, w, s).backward()
    want = torch.autograd.grad((x * w * s + 0.25).sum(), [x, w, s])
    torch.testing.assert_close((x.grad, w.grad, s.grad), want)
    b = torch.tensor(0.25, dtype=torch.float64)
    wrt = [True, True, True, False]
    torch.library.opcheck(op.forward_op, (x, w, s, b, wrt))  # every check, dynamic shapes too
    ys = [y.detach() for y in op.forward_op(x.detach(), w.detach(), s.detach(), b, wrt)]
    heads = [torch.ones(3, 4, dtype=torch.float64)]
    torch.library.opcheck(op.vjp_op, (heads, [x, w, s, b], ys, wrt))


# -- C: double backward, derived ----------------------------------------------------------------

def _softmax(x):
    n, d = x.shape
    j, k = te.reduce_axis((0, d), name="j"), te.reduce_axis((0, d), name="k")
    m = te.compute((n,), lambda i: te.max(x[i, j], axis=j), name="m")
    e = te.compute((n, d), lambda i, c: te.exp(x[i, c] - m[i]), name="e")
    s = te.compute((n,), lambda i: te.sum(e[i, k], axis=k), name="s")
    return te.compute((n, d), lambda i, c: e[i, c] / s[i], name="p")


def _gather_square(x, idx):
    return te.compute(idx.shape, lambda i: x[idx[i]] * x[idx[i]], name="g")


def test_gradgradcheck_on_a_reduction_a_softmax_and_a_gather():
    """Before: RuntimeError 'no autograd formula was registered' for texpr_ad::<name>_vjp."""
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(tt.custom_op(_rms_scale, name=_name("gg_rms")), (x, g))
    assert torch.autograd.gradgradcheck(tt.custom_op(_softmax, name=_name("gg_softmax")), (x,))
    op = tt.custom_op(_gather_square, name=_name("gg_gather"))
    idx = torch.tensor([4, 0, 4, 2])
    v = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda v: op(v, idx), (v,))


def test_gradient_penalty_with_create_graph_matches_pytorch():
    op = tt.custom_op(_rms_scale, name=_name("penalty"))
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    got = []
    for f in (op, _rms_ref):
        gx, = torch.autograd.grad((f(x, g) ** 2).sum(), [x], create_graph=True)
        got.append(torch.autograd.grad((gx ** 2).sum(), [x, g]))
    torch.testing.assert_close(got[0], got[1])


def test_third_derivative_through_the_derived_ops():
    cube = tt.custom_op(lambda x: te.compute(x.shape, lambda i: x[i] ** 3, name="c"),
                        name=_name("cube"))
    x = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    g1, = torch.autograd.grad(cube(x).sum(), x, create_graph=True)
    g2, = torch.autograd.grad(g1.sum(), x, create_graph=True)
    g3, = torch.autograd.grad(g2.sum(), x)
    torch.testing.assert_close((g1, g2, g3), (3 * x ** 2, 6 * x, torch.full_like(x, 6.0)))


# -- D: vmap, derived ---------------------------------------------------------------------------

def _count_calls(op, counts: dict, key: str):
    """Wrap op._forward (the kernels' path) to count its calls."""
    real = op._forward

    def counted(*a):
        counts[key] = counts.get(key, 0) + 1
        return real(*a)
    op._forward = counted


def test_vmap_runs_one_batched_kernel_equal_to_a_python_loop():
    """Before: RuntimeError 'Batching rule not implemented for texpr_ad::<name>'."""
    op = tt.custom_op(_rms_scale, name=_name("vmap"))
    X = torch.randn(5, 3, 4, dtype=torch.float64)
    g, G = torch.randn(4, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
    loop = torch.stack([op(x, g) for x in X])
    counts: dict = {}
    _count_calls(op, counts, "unbatched")
    torch.testing.assert_close(torch.vmap(op, in_dims=(0, None))(X, g), loop)
    batched = op._vmapped[((True, False), (False, False))]
    assert counts == {} and batched.name.endswith("_vmap_b___")
    _count_calls(batched, counts, "batched")
    torch.testing.assert_close(torch.vmap(op, in_dims=(1, None))(X.transpose(0, 1), g), loop)
    assert counts == {"batched": 1}  # one kernel call for the batch, the dim moved first
    torch.testing.assert_close(torch.vmap(op)(X, G), torch.stack([op(x, w) for x, w in zip(X, G)]))
    torch.testing.assert_close(torch.vmap(op, in_dims=(0, None), out_dims=1)(X, g),
                               loop.transpose(0, 1))


def test_vmap_with_gradients_outside_and_batched_cotangents():
    op = tt.custom_op(_rms_scale, name=_name("vmap_grad"))
    X = torch.randn(5, 3, 4, dtype=torch.float64)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    Xv, Xl = X.clone().requires_grad_(), X.clone().requires_grad_()
    (torch.vmap(op, in_dims=(0, None))(Xv, g) ** 2).sum().backward()
    gv = g.grad.clone()
    g.grad = None
    sum((op(x, g) ** 2).sum() for x in Xl).backward()
    torch.testing.assert_close((Xv.grad, gv), (Xl.grad, g.grad))
    x = X[0].clone().requires_grad_()
    y = op(x, g)
    V = torch.randn(5, 3, 4, dtype=torch.float64)  # the backward op under vmap
    got = torch.func.vmap(lambda v: torch.autograd.grad(y, [x, g], v, retain_graph=True))(V)
    want = [torch.autograd.grad(y, [x, g], v, retain_graph=True) for v in V]
    torch.testing.assert_close(got, tuple(torch.stack(w) for w in zip(*want)))


def test_vmap_of_an_op_with_star_args_and_an_unbatched_output():
    def two(*xs):
        return [te.compute(xs[0].shape, lambda i: xs[0][i] * xs[1][i], name="p"),
                te.compute(xs[1].shape, lambda i: xs[1][i] * 2.0, name="w2")]
    op = tt.custom_op(two, name=_name("vmap_star"))
    X, w = torch.randn(4, 3), torch.randn(3)
    p, w2 = torch.vmap(op, in_dims=(0, None))(X, w)
    torch.testing.assert_close(p, X * w)
    torch.testing.assert_close(w2, (2 * w).expand(4, 3))  # an output not read from the batch


# -- E: per-call overhead (the fast path keeps what users and tools observe) ---------------------

def test_fast_path_skips_the_dispatcher_only_when_nothing_would_see_the_op():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))
    op = tt.custom_op(_rms_scale, name=_name("fast"))
    x, g = torch.randn(3, 4), torch.randn(4)
    with torch.no_grad():
        want = op(x, g)  # the fast path: no dispatch
        with Seen() as seen:
            torch.testing.assert_close(op(x, g), want)
    name = op.qualname.replace("::", ".")
    assert f"{name}.default" in seen.ops, seen.ops
    x.requires_grad_()
    with Seen() as seen:
        op(x, g).sum().backward()
    assert f"{name}_vjp.default" in seen.ops, seen.ops
    with torch.profiler.profile() as prof:  # a profiler sees the ops too
        op(x, g).sum().backward()
    names = {e.name for e in prof.events()}
    assert {op.qualname, f"{op.qualname}_vjp"} <= names, sorted(names)


def test_kernel_argument_memo_still_checks_new_shapes():
    A = te.placeholder((3,), "float64", name="A")
    k = ta.build([te.compute((3,), lambda i: A[i] * 2.0, name="B")], [A])
    np.testing.assert_allclose(k(np.ones(3))[0], 2.0)
    np.testing.assert_allclose(k(np.ones(3))[0], 2.0)  # memoized shape: no re-check
    with pytest.raises(ta.TexprError, match=r"input 'A' must have shape \(3,\)"):
        k(np.ones(4))
    with pytest.raises(ta.TexprError, match=r"input 'A' must have dtype float64"):
        k(np.ones(3, np.float32))


def test_warm_plans_still_check_and_match_torch_autograd():
    """The per-signature plans (bound kernels, the forward's arrays kept for the backward) on
    later calls: gradients still PyTorch's, through a non-contiguous input, a hook rescaling the
    cotangent and create_graph; new shapes and dtypes still checked; a saved tensor modified in
    place before the backward still refused."""
    op = tt.custom_op(_rms_scale, name=_name("warm"))
    base = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, dtype=torch.float64, requires_grad=True)
    x = base.detach().t().contiguous().requires_grad_()
    for xt, leaf in [(x, x)] * 3 + [(base.t(), base)] * 2:  # contiguous, then a transpose
        got, want = (torch.autograd.grad((f(xt, g) ** 2).sum(), [leaf, g]) for f in (op, _rms_ref))
        torch.testing.assert_close(got, want)
    y = op(x, g)
    y.register_hook(lambda d: 2 * d)
    got = torch.autograd.grad(y.sum(), [x, g], retain_graph=True)
    torch.testing.assert_close(got, torch.autograd.grad(2 * _rms_ref(x, g).sum(), [x, g]))
    torch.testing.assert_close(torch.autograd.grad(y.sum(), [x, g]), got)  # a second backward
    gx, = torch.autograd.grad((op(x, g) ** 2).sum(), [x], create_graph=True)
    rx, = torch.autograd.grad((_rms_ref(x, g) ** 2).sum(), [x], create_graph=True)
    torch.testing.assert_close(torch.autograd.grad((gx ** 2).sum(), [x, g]),
                               torch.autograd.grad((rx ** 2).sum(), [x, g]))
    with pytest.raises(ta.TexprError, match=r"'g'.*\(3,\)"):  # too short for x's rows of 4
        op(x, torch.randn(3, dtype=torch.float64))
    with pytest.raises(ta.OpArgumentError, match=r"argument 0 \('x'\) has dtype float16"):
        op(x.detach().half(), g)
    y = op(x, g)
    with torch.no_grad():
        g.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_bound_kernel_is_checked_once_then_computes_as_the_kernel():
    A = te.placeholder((3,), "float64", name="A")
    k = ta.build([te.compute((3,), lambda i: A[i] * 2.0, name="B")], [A])
    with pytest.raises(ta.TexprError, match=r"input 'A' must have shape \(3,\)"):
        k.bind([np.ones(4)])
    run = k.bind([np.ones(3)])
    np.testing.assert_array_equal(run(np.arange(3.0))[0], [0.0, 2.0, 4.0])
    s = te.placeholder((), "float64", name="s")
    k0 = ta.build([te.compute((3,), lambda i: A[i] * s[()], name="C")], [A, s])
    assert k0.bind([np.ones(3), np.array(2.0)]) is k0  # a 0-dim input: the checked kernel


def test_bench_overhead_section_prints_its_rows(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from bench import overhead
    got = overhead.run(repeat=1)
    assert set(got) == {"plain torch", "empty custom_op", "texpr_ad"}
    out = capsys.readouterr().out
    assert "per-call overhead: 1000 float32 elements" in out and "texpr_ad - empty" in out


def test_jax_op_takes_python_numbers_as_scalar_arguments():
    """Before: OpArgumentError for a Python float at a JAX op too."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import texpr_ad.jax as tj
    op = tj.custom_op(_scale_shift, name="scale_shift")
    x, w = jnp.ones((2, 3), jnp.float32), jnp.arange(3.0, dtype=jnp.float32)
    np.testing.assert_allclose(op(x, w, 0.5, 1.0), np.ones((2, 3)) * np.arange(3.0) * 0.5 + 1.0)
    g = jax.grad(lambda s: op(x, w, s, 1.0).sum())(jnp.float32(2.0))
    np.testing.assert_allclose(g, 2 * np.arange(3.0).sum())


def test_add_batch_axis_maps_data_dependent_reads_and_shares_unbatched_stages():
    from texpr_ad.te.dag import add_batch_axis
    x = te.placeholder((5,), "float64", name="x")
    idx = te.placeholder((4,), "int64", name="idx")
    w2 = te.compute((5,), lambda i: x[i] * 2.0, name="w2")  # reads no batched tensor: shared
    g = te.compute((4,), lambda i: w2[idx[i]] + x[idx[i]], name="g")
    ib = te.placeholder((3, 4), "int64", name="ib")
    gb, w2b = add_batch_axis([g, w2], {idx: ib})
    assert w2b is w2 and tuple(int(s.value) for s in gb.shape) == (3, 4)
    xs, ids = np.arange(5.0), np.array([[4, 0, 1, 2], [3, 3, 0, 1], [2, 2, 2, 2]])
    got, = te.evaluate([gb], {x: xs, ib: ids})
    np.testing.assert_allclose(got, 3 * xs[ids])
    op = tt.custom_op(_gather_square, name=_name("vmap_gather"))
    v = torch.randn(5, dtype=torch.float64)
    I = torch.from_numpy(ids)
    torch.testing.assert_close(torch.vmap(op, in_dims=(None, 0))(v, I), v[I] ** 2)

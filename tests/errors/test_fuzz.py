"""Fuzz: random malformed definitions and random bad arrays at the public API.

Whatever goes in, only texpr_ad's own exceptions (subclasses of `texpr_ad.TexprError`) may come
out: never another exception type, a Numba trace, a RecursionError, a SyntaxError or a crash.
A definition the library accepts is carried on through `ta.grad`, `ta.jvp` and `te.evaluate`.

Each family of mistakes is a table of small builders (`MISTAKES[family]`); Hypothesis
(derandomized, no database) draws a builder and its parameters.  Kernel calls, which could crash
the process on a missing bounds check, run in a child process (`python test_fuzz.py <family>`)
whose exit status the test checks; a few kernels are compiled once there and called many times.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import texpr_ad as ta
from texpr_ad import te

FUZZ = settings(deadline=None, derandomize=True, database=None, max_examples=60,
                suppress_health_check=list(HealthCheck))
Draw = st.DataObject


def only_texpr_errors(fn: Callable[[], Any], what: str) -> Any:
    """Run `fn`; a TexprError is a fine answer, anything else fails the test (with `what`)."""
    try:
        return fn()
    except ta.TexprError:
        return None
    except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
        raise AssertionError(f"{what}: {type(e).__module__}.{type(e).__name__}: {str(e)[:300]}") from e


def _ints(d: Draw, lo: int, hi: int) -> int:
    return d.draw(st.integers(lo, hi))


def _pick(d: Draw, xs: list[Any]) -> Any:
    return d.draw(st.sampled_from(xs))


def _inputs() -> dict[str, te.Tensor]:
    return {"A": te.placeholder((3, 4), "float64", name="A"), "B": te.placeholder((4,), "float64", name="B"),
            "idx": te.placeholder((3,), "int32", name="idx")}


def follow_through(Y: Any, ins: list[te.Tensor], d: Draw) -> None:
    """An accepted definition must also differentiate and evaluate with texpr_ad errors only."""
    outs = list(Y) if isinstance(Y, (list, tuple)) else [Y]
    for o in outs:
        assert isinstance(o, te.Tensor), f"te.compute returned {type(o).__name__}"
        note(str(o))
    Y0 = outs[0]
    floats = [x for x in ins if x.dtype.startswith("float")]
    if Y0.dtype.startswith("float"):
        h = te.placeholder(Y0.shape, Y0.dtype, name="h")
        only_texpr_errors(lambda: ta.grad(Y0, ins, head=h), "ta.grad")
        tans = [te.placeholder(x.shape, x.dtype, name=f"t{x.name}") for x in floats]
        only_texpr_errors(lambda: ta.jvp(Y0, floats, tans), "ta.jvp")
    rng = np.random.default_rng(_ints(d, 0, 99))
    feed: dict[te.Tensor, np.ndarray] = {}
    for x in ins:
        shape = tuple(int(s) for s in x.shape)
        feed[x] = (rng.integers(-5, 8, shape).astype(x.dtype) if not x.dtype.startswith("float")
                   else rng.standard_normal(shape).astype(x.dtype))
    only_texpr_errors(lambda: te.evaluate(outs, feed), "te.evaluate")


# -- malformed definitions: each builder makes one mistake and returns (Y, inputs) ---------------

def _k(d: Draw, hi: int = 4) -> Any:
    return te.reduce_axis((0, hi), name="k")


def axis_is_data_axis(d: Draw, I: dict) -> Any:
    A = I["A"]
    return te.compute((3,), lambda i: te.sum(A[i, 0], axis=i), name="Y")


def axis_not_an_axis(d: Draw, I: dict) -> Any:
    A, bad = I["A"], _pick(d, [[], "k", 3, 1.5, None, [None], object()])
    return te.compute((3,), lambda i: te.sum(A[i, 0], axis=bad), name="Y")


def axis_listed_twice(d: Draw, I: dict) -> Any:
    A, k = I["A"], _k(d)
    return te.compute((3,), lambda i: te.sum(A[i, k], axis=[k, k]), name="Y")


def reduce_axis_missing_from_axis(d: Draw, I: dict) -> Any:
    A, k, l = I["A"], _k(d), te.reduce_axis((0, 3), name="l")
    return te.compute((3,), lambda i: te.sum(A[i, k] * A[l, k], axis=k), name="Y")


def reduce_axis_outside_reduction(d: Draw, I: dict) -> Any:
    A, k = I["A"], _k(d)
    outside = _pick(d, ["plain", "plus", "index"])
    if outside == "plain":
        return te.compute((3,), lambda i: A[i, k], name="Y")
    if outside == "plus":
        return te.compute((3,), lambda i: te.sum(A[i, k], axis=k) + A[i, k], name="Y")
    return te.compute((3,), lambda i: te.sum(A[i, k], axis=k) * k.astype("float64"), name="Y")


def reduce_axis_bad_range(d: Draw, I: dict) -> Any:
    A = I["A"]
    rng = _pick(d, [(3, 1), (0, 0), (0, -2), (0.5, 2), ("a", 2), (0,), 5, None, (0, 10**12)])
    k = te.reduce_axis(rng, name="k")
    return te.compute((3,), lambda i: te.sum(A[i, k % 4], axis=k), name="Y")


def where_not_a_condition(d: Draw, I: dict) -> Any:
    A, k = I["A"], _k(d)
    w = _pick(d, ["float", "str", "int"])
    return te.compute((3,), lambda i: te.sum(A[i, k], axis=k, where={"float": A[i, k], "str": "x",
                                                                      "int": k}[w]), name="Y")


def init_of_wrong_kind(d: Draw, I: dict) -> Any:
    A, k = I["A"], _k(d)
    init = _pick(d, ["str", (1.0, 2.0), None, "tensor"])
    init = A if init == "tensor" else init
    red = _pick(d, [te.sum, te.max, te.prod])
    return te.compute((3,), lambda i: red(A[i, k], axis=k, init=init), name="Y")


def wrong_lambda_arity(d: Draw, I: dict) -> Any:
    A = I["A"]
    f = _pick(d, [lambda: A[0, 0], lambda i, j, k: A[i, j], lambda *i: A[i[0], 0], lambda i, j=0: A[i, j]])
    return te.compute((3,), f, name="Y")


def non_expression_body(d: Draw, I: dict) -> Any:
    A = I["A"]
    body = _pick(d, [None, "x", object(), [None], np.ones(2), A, [], {"a": 1}, 1j, print])
    return te.compute((3,), lambda i: body, name="Y")


def wrong_index_count(d: Draw, I: dict) -> Any:
    A = I["A"]
    n = _ints(d, 0, 4)
    return te.compute((3,), lambda i: A[(i,) * n] if n else A[()], name="Y")


def float_index(d: Draw, I: dict) -> Any:
    A, B = I["A"], I["B"]
    kind = _pick(d, ["scaled", "literal", "tensor", "cast"])
    ix = {"scaled": lambda i: i * 0.5, "literal": lambda i: 1.5, "tensor": lambda i: B[i],
          "cast": lambda i: i.astype("float32")}[kind]
    return te.compute((3,), lambda i: A[ix(i), 0], name="Y")


def bad_extent(d: Draw, I: dict) -> Any:
    A = I["A"]
    shape = _pick(d, [(0,), (-1,), (2.5,), ("a",), None, 3, (3, None), ((3,),)])
    where = _pick(d, ["compute", "placeholder"])
    if where == "placeholder":
        P = te.placeholder(shape, "float64", name="P")
        return te.compute((1,), lambda i: P[0], name="Y")
    return te.compute(shape, lambda *i: A[0, 0], name="Y")


def bad_dtype(d: Draw, I: dict) -> Any:
    A = I["A"]
    kind = _pick(d, ["placeholder", "const", "astype", "bool op", "cond"])
    if kind == "placeholder":
        P = te.placeholder((3,), _pick(d, ["float99", "int", "", None, np.float64, "complex64"]), name="P")
        return te.compute((3,), lambda i: P[i], name="Y")
    if kind == "const":
        return te.compute((3,), lambda i: A[i, 0] + te.const(1, _pick(d, ["foo", "float128"])), name="Y")
    if kind == "astype":
        return te.compute((3,), lambda i: A[i, 0].astype(_pick(d, ["nope", "str", "object"])), name="Y")
    if kind == "bool op":
        return te.compute((3,), lambda i: te.if_then_else(A[i, 0] & A[i, 1], 1.0, 0.0), name="Y")
    return te.compute((3,), lambda i: te.if_then_else(A[i, 0], 1.0, 0.0), name="Y")


def mixed_operands(d: Draw, I: dict) -> Any:
    A, idx = I["A"], I["idx"]
    other = _pick(d, ["s", None, [1, 2], np.ones(3), idx, object()])
    return te.compute((3,), lambda i: A[i, 0] + other, name="Y")


def index_division_by_zero(d: Draw, I: dict) -> Any:
    A = I["A"]
    fn = _pick(d, [lambda i: i // 0, lambda i: te.floordiv(i, 0), lambda i: te.floormod(i, 0),
                   lambda i: i % 0])
    return te.compute((3,), lambda i: A[fn(i), 0], name="Y")


def static_out_of_bounds(d: Draw, I: dict) -> Any:
    A = I["A"]
    fn = _pick(d, [lambda i: i + 1, lambda i: i - 1, lambda i: i * 10**9, lambda i: 7 + i * 0,
                   lambda i: -i, lambda i: i * 2])
    return te.compute((3,), lambda i: A[fn(i), 0], name="Y")


def reduce_range_out_of_bounds(d: Draw, I: dict) -> Any:
    A = I["A"]
    k = te.reduce_axis((_ints(d, -2, 1), _ints(d, 4, 6)), name="k")
    return te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="Y")


def comm_reducer_misuse(d: Draw, I: dict) -> Any:
    A, k = I["A"], _k(d)
    kind = _pick(d, ["arity", "identity", "tuple len"])
    if kind == "arity":
        r = te.comm_reducer(lambda x: x, lambda t: te.const(0, t), name="bad")
        return te.compute((3,), lambda i: r(A[i, k], axis=k), name="Y")
    if kind == "identity":
        r = te.comm_reducer(lambda x, y: x + y, lambda t: "zero", name="bad")
        return te.compute((3,), lambda i: r(A[i, k], axis=k), name="Y")
    r = te.comm_reducer(lambda x, y: (x[0] + y[0],), lambda a, b: (te.const(0, a), te.const(0, b)), name="bad")
    return te.compute((3,), lambda i: r((A[i, k], A[i, k]), axis=k)[0], name="Y")


DEFINITIONS: dict[str, list[Callable[[Draw, dict], Any]]] = {
    "reduce axes": [axis_is_data_axis, axis_not_an_axis, axis_listed_twice, reduce_axis_missing_from_axis,
                    reduce_axis_outside_reduction, reduce_axis_bad_range, where_not_a_condition,
                    init_of_wrong_kind, comm_reducer_misuse],
    "bodies": [wrong_lambda_arity, non_expression_body, wrong_index_count, float_index, bad_extent,
               bad_dtype, mixed_operands],
    "bounds": [index_division_by_zero, static_out_of_bounds, reduce_range_out_of_bounds],
}


# Families that still let other exceptions out, each with the issue #13 class that fixes them; strict,
# so the mark must go when the fix lands.
KNOWN: dict[str, str] = {}  # none left: class 4 made definition mistakes TensorError / ExprTypeError


def _family(name: str, known: dict[str, str]) -> Any:
    return pytest.param(name, marks=pytest.mark.xfail(reason=known[name], strict=True)) if name in known else name


@pytest.mark.parametrize("family", [_family(f, KNOWN) for f in DEFINITIONS])
def test_malformed_definitions_raise_texpr_errors(family: str) -> None:
    @FUZZ
    @given(st.data())
    def run(d: Draw) -> None:
        I = _inputs()
        make = _pick(d, DEFINITIONS[family])
        note(make.__name__)
        Y = only_texpr_errors(lambda: make(d, I), f"{make.__name__}: definition")
        if Y is not None:
            follow_through(Y, list(I.values()), d)

    run()


# -- the API entry points called the wrong way ---------------------------------------------------

def _good() -> tuple[te.Tensor, te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((3, 4), "float64", name="A")
    W = te.placeholder((4, 2), "float64", name="W")
    k = te.reduce_axis((0, 4), name="k")
    Y = te.compute((3, 2), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k), name="Y")
    return A, W, Y, te.placeholder((3, 2), "float64", name="h")


NOT_TENSORS = [None, 1.0, "A", np.ones((3, 4)), [None], object()]


def grad_misuse(d: Draw) -> None:
    A, W, Y, h = _good()
    bad = _pick(d, NOT_TENSORS)
    call = _pick(d, [lambda: ta.grad(bad, [A]), lambda: ta.grad(Y, [A, bad], head=h),
                     lambda: ta.grad(Y, A, head=h), lambda: ta.grad(Y, [A], head=bad),
                     lambda: ta.grad(Y, [A], head=[h, h]), lambda: ta.grad([Y, Y], [A], head=[h]),
                     lambda: ta.grad(Y, [A], head=te.placeholder((2, 3), "float64", name="h2")),
                     lambda: ta.grad(Y, [A], head=te.placeholder((3, 2), "int32", name="h3"))])
    call()


def jvp_misuse(d: Draw) -> None:
    A, W, Y, _ = _good()
    tA = te.placeholder((3, 4), "float64", name="tA")
    bad = _pick(d, NOT_TENSORS)
    call = _pick(d, [lambda: ta.jvp(Y, [A, W], [tA]), lambda: ta.jvp(Y, [A], [tA, tA]),
                     lambda: ta.jvp(Y, [A], [bad]), lambda: ta.jvp(bad, [A], [tA]),
                     lambda: ta.jvp(Y, [bad], [tA]), lambda: ta.jvp(Y, A, tA),
                     lambda: ta.jvp(Y, [A], [te.placeholder((4, 3), "float64", name="t")]),
                     lambda: ta.jvp(Y, [A], [te.placeholder((3, 4), "float32", name="t")])])
    call()


def build_misuse(d: Draw) -> None:
    A, W, Y, _ = _good()
    bad = _pick(d, NOT_TENSORS)
    call = _pick(d, [lambda: ta.build([Y], [A]), lambda: ta.build([bad], [A, W]),
                     lambda: ta.build([Y], [A, W, bad]), lambda: ta.build([Y], [A, W], target="gpu"),
                     lambda: ta.build([Y], [A, W], target=None), lambda: ta.build(Y, [A, W, Y]),
                     lambda: ta.build([Y], [A, W], plan_overrides={"nope": {"parallel": False}}),
                     lambda: ta.build([Y], [A, W], plan_overrides={"Y": {"order": ["zz"]}}),
                     lambda: ta.build([Y], [A, W], plan_overrides="x")])
    call()


def custom_op_misuse(d: Draw) -> None:
    bad_fn = _pick(d, [None, 3, "f", lambda: None, lambda A: None, lambda A: [A, 1], lambda A: [],
                       lambda A, B: A])
    only_texpr_errors(lambda: ta.custom_op(bad_fn, name="bad")(np.ones(3)), "custom_op")


def evaluate_misuse(d: Draw) -> None:
    A, W, Y, _ = _good()
    call = _pick(d, [lambda: te.evaluate([Y], {A: np.ones((3, 4))}),
                     lambda: te.evaluate([Y], {A: np.ones((3, 5)), W: np.ones((4, 2))}),
                     lambda: te.evaluate([Y], {A: np.ones((3, 4), "float32"), W: np.ones((4, 2))}),
                     lambda: te.evaluate([Y], {A: "x", W: np.ones((4, 2))}),
                     lambda: te.evaluate([Y], {A: np.ones(12), W: np.ones((4, 2))}),
                     lambda: te.evaluate(Y, {A: np.ones((3, 4)), W: np.ones((4, 2))}),
                     lambda: te.evaluate([None], {})])
    call()


API = [grad_misuse, jvp_misuse, build_misuse, custom_op_misuse, evaluate_misuse]


@pytest.mark.parametrize("entry", API, ids=[f.__name__ for f in API])
def test_api_misuse_raises_texpr_errors(entry: Callable[[Draw], None]) -> None:
    @settings(FUZZ, max_examples=25)
    @given(st.data())
    def run(d: Draw) -> None:
        only_texpr_errors(lambda: entry(d), entry.__name__)

    run()


# -- bad arrays at compiled kernels (in a child process: a crash must not take pytest down) ------

def _kernels() -> dict[str, Any]:
    """A gather by index data (bounds checked at run time), its adjoint, and a custom op."""
    n = te.var("n")
    T = te.placeholder((5, 3), "float64", name="T")
    idx = te.placeholder((n,), "int32", name="idx")
    G = te.compute((n, 3), lambda i, j: T[idx[i], j] * 2.0, name="G")
    h = te.placeholder(G.shape, "float64", name="h")
    dT = ta.grad(G, [T], head=h)[0]
    k = te.reduce_axis((0, 4), name="k")
    mm = ta.custom_op(lambda A, W: te.compute((A.shape[0], W.shape[1]),
                                              lambda i, j: te.sum(A[i, k] * W[k, j], axis=k)), name="mm")
    return {"gather": ta.build([G], [T, idx]), "scatter": ta.build([dT], [T, idx, h]), "mm": mm}


ARRAY_KINDS = {"arrays": ["ok", "shape", "rank", "dtype", "nan", "object", "empty"],
               "index data": ["ok", "index data"]}


def _bad_array(d: Draw, shape: tuple[int, ...], dtype: str, family: str) -> Any:
    kind = _pick(d, ARRAY_KINDS[family])
    rng = np.random.default_rng(_ints(d, 0, 99))
    if kind == "shape":
        shape = tuple(max(s + _ints(d, -2, 2), 0) for s in shape)
    elif kind == "rank":
        shape = shape + (1,) if _ints(d, 0, 1) else shape[1:]
    elif kind == "dtype":
        dtype = _pick(d, ["float32", "int64", "bool", "complex128", "float64", "int32", "uint8"])
    elif kind == "object":
        return _pick(d, [None, "x", [[1, 2], [3]], object(), {"a": 1}])
    elif kind == "empty":
        shape = (0,) * len(shape)
    a = rng.uniform(0.0, 4.99, shape)  # in range as index data (int dtypes) too
    if kind == "nan":
        a.flat[: max(a.size // 2, 0)] = np.nan
    if kind == "index data":
        a = rng.choice([-1, 5, 2**31 - 1, -(2**31), 6, 0], size=shape)
    return a.astype(dtype) if np.isfinite(a).all() or dtype.startswith("float") else a


def bad_kernel_call(d: Draw, K: dict, family: str) -> None:
    which = _pick(d, list(K))
    n = _ints(d, 1, 4)
    shapes = {"gather": [((5, 3), "float64"), ((n,), "int32")],
              "scatter": [((5, 3), "float64"), ((n,), "int32"), ((n, 3), "float64")],
              "mm": [((n, 4), "float64"), ((4, 2), "float64")]}[which]
    args = [_bad_array(d, s, t, family) for s, t in shapes]
    extra = _pick(d, [0, 0, 0, 1, -1])
    args = args + [np.ones(3)] if extra > 0 else args[:extra] if extra < 0 else args
    note(f"{which}({', '.join(repr(a)[:80] for a in args)})")
    if which == "mm" and _ints(d, 0, 1):
        g = _bad_array(d, (n, 2), "float64", family)
        only_texpr_errors(lambda: K["mm"].vjp(g, *args), "mm.vjp")
    else:
        only_texpr_errors(lambda: K[which](*args), which)


def child_bad_arrays(family: str) -> None:
    K = _kernels()

    @settings(FUZZ, max_examples=120)
    @given(st.data())
    def run(d: Draw) -> None:
        bad_kernel_call(d, K, family)

    run()


KNOWN_ARRAYS: dict[str, str] = {}  # none left: class 1 turned kernel index checks into TexprErrors


@pytest.mark.parametrize("family", [_family(f, KNOWN_ARRAYS) for f in ARRAY_KINDS])
def test_bad_arrays_at_kernels_raise_texpr_errors(family: str) -> None:
    """Random bad arrays (shapes, ranks, dtypes, counts, NaN, non-arrays; out-of-range index data)
    at compiled kernels and a custom op, in a child process so a crash is a failure, not an abort."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, __file__, family], capture_output=True, text=True,
                         timeout=300, env=env)
    assert res.returncode == 0, (f"child exited with {res.returncode} (negative: killed by a signal)\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-6000:]}")


# -- bad arguments at the PyTorch and JAX ops (in a child process too) ----------------------------

def _frontend_defs() -> dict[str, Callable[..., Any]]:
    """A reduction, a gather by index data, and an integer output next to a float one."""
    def mm(A, W):
        k = te.reduce_axis((0, 4), name="k")
        return te.compute((A.shape[0], W.shape[1]), lambda i, j: te.sum(A[i, k] * W[k, j], axis=k),
                          name="mm")

    def gather(T, idx):
        return te.compute((idx.shape[0], 3), lambda i, j: T[idx[i], j] * 2.0, name="rows")

    def sign(x):
        return [te.compute(x.shape, lambda i: (x[i] > 0).astype("int32"), name="sign"),
                te.compute(x.shape, lambda i: x[i] * x[i], name="square")]
    return {"mm": mm, "gather": gather, "sign": sign}


def _frontend_args(which: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return {"mm": [rng.standard_normal((n, 4)), rng.standard_normal((4, 2))],
            "gather": [rng.standard_normal((5, 3)), rng.integers(0, 5, n)],
            "sign": [rng.standard_normal(n)]}[which]


FRONT_DTYPES = ["float32", "float64", "int32", "int64", "bool", "uint8", "float16", "bfloat16",
                "complex64"]
# Python numbers are arguments too (0-dim tensors: tests/frontends/test_torch_first_class.py)
NOT_ARRAYS = [None, "x", (1.0, 2.0), [1.0, 2.0], object(), {"a": 1}]
FRONT_KINDS = ["ok", "shape", "rank", "dtype", "not a tensor", "keyword", "count", "layout", "empty",
               "device", "index data", "grad"]


class Framework:
    """How one front end makes arguments, calls an op and differentiates it."""

    def __init__(self, name: str):
        self.name = name
        if name == "torch":
            import torch
            import texpr_ad.torch as front
            self.lib, self.front = torch, front
        else:
            import jax
            import texpr_ad.jax as front
            jax.config.update("jax_enable_x64", True)
            self.lib, self.front = jax, front
        self.ops = {k: front.custom_op(f, name=f"fuzz_{k}") for k, f in _frontend_defs().items()}

    def tensor(self, a: np.ndarray, dtype: str, kind: str, d: Draw) -> Any:
        if self.name == "torch":
            t = self.lib.from_numpy(np.ascontiguousarray(a)).to(getattr(self.lib, dtype))
            if kind == "layout" and t.dim() >= 1:  # same values, another layout
                return _pick(d, [lambda t: t.t().contiguous().t() if t.dim() == 2 else t[::1],
                                 lambda t: t.flip(0).flip(0), lambda t: self.lib.stack([t, t])[0],
                                 lambda t: t.unsqueeze(0).expand(2, *t.shape)[1]])(t)
            return t.to("meta") if kind == "device" else t
        jnp = self.lib.numpy
        if kind == "layout":  # NumPy arrays with Fortran or negative strides
            return np.asfortranarray(a.astype(dtype)) if a.ndim == 2 else a.astype(dtype)[::-1]
        return jnp.asarray(a, dtype=getattr(jnp, dtype))

    def call(self, op: Any, args: list[Any], kw: dict[str, Any]) -> list[np.ndarray] | None:
        outs = op(*args, **kw)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        if self.name == "torch" and any(o.device.type == "meta" for o in outs):
            return None  # all-meta inputs: shapes only (tests/frontends checks them)
        return [np.asarray(o.detach().numpy() if self.name == "torch" else o) for o in outs]

    def grads(self, op: Any, args: list[Any], float_in: list[int]) -> list[np.ndarray]:
        """Gradients of the sum of the float outputs w.r.t. the float arguments."""
        def loss(outs: Any) -> Any:
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            return sum(o.sum() for o in outs if np.dtype(str(o.dtype).removeprefix("torch.")).kind == "f")
        if self.name == "torch":
            wrt = [args[k].detach().requires_grad_() for k in float_in]
            full = list(args)
            for k, w in zip(float_in, wrt):
                full[k] = w
            return [g.numpy() for g in self.lib.autograd.grad(loss(op(*full)), wrt)]
        f = self.lib.grad(lambda *ws: loss(op(*[ws[float_in.index(k)] if k in float_in else a
                                                    for k, a in enumerate(args)])),
                          argnums=tuple(range(len(float_in))))
        return [np.asarray(g) for g in f(*[args[k] for k in float_in])]


def _reference(op: Any, arrays: list[np.ndarray], grads: bool
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The core's answer on the same values: te.evaluate of the definition (and of its adjoints)."""
    ins, outs = op.core.define([(a.shape, a.dtype) for a in arrays])
    feed = dict(zip(ins, arrays))
    ys = te.evaluate(outs, feed)
    if not grads:
        return ys, []
    p = op.core.pullback([(a.shape, a.dtype) for a in arrays])
    feed.update({h: np.ones(h_shape, h.dtype) for h, h_shape in
                 ((h, tuple(int(s) for s in h.shape)) for h in p.heads)})
    live = [a for a in p.adjoints if a is not None]
    got = iter(te.evaluate(live, feed) if live else [])
    return ys, [next(got) if a is not None else np.zeros_like(x) for a, x in zip(p.adjoints, arrays)
                if x.dtype.kind == "f"]


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert (got.shape, got.dtype) == (want.shape, want.dtype), (what, got.shape, got.dtype, want.shape,
                                                                 want.dtype)
    tol = 1e-4 if got.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def documented(fw: Framework, e: BaseException) -> bool:
    """A TexprError, or (JAX) a kernel's run-time error out of the callback, holding its message."""
    if isinstance(e, ta.TexprError):
        return True
    return fw.name == "jax" and type(e).__name__ == "JaxRuntimeError" and "KernelIndexError" in str(e)


def bad_frontend_call(d: Draw, fw: Framework, kind: str) -> None:
    which = _pick(d, list(fw.ops))
    op, n = fw.ops[which], _ints(d, 1, 3)
    arrays = _frontend_args(which, n)
    dtypes = [str(a.dtype) for a in arrays]
    hit = _ints(d, 0, len(arrays) - 1)  # the argument the mistake is made on
    if kind == "shape":
        shape = tuple(max(s + _ints(d, -2, 2), 0) for s in arrays[hit].shape)
        arrays[hit] = np.resize(arrays[hit], shape)
    elif kind == "rank":
        a = arrays[hit]
        arrays[hit] = a[..., None] if _ints(d, 0, 1) else a.reshape(-1)[:1].reshape(())  # 0-dim
    elif kind == "dtype":
        dtypes[hit] = _pick(d, FRONT_DTYPES)
    elif kind == "empty":
        arrays[hit] = np.zeros((0,) * arrays[hit].ndim, arrays[hit].dtype)
    elif kind == "index data" and which == "gather":
        arrays[1] = np.random.default_rng(n).choice([-1, 5, 2**31 - 1, 7], n)
    args: list[Any] = [fw.tensor(a, t, kind if k == hit else "ok", d)
                       for k, (a, t) in enumerate(zip(arrays, dtypes))]
    kw: dict[str, Any] = {}
    if kind == "not a tensor":
        args[hit] = _pick(d, NOT_ARRAYS + ([np.ones(3)] if fw.name == "torch" else []))
    elif kind == "keyword":
        kw = {_pick(d, ["W", "idx", "x", "nope"]): args.pop()}
    elif kind == "count":
        args = args[:-1] if _ints(d, 0, 1) else args + args[:1]
    note(f"{fw.name} {which} {kind}: " + ", ".join(repr(a)[:60] for a in args) + f" {list(kw)}")
    try:
        got = fw.call(op, args, kw)
    except Exception as e:  # noqa: BLE001 - the point: anything undocumented is a finding
        assert documented(fw, e), f"{which} {kind}: {type(e).__module__}.{type(e).__name__}: {e}"[:400]
        return
    if got is None:
        return
    values = [np.asarray(a.numpy() if fw.name == "torch" else a) for a in args]
    float_in = [k for k, v in enumerate(values) if v.dtype.kind == "f"]
    want, wgrads = _reference(op, values, kind in ("ok", "grad", "layout", "empty") and bool(float_in))
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        _close(g, w, f"{which} {kind}: output {k}")
    if wgrads:
        for k, (g, w) in enumerate(zip(fw.grads(op, args, float_in), wgrads, strict=True)):
            _close(g, w, f"{which} {kind}: gradient {k}")


def child_front_end(framework: str) -> None:
    fw = Framework(framework)
    for kind in FRONT_KINDS:  # each kind of mistake gets its share of examples
        @settings(FUZZ, max_examples=12)
        @given(st.data())
        def run(d: Draw) -> None:
            bad_frontend_call(d, fw, kind)

        run()


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_bad_arguments_at_front_ends_raise_texpr_errors(framework: str) -> None:
    """Random bad arguments at the PyTorch and JAX ops (types, keywords, counts, shapes, ranks,
    dtypes, layouts, 0-size, meta next to CPU, out-of-range index data): either the core's answer
    (te.evaluate of the definition, and of its adjoints) or a TexprError (JAX: a kernel's run-time
    error is JaxRuntimeError holding its message, as documented); in a child process."""
    pytest.importorskip(framework)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, __file__, "front end", framework], capture_output=True,
                         text=True, timeout=600, env=env)
    assert res.returncode == 0, (f"child exited with {res.returncode} (negative: killed by a signal)\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-6000:]}")


if __name__ == "__main__":
    if sys.argv[1] == "front end":
        child_front_end(sys.argv[2])
    else:
        child_bad_arrays(sys.argv[1])

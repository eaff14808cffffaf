"""What texpr_ad hands TVM for the ops `register_missing_gradients(override=True)` replaces.

- Indices reach TVM simplified (`to_tvm.tvm_index`): TVM's iter-map (region-bound) analysis
  aborts with "Divide by zero" on an uncancelled `2*(h // 2) + (h - 2*(h // 2))`.
- A reduce axis whose window depends on the output index runs over that window exactly (not
  over a loose interval bound of it): avg_pool2d's adjoint (stride 2, kernel 3) visits at most
  2 taps per dim, not 28.
- The overridden max_pool2d and avg_pool2d gradients go through `relax.transform.Gradient`,
  `tvm.compile` and the VM, checked against PyTorch's autograd in float64.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
torch = pytest.importorskip("torch")
import tvm.s_tir  # noqa: E402
from tvm import relax  # noqa: E402

from texpr_ad import te  # noqa: E402
from texpr_ad.relax_bridge import prepare_for_build, register_missing_gradients  # noqa: E402
from texpr_ad.relax_bridge import relax_ops  # noqa: E402
from texpr_ad.relax_bridge.tvm_expr import ExprTranslator  # noqa: E402
from texpr_ad.te.expr import IterVar, const  # noqa: E402
from texpr_ad.te.printer import expr_str  # noqa: E402
from tir_work import tir_work  # noqa: E402

SEED = 29
print("seed", SEED)


def test_read_index_reaches_tvm_cancelled() -> None:
    """The index of a stride-2 window read at its own solution, as the derivation builds it
    (int32 axis widened to Relax's int64): TVM gets `h`, which its iter-map analysis takes."""
    H = IterVar("h", const(0), const(10))
    h = H.astype("int64")
    q = h // const(2, "int64")
    idx = const(2, "int64") * q + (h - const(2, "int64") * q)
    assert "//" in expr_str(idx)  # built uncancelled
    X = te.placeholder((10,), "float64", name="X")
    hv = tvm.tirx.Var("h", "int64")
    got: list[list[object]] = []

    def read(_r: object, index: list[object]) -> object:
        got.append(index)
        return tvm.tirx.const(0.0, "float64")

    ExprTranslator({H: hv}, read, "stage")(X[idx])
    (index,) = got[0]
    res = tvm.sym.detect_iter_map([index], {hv: tvm.ir.Range(0, 10)})  # aborted: Divide by zero
    assert len(res.indices) == 1 and str(index) == "h"


@contextlib.contextmanager
def _overridden(*ops: str) -> Iterator[None]:
    """`register_missing_gradients(ops, override=True)`, TVM's gradients restored afterwards."""
    saved = {op: tvm.ir.Op.get(op).get_attr("FPrimalGradient") for op in ops}
    try:
        s = register_missing_gradients(list(ops), override=True)
        assert s.registered == list(ops), str(s)
        yield
    finally:
        for op, fn in saved.items():
            tvm.ir.Op.get(op).reset_attr("FPrimalGradient")
            tvm.ir.register_op_attr(op, "FPrimalGradient", fn, level=10)
            relax_ops._REGISTERED.pop(op, None)


def _pool_module(op: str, shape: tuple[int, ...], k: int, s: int, p: int) -> tvm.IRModule:
    """main(x, w) = sum(pool(x) * w), differentiated w.r.t. x."""
    x = relax.Var("x", relax.TensorType(shape, "float64"))
    call = relax.BlockBuilder().normalize(getattr(relax.op.nn, op)(x, k, s, p))
    w = relax.Var("w", call.ty)
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(getattr(relax.op.nn, op)(x, k, s, p))
            out = bb.emit_output(relax.op.sum(relax.op.multiply(y, w)))
        bb.emit_func_output(out)
    return relax.transform.Gradient("main", require_grads=[x])(bb.get())


def _torch_grad(op: str, x: np.ndarray, w: np.ndarray, k: int, s: int, p: int) -> np.ndarray:
    xt = torch.tensor(x, requires_grad=True)
    kw = {"count_include_pad": False} if op == "avg_pool2d" else {}  # Relax's default
    y = getattr(torch.nn.functional, op)(xt, k, s, p, **kw)
    (g,) = torch.autograd.grad((y * torch.tensor(w)).sum(), xt)
    return g.numpy()


def _grad_prim_func(mod: tvm.IRModule, op: str) -> tvm.tirx.PrimFunc:
    lowered = relax.transform.LegalizeOps()(prepare_for_build(mod))
    (f,) = [f for gv, f in lowered.functions.items()
            if isinstance(f, tvm.tirx.PrimFunc)
            and gv.name_hint == f"{op.replace('.', '_')}_grad"]
    return f


def _blocks(f: tvm.tirx.PrimFunc) -> list[tvm.s_tir.SBlock]:
    out: list[tvm.s_tir.SBlock] = []

    def visit(n: object) -> None:
        if isinstance(n, tvm.s_tir.SBlock):
            out.append(n)
        for a in ("body", "block", "then_case", "else_case"):
            c = getattr(n, a, None)
            if isinstance(c, tvm.tirx.Stmt):
                visit(c)
        for c in getattr(n, "seq", ()):
            visit(c)

    visit(f.body)
    return out


@pytest.mark.parametrize("op, shape, k, s, p", [
    ("max_pool2d", (2, 3, 8, 8), 2, 2, 0),   # windows side by side: a gather at h // 2
    ("max_pool2d", (2, 3, 8, 8), 2, 2, 1),   # ... reading the padded stage
    ("max_pool2d", (2, 3, 9, 9), 3, 2, 1),   # overlapping: the arg-max scatter
    ("avg_pool2d", (1, 2, 56, 56), 3, 2, 1),  # overlapping: a gather over dependent windows
    ("avg_pool2d", (2, 3, 8, 8), 2, 2, 1),
])
def test_overridden_pool_gradient_through_the_pass(op: str, shape: tuple[int, ...], k: int,
                                                   s: int, p: int) -> None:
    rng = np.random.default_rng(SEED)
    with _overridden(f"relax.nn.{op}"):
        mod = _pool_module(op, shape, k, s, p)
        vm = relax.VirtualMachine(tvm.compile(prepare_for_build(mod), target="llvm"), tvm.cpu())
        f = _grad_prim_func(mod, f"relax.nn.{op}")
    x = rng.standard_normal(shape)
    w = rng.standard_normal([int(d) for d in mod["main"].params[1].ty.shape.values])
    _, (g,) = vm["main_adjoint"](tvm.runtime.tensor(x), tvm.runtime.tensor(w))
    np.testing.assert_allclose(g.numpy(), _torch_grad(op, x, w, k, s, p), rtol=1e-12, atol=1e-12)
    for b in _blocks(f):  # every region passes TVM's region-bound analysis, indices cancelled
        dom = {iv.var: iv.dom for iv in b.iter_vars}
        for r in [*b.reads, *b.writes]:
            tvm.sym.estimate_region_lower_bound(list(r.region), dom, True)
            assert "% T.int64(2) + " not in str(r) and "// T.int64(2) * T.int64(2)" not in str(r)


def test_avg_pool2d_adjoint_visits_the_taps_of_its_window_only() -> None:
    """Stride 2, kernel 3 over 56 rows: a padded row lies in at most 2 windows per dim; the
    interval bound of `min(h // 2, 27) + 1 - max((h - 1) // 2, 0)` said 28 (14x the work)."""
    with _overridden("relax.nn.avg_pool2d"):
        f = _grad_prim_func(_pool_module("avg_pool2d", (1, 2, 56, 56), 3, 2, 1),
                            "relax.nn.avg_pool2d")
    taps = 2 * 58 * 58 * 2 * 2  # each padded row of each plane in at most 2 x 2 windows
    assert tir_work(f) <= 2 * taps  # (with the stages' own points); 28 x 28 taps: ~200x

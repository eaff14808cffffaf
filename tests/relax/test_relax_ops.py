"""Relax's own ops with derived gradients: register_missing_gradients through the real pass.

Every check goes through `relax.transform.Gradient` + `tvm.compile(llvm)` + the Relax VM and
compares with float64 central differences of the compiled forward (float32 for the norms and
resize, whose legalizations reject or round float64: tolerance 2e-2).  The full sweep over all
Relax tensor ops is the report's (`texpr-ad coverage --relax`); this is a representative subset.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from texpr_ad import TexprError  # noqa: E402
from texpr_ad.relax_bridge import register_missing_gradients, static_strided_slices  # noqa: E402
from texpr_ad.relax_bridge.relax_opcheck import check, compare_with_stock, \
    gradient_installed  # noqa: E402
from texpr_ad.relax_bridge.relax_ops import classify, derived_gradient, tensor_ops  # noqa: E402

DERIVED = ["relax.nn.gelu", "relax.nn.group_norm", "relax.nn.conv2d_transpose",
           "relax.nn.adaptive_avg_pool2d", "relax.image.resize2d", "relax.index_tensor",
           "relax.max", "relax.nn.batch_norm", "relax.meshgrid", "relax.stack", "relax.gather_nd",
           "relax.tril", "relax.std", "relax.nn.attention", "relax.vision.roi_align"]
NO_GRAD = ["relax.argmax", "relax.bitwise_and", "relax.isnan", "relax.quantize",
           "relax.grad.no_grad"]


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    s = register_missing_gradients(DERIVED + NO_GRAD + ["relax.dynamic_strided_slice"])
    assert s.rewritten == ["relax.dynamic_strided_slice"]  # and the op it becomes:
    assert "relax.strided_slice" in s.registered


def test_inventory_of_tvm_027() -> None:
    kinds: dict[str, list[str]] = {}
    for op in tensor_ops():
        kinds.setdefault(classify(op).kind, []).append(op)
    counts = {k: len(v) for k, v in kinds.items()}
    assert len(tensor_ops()) == 187
    # 87 pure-te float ops (the notes' 85 + 2 counted from the samples' dtypes) + 13 with
    # texpr_ad's own te (own_te.py; cumsum, the 14th, has a hand-written gradient); 18 no-grad
    # by output dtype + 10 declared (indices, counts, selections); 52 hand-written, as the notes
    # say; dynamic_strided_slice rewritten by static_strided_slices; left: the 4 collectives
    assert counts == {"stock": 52, "derivable": 100, "no-grad": 28, "native": 2, "rewritten": 1,
                      "not-derivable": 4}, counts
    assert "relax.nn.attention_var_len" in kinds["derivable"]
    assert "relax.sort" in kinds["derivable"] and "relax.argmax" in kinds["no-grad"]
    assert kinds["rewritten"] == ["relax.dynamic_strided_slice"]
    assert all(op.startswith("relax.ccl.") for op in kinds["not-derivable"])


def _slice_module(begin: object, end: object, strides: object, shape: tuple = (5, 6),
                  reduce: object = None) -> tvm.IRModule:
    """main(x[, begin]) -> dynamic_strided_slice(x, begin, end, strides) (or `reduce(bb, y)`);
    list arguments are int64 constants (`end` bound to a variable), the string "param" makes
    `begin` a parameter."""
    x = relax.Var("x", relax.TensorType(shape, "float64"))
    b = relax.Var("b", relax.TensorType((len(shape),), "int64")) if begin == "param" else None
    bb = relax.BlockBuilder()
    with bb.function("main", [x] + ([b] if b is not None else [])):
        with bb.dataflow():
            const = lambda v: relax.const(np.array(v, "int64"), "int64")  # noqa: E731
            e = bb.emit(const(end))
            y = bb.emit(relax.op.dynamic_strided_slice(
                x, b if b is not None else const(begin), e, const(strides)))
            out = bb.emit_output(reduce(bb, y) if reduce else y)
        bb.emit_func_output(out)
    return bb.get()


def _ops(mod: tvm.IRModule) -> list[str]:
    return [str(bd.value.op.name) for blk in mod["main"].body.blocks for bd in blk.bindings
            if isinstance(bd.value, relax.Call) and isinstance(bd.value.op, tvm.ir.Op)]


SLICES = [([1, 0], [5, 6], [2, 3]), ([-1, 0], [-6, 6], [-1, 1]), ([4, -1], [0, -7], [-2, -1]),
          ([-100, 2], [100, 100], [1, 2]), ([10, 5], [-10, -10], [-1, -2]),
          ([0, 0], [5, 6], [7, 7]), ([4, 5], [-6, -100], [-3, -4]), ([6, 6], [0, 0], [-1, -1]),
          ([2, 0], [2, 6], [1, 1]), ([-7, 7], [-9, 9], [1, -1]),
          ([0, -3], [2**63 - 1] * 2, [1, 1]), ([-1, 2**63 - 1], [-2**63 + 1, -2**63], [-1, -2])]
# (the last two: ONNX's int64 extremes for "to the end" and "to the start")
PAST_END = [([2, 3], [2, 1], [1, 1]), ([0, 0], [5, 6], [1, -1])]  # empty: begin past end


@pytest.mark.parametrize("begin, end, strides", SLICES + PAST_END)
def test_static_strided_slices_computes_tvms_dynamic_slice(begin, end, strides) -> None:
    """Same values as TVM's own dynamic_strided_slice (and NumPy's slicing), with the shape in
    the type.  An axis that is empty with begin past end becomes 0:0: TVM 0.27's dynamic op
    computes a negative size there (its strided_slice refuses the slice as written)."""
    mod = _slice_module(begin, end, strides)
    static = static_strided_slices(mod)
    assert _ops(mod) == ["relax.dynamic_strided_slice"] and _ops(static) == ["relax.strided_slice"]
    xv = np.arange(30.0).reshape(5, 6)
    want = xv[tuple(slice(*s) for s in zip(begin, end, strides, strict=True))]
    assert tuple(int(d) for d in static["main"].body.body.ty.shape) == want.shape

    def run(m: tvm.IRModule) -> np.ndarray:
        vm = relax.VirtualMachine(tvm.compile(m, target="llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(xv)).numpy()

    got = run(static)
    assert got.shape == want.shape and np.array_equal(got, want)
    if (begin, end, strides) not in PAST_END:
        assert np.array_equal(run(mod), got)


def test_static_strided_slices_with_a_symbolic_dim() -> None:
    """x: (n, 6): one compiled rewritten module computes the dynamic slice for every n."""
    n = tvm.tirx.Var("n", "int64")
    mod = _slice_module([-1, 1], [-100, 6], [-2, 2], shape=(n, 6))
    static = static_strided_slices(mod)
    assert _ops(static) == ["relax.strided_slice"]
    assert static["main"].body.body.ty.shape is not None  # (min(100, n + 1) // 2, 3)
    vms = [relax.VirtualMachine(tvm.compile(m, target="llvm"), tvm.cpu()) for m in (mod, static)]
    for rows in (1, 4, 7):
        xv = np.arange(rows * 6.0).reshape(rows, 6)
        dyn, got = (vm["main"](tvm.runtime.tensor(xv)).numpy() for vm in vms)
        assert np.array_equal(got, xv[::-2, 1::2]) and np.array_equal(dyn, got)


@pytest.mark.parametrize("key", ["relax.dynamic_strided_slice",
                                 "relax.dynamic_strided_slice[negative, clamped]"])
def test_constant_dynamic_slice_through_the_pass(key: str) -> None:
    """sample (constant begin/end/strides) -> static_strided_slices -> Gradient -> compile -> VM,
    against central differences (strided_slice's derived gradient, registered by the fixture)."""
    assert classify("relax.dynamic_strided_slice").kind == "rewritten"
    r = check(key)
    assert r.status == "ok", r.detail


@pytest.mark.parametrize("reduce, error", [
    (lambda bb, y: relax.op.sum(y), "Found null pointer node while traversing AST"),
    (lambda bb, y: relax.op.mean(y), "'NoneType' object is not iterable"),
    (lambda bb, y: relax.op.sum(bb.match_cast(y, relax.TensorType((2, 2), "float64"))),
     "Check failed: (var_binding) is false")])
def test_runtime_dynamic_slice_stays_and_the_pass_aborts(reduce, error) -> None:
    """begin computed at run time: static_strided_slices leaves the slice (its output shape
    depends on data), and the pass aborts in the gradient after it, before it asks for this
    op's, as the matrix's reason quotes (a match_cast aborts it wherever it stands)."""
    assert error in classify("relax.dynamic_strided_slice").reason
    mod = static_strided_slices(_slice_module("param", [5, 6], [2, 3], reduce=reduce))
    assert "relax.dynamic_strided_slice" in _ops(mod)
    with pytest.raises(Exception, match=re.escape(error)):
        relax.transform.Gradient("main", require_grads=mod["main"].params[0])(mod)


def test_summary() -> None:
    s = register_missing_gradients(["relax.nn.gelu", "relax.argmax", "relax.ccl.allreduce",
                                    "relax.exp", "relax.grad.no_grad"])
    assert s.registered == ["relax.nn.gelu"]
    assert s.no_grad == ["relax.argmax", "relax.grad.no_grad"]
    assert s.kept == ["relax.exp"]
    assert "packed function" in s.skipped["relax.ccl.allreduce"]
    assert "relax.ccl.allreduce" in str(s)


def test_unknown_op_is_an_error() -> None:
    with pytest.raises(TexprError, match="relax.nn.gleu"):
        register_missing_gradients(["relax.nn.gleu"])


@pytest.mark.parametrize("op", DERIVED)
def test_derived_gradient_through_the_pass(op: str) -> None:
    r = check(op)
    assert r.status == "ok", r.detail


@pytest.mark.parametrize("op", NO_GRAD)
def test_no_grad_ops_no_longer_abort(op: str) -> None:
    r = check(op)
    assert r.status == "ok", r.detail  # and the gradient through them is exactly zero


def test_stock_pass_aborts_without_registration() -> None:
    with gradient_installed("relax.argmax", None):
        r = check("relax.argmax")
    assert r.status == "fail" and "FPrimalGradient has not been registered" in r.detail


@pytest.mark.parametrize("op", ["relax.exp", "relax.nn.softmax", "relax.matmul",
                                "relax.nn.conv2d", "relax.nn.nll_loss"])
def test_override_agrees_with_tvm(op: str) -> None:
    stock, mine, diff = compare_with_stock(op)
    assert stock.status == "ok" and mine.status == "ok", (stock.detail, mine.detail)
    assert diff < 1e-9


@pytest.mark.parametrize("key", ["relax.where[broadcast]", "relax.take[3-d, last axis]",
                                 "relax.nn.conv2d[dilated]"])
def test_override_fixes_tvm_defects(key: str) -> None:
    stock, mine, _ = compare_with_stock(key)
    assert stock.status == "fail"  # TVM's hand-written gradient is wrong or aborts here
    assert mine.status == "ok", mine.detail


def _adjoint_module(op: str, fn: object) -> tvm.IRModule:
    from texpr_ad.relax_bridge.relax_opcheck import loss_module
    mod, wrt = loss_module(op)
    params = mod["main"].params
    with gradient_installed(op, fn):
        return relax.transform.Gradient("main", require_grads=[params[k] for k in wrt])(mod)


def test_adjoint_reads_the_forward_output() -> None:
    mod = _adjoint_module("relax.exp", derived_gradient)
    grads = [str(f) for gv, f in mod.functions.items() if str(gv.name_hint).endswith("_grad")]
    assert len(grads) == 1 and "lv_adjoint[" in grads[0]
    assert "T.exp(" not in grads[0], "the derived exp gradient recomputes exp, not orig_var"


def test_gradient_follows_each_call() -> None:
    """Two calls of one op with different shapes and attributes in one function."""
    x = relax.Var("x", relax.TensorType((1, 2, 7, 6), "float64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.adaptive_avg_pool2d(x, (3, 2)))
            b = bb.emit(relax.op.nn.adaptive_avg_pool2d(x, (2, 5)))
            la = bb.emit(relax.op.sum(relax.op.multiply(a, a)))
            lb = bb.emit(relax.op.sum(relax.op.multiply(b, b)))
            out = bb.emit_output(relax.op.add(la, lb))
        bb.emit_func_output(out)
    mod = relax.transform.Gradient("main")(bb.get())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 2, 7, 6))
    _, (g,) = vm["main_adjoint"](tvm.runtime.tensor(xv))
    t = rng.standard_normal(xv.shape)
    f = lambda v: float(vm["main"](tvm.runtime.tensor(v)).numpy())  # noqa: E731
    fd = (f(xv + 1e-6 * t) - f(xv - 1e-6 * t)) / 2e-6
    assert abs(float(np.vdot(g.numpy(), t)) - fd) <= 1e-6 * np.linalg.norm(g.numpy()) * \
        np.linalg.norm(t)

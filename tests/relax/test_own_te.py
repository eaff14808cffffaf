"""texpr_ad's own te for the Relax ops TVM 0.27 cannot hand over as te (relax_bridge/own_te.py).

Every gradient goes through the real `relax.transform.Gradient` + `tvm.compile(llvm)` + VM and
is compared with central differences of TVM's own compiled forward (`relax_opcheck.check`), so
an own te that computed something else than TVM's forward would fail too.  The variants cover
each path of a definition: exclusive scans, zeros in a product, descending sorts, topk values
only, median of everything, duplicate indices (the kept update), scatter-add, padding.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relax  # noqa: E402

from texpr_ad.relax_bridge import register_missing_gradients  # noqa: E402
from texpr_ad.relax_bridge import relax_ops  # noqa: E402
from texpr_ad.relax_bridge.own_te import LEGALIZE, NO_GRAD, OWN_TE  # noqa: E402
from texpr_ad.relax_bridge.relax_opcheck import check, compare_with_stock  # noqa: E402
from texpr_ad.relax_bridge.relax_ops import classify  # noqa: E402

DERIVED = sorted(set(OWN_TE) - {"relax.cumsum"})  # cumsum has TVM's gradient: see below
VARIANTS = ["relax.cumprod[exclusive, zeros]", "relax.sort[descending]",
            "relax.topk[values, smallest]", "relax.median[all]", "relax.median[keepdims]",
            "relax.scatter_elements[duplicates]", "relax.scatter_elements[add]",
            "relax.scatter_nd[duplicates]", "relax.scatter_nd[add, duplicates]",
            "relax.index_put[duplicates]", "relax.index_put[accumulate, broadcast]",
            "relax.grad.take_backward[flattened]", "relax.layout_transform[padded]",
            "relax.nn.attention_var_len[TopLeft, scale]",
            "relax.nn.attention_var_len[BottomRight, unused]"]
CHECKED_NO_GRAD = ["relax.argsort", "relax.bucketize", "relax.arange", "relax.size",
                   "relax.multinomial_from_uniform", "relax.vision.get_valid_counts",
                   "relax.vision.non_max_suppression"]


@pytest.fixture(scope="module", autouse=True)
def registered() -> None:
    s = register_missing_gradients(DERIVED + sorted(NO_GRAD))
    assert s.registered == DERIVED and s.no_grad == sorted(NO_GRAD) and not s.skipped, str(s)


def test_classified_as_handled() -> None:
    assert {classify(op).kind for op in DERIVED} == {"derivable"}
    assert {classify(op).kind for op in NO_GRAD} == {"no-grad"}
    c = classify("relax.cumsum")
    assert c.kind == "stock" and c.reason == relax_ops.own_te.REASON  # override=True replaces it


@pytest.mark.parametrize("op", DERIVED + VARIANTS)
def test_gradient_through_the_pass(op: str) -> None:
    r = check(op)
    assert r.status == "ok", r.detail


@pytest.mark.parametrize("op", CHECKED_NO_GRAD)
def test_no_grad_ops_no_longer_abort(op: str) -> None:
    r = check(op)
    assert r.status == "ok", r.detail  # and the gradient through them is exactly zero


@contextlib.contextmanager
def _stock_restored(op: str) -> Iterator[None]:
    """Undo `register_missing_gradients(override=True)` for `op` afterwards."""
    o = tvm.ir.Op.get(op)
    saved = o.get_attr("FPrimalGradient")
    try:
        yield
    finally:
        o.reset_attr("FPrimalGradient")
        tvm.ir.register_op_attr(op, "FPrimalGradient", saved, level=10)
        relax_ops._REGISTERED.pop(op, None)


def test_exclusive_cumsum_tvm_wrong_override_right() -> None:
    """TVM's cumsum gradient ignores exclusive=True (rel. error 0.32 on the sample); the own te's
    replaces it with override=True, and agrees with TVM's on the inclusive cumsum."""
    stock, mine, _ = compare_with_stock("relax.cumsum[exclusive]")
    assert stock.status == "fail" and mine.status == "ok", (stock.detail, mine.detail)
    stock, mine, diff = compare_with_stock("relax.cumsum[flattened]")
    assert stock.status == "ok" and mine.status == "ok" and diff < 1e-12
    with _stock_restored("relax.cumsum"):
        s = register_missing_gradients(["relax.cumsum"], override=True)
        assert s.registered == ["relax.cumsum"]
        r = check("relax.cumsum[exclusive]")
        assert r.status == "ok", r.detail


def _run(build, *arrays: np.ndarray) -> np.ndarray:
    """Compile `main(*params) = build(*params)` (params typed like `arrays`) and run it."""
    params = [relax.Var(f"p{k}", relax.TensorType(a.shape, str(a.dtype)))
              for k, a in enumerate(arrays)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_legalizations_compute_the_op() -> None:
    """TVM 0.27 cannot compile these at all; the own te's legalization computes them."""
    assert set(LEGALIZE) <= set(DERIVED)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 2, 3))
    got = _run(lambda v: relax.op.nn.pixel_shuffle(v, 2), x)
    want = x.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 6)  # torch's
    np.testing.assert_array_equal(got, want)
    a, b, c = rng.standard_normal((3, 2, 5))
    np.testing.assert_allclose(_run(relax.op.ewise_fma, a, b, c), a * b + c, rtol=1e-15)
    got = _run(lambda v: relax.op.wrap_param(v, "float32"), a)
    assert got.dtype == np.float32 and np.array_equal(got, a.astype(np.float32))


@pytest.mark.parametrize("causal", [None, "TopLeft", "BottomRight"])
def test_attention_var_len_is_attention_per_sequence(causal: str | None) -> None:
    """TVM 0.27 cannot legalize attention_var_len; the own te's legalization gives, for each
    packed sequence, what TVM's own relax.nn.attention gives on it alone (its causal masks
    included); a query in no sequence gets 0."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal(s) for s in ((1, 8, 2, 4), (1, 6, 2, 4), (1, 6, 2, 3)))
    sq, sk = np.array([0, 3, 7], "int32"), np.array([0, 4, 6], "int32")  # query 7: none
    got = _run(lambda *p: relax.op.nn.attention_var_len(*p[:4], p[5], p[4], p[6], scale=0.6,
                                                        causal_mask=causal),
               q, k, v, sq, sk, np.array(4, "int32"), np.array(4, "int32"))
    for b in range(2):
        want = _run(lambda *p: relax.op.nn.attention(*p, scale=0.6, causal_mask=causal),
                    q[:, sq[b]:sq[b + 1]], k[:, sk[b]:sk[b + 1]], v[:, sk[b]:sk[b + 1]])
        np.testing.assert_allclose(got[:, sq[b]:sq[b + 1]], want, rtol=1e-13, atol=1e-14)
    assert not got[:, 7].any()


def test_sort_values_gradient_goes_to_the_sorted_positions() -> None:
    """d sort(x) / dx scatters dy to where each value came from (ties: TVM's order)."""
    x = relax.Var("x", relax.TensorType((5,), "float64"))
    w = relax.Var("w", relax.TensorType((5,), "float64"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.sort(x, descending=True))
            out = bb.emit_output(relax.op.sum(relax.op.multiply(y, w)))
        bb.emit_func_output(out)
    mod = relax.transform.Gradient("main", require_grads=[x])(bb.get())
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    xv, wv = np.array([0.3, -1.0, 2.0, 0.5, -0.2]), np.arange(1.0, 6.0)
    _, (g,) = vm["main_adjoint"](tvm.runtime.tensor(xv), tvm.runtime.tensor(wv))
    want = np.empty(5)
    want[np.argsort(-xv)] = wv
    np.testing.assert_array_equal(g.numpy(), want)


def _gradient_error(build, *shapes) -> str:
    """The message the Gradient pass stops with for `build`'s call (ints: int64 params)."""
    params = [relax.Var(f"p{k}", relax.TensorType(s, "int64" if isinstance(s, list) else
                                                  "float32")) for k, s in enumerate(shapes)]
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(relax.op.sum(build(*params)))
        bb.emit_func_output(out)
    floats = [p for p, s in zip(params, shapes) if not isinstance(s, list)]
    with pytest.raises(Exception) as e:  # BridgeError, re-raised by TVM as a RuntimeError
        relax.transform.Gradient("main", require_grads=floats)(bb.get())
    return str(e.value)


def test_unsupported_calls_say_what_to_do() -> None:
    msg = _gradient_error(lambda x, k, u: relax.op.scatter_elements(x, k, u, 1, "mul"),
                          (3, 4), [3, 2], (3, 2))
    assert "relax.scatter_elements: reduction='mul'" in msg and "'update', 'add'" in msg
    msg = _gradient_error(lambda x, k, v: relax.op.index_put(x, relax.Tuple([k]), v),
                          (4,), [3], (1,))
    assert "values of shape (1,) give 1 value(s) for the 3 positions" in msg
    assert "broadcast values to (3,) first" in msg
    msg = _gradient_error(lambda q, k, v, s: relax.op.nn.attention_var_len(
        q, k, v, s, relax.const(2, "int32"), window_size=2), (1, 2, 1, 2), (1, 2, 1, 2),
        (1, 2, 1, 2), [2])
    assert "attention_var_len: window_size=2," in msg and "defines window_size=None" in msg



def test_pytorch_model_gradients_equal_torch() -> None:
    """sort, max(dim) (topk), cumprod, median, cumsum, scatter and index_put as PyTorch exports
    them: the gradients through the pass equal torch.autograd's."""
    torch = pytest.importorskip("torch")
    from tvm.relax.frontend.torch import from_exported_program
    from texpr_ad.relax_bridge import prepare_for_build

    class Model(torch.nn.Module):
        def forward(self, x, w, rows, cols):
            s = torch.sort(x * w, dim=1, descending=True).values
            m = torch.max(x, dim=0).values * torch.median(w, dim=1).values.sum()
            c = torch.cumprod(s, dim=1) + torch.cumsum(x, dim=0)
            y = torch.scatter(x, 1, cols.reshape(3, 1), w[:, 1:2])
            z = torch.index_put(w, (rows, cols), x[:, 0] * 2, accumulate=True)
            return (c * c).sum() + m.sum() + (y * z).sum()

    gen = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 5, generator=gen), torch.randn(3, 5, generator=gen)
    rows, cols = torch.tensor([2, 0, 2]), torch.tensor([4, 1, 4])
    mod = from_exported_program(torch.export.export(Model(), (x, w, rows, cols)),
                                unwrap_unit_return_tuple=True)
    register_missing_gradients()  # as a user would: every op TVM has no gradient for
    with _stock_restored("relax.take"):  # TVM's gradient fails to compile for x[:, 0]
        register_missing_gradients(["relax.take"], override=True)
        mod = relax.transform.Gradient("main", require_grads=list(mod["main"].params[:2]))(mod)
    vm = relax.VirtualMachine(tvm.compile(prepare_for_build(mod), target="llvm"), tvm.cpu())
    _, grads = vm["main_adjoint"](*[tvm.runtime.tensor(a.numpy()) for a in (x, w, rows, cols)])
    xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
    Model()(xt, wt, rows, cols).backward()
    for g, t in zip(grads, (xt.grad, wt.grad)):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-5, atol=1e-5)

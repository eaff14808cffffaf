"""Every differentiable registry operator through Relax `Gradient`, `tvm.compile(llvm)` and the VM.

`check_op` compares the VM's forward outputs with the registry's NumPy
reference, its gradients with float64 central differences of that reference
(and with texpr_ad's own adjoints evaluated by `te.evaluate`).  The heads are
seeded (`texpr_ad.relax_bridge.check.SEED`).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

pytest.importorskip("tvm")

from texpr_ad.ops.registry import select  # noqa: E402
from texpr_ad.relax_bridge import check_op  # noqa: E402
from texpr_ad.relax_bridge.check import SEED  # noqa: E402

print("seed", SEED)

# Operators that genuinely cannot go through TVM, with the reason (strict xfail).
XFAIL: dict[str, str] = {}

ENTRIES = [e for e in select("*") if e.has_compute]
DIFF = [e for e in ENTRIES if any(e.sample("float64").differentiable)]
NONDIFF = [e for e in ENTRIES if e not in DIFF]
RESULTS: dict[str, tuple[str, float | None, float]] = {}


def _param(e):
    marks = [pytest.mark.xfail(strict=True, reason=XFAIL[e.name])] if e.name in XFAIL else []
    return pytest.param(e, id=e.name, marks=marks)


@pytest.mark.parametrize("entry", [_param(e) for e in DIFF])
def test_operator_through_relax(entry) -> None:
    t0 = time.perf_counter()
    r = check_op(entry)
    RESULTS[entry.name] = (r.status, r.figure, time.perf_counter() - t0)
    assert r.status == "ok", r.detail
    assert r.figure is not None and r.figure <= max(entry.tol, 1e-6)
    assert set(r.extra) >= {"forward", "vs_texpr_ad", "vs_fd"}


def test_nondifferentiable_operators_are_reported_as_such() -> None:
    assert NONDIFF, "the registry has integer/bool-only operators"
    for e in NONDIFF:
        r = check_op(e)
        assert r.status == "nondiff" and e.name in r.detail, (e.name, r)


def test_operators_without_compute_are_skipped() -> None:
    for e in select("*"):
        if not e.has_compute:
            assert check_op(e).status == "skip"


def test_broken_reference_fails_naming_the_operator() -> None:
    """The forward comparison is live: a wrong reference makes check_op fail."""
    e = next(x for x in DIFF if x.name == "tanh")
    bad = dataclasses.replace(e, reference=lambda x: [np.tanh(x) * 1.001])
    r = check_op(bad)
    assert r.status == "fail" and "tanh" in r.detail and "forward" in r.detail, r


def test_wrong_bridge_gradient_is_caught(monkeypatch) -> None:
    """Both gradient comparisons are live: a scaled bridge adjoint fails both."""
    from texpr_ad import deriv, te

    real = deriv.grad

    def doubled(output, inputs, head=None):
        return [None if g is None else te.compute(g.shape, lambda *i, g=g: g[i] * 2.0, name="twice")
                for g in real(output, inputs, head=head)]

    monkeypatch.setattr(deriv, "grad", doubled)
    e = next(x for x in DIFF if x.name == "dense")
    r = check_op(dataclasses.replace(e, name="dense_doubled"))
    assert r.status == "fail", r
    assert "dense_doubled" in r.detail and "texpr_ad" in r.detail and "central" in r.detail


def test_summary() -> None:
    """Counts of the parametrized run above (printed with -s)."""
    ok = sorted(n for n, (s, _, _) in RESULTS.items() if s == "ok")
    bad = {n: s for n, (s, _, _) in RESULTS.items() if s != "ok"}
    print(f"\nrelax registry: {len(ok)}/{len(DIFF)} differentiable operators pass through TVM; "
          f"{len(NONDIFF)} non-differentiable; not ok: {bad}; "
          f"total {sum(t for _, _, t in RESULTS.values()):.1f} s")
    if RESULTS:
        worst = max(RESULTS.items(), key=lambda kv: kv[1][1] or 0.0)
        print(f"worst figure: {worst[0]} {worst[1][1]:.2e}")


def _multibox_module(no_grad):
    """multibox_transform_loc: cls_prob reaches the output only through an argmax-style reducer."""
    from tvm import relax

    from texpr_ad.relax_bridge import call_te_with_auto_grad
    from texpr_ad.relax_bridge.check import sample_operator

    e = next(x for x in DIFF if x.name == "multibox_transform_loc")
    s = e.sample("float64")
    ps = [relax.Var(x.name, relax.TensorType(a.shape, x.dtype)) for x, a in zip(s.inputs, s.arrays)]
    bb = relax.BlockBuilder()
    with bb.function("main", ps):
        with bb.dataflow():
            y = bb.emit(call_te_with_auto_grad(bb, sample_operator(s, "multibox_no_grad"), *ps,
                                               no_grad=no_grad))
            boxes = bb.emit(relax.TupleGetItem(y, 0))
            gv = bb.emit_output(bb.emit(relax.op.sum(relax.op.multiply(boxes, boxes))))
        bb.emit_func_output(gv)
    return bb.get(), s


def test_no_grad_arguments_get_zero_adjoints() -> None:
    """`no_grad=` keeps float inputs the registry marks non-differentiable out of the derivation."""
    import tvm
    from tvm import relax

    from texpr_ad.relax_bridge import BridgeError, call_te_with_auto_grad, prepare_for_build

    mod, _ = _multibox_module(())
    with pytest.raises(Exception, match="multibox_no_grad.*deriving the gradient failed.*argmax"):
        relax.transform.Gradient("main")(mod)
    mod, s = _multibox_module((0, 2))
    mod = relax.transform.Gradient("main")(mod)  # default require_grads: every float param
    ex = tvm.compile(prepare_for_build(mod), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    _, grads = vm["main_adjoint"](*[tvm.runtime.tensor(a) for a in s.arrays])
    assert not grads[0].numpy().any() and not grads[2].numpy().any()
    assert grads[1].numpy().any()
    from texpr_ad.ops.elementwise import exp

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3,), "float64"))
    with bb.function("main", [x]):
        with pytest.raises(BridgeError, match="no_grad=.*outside 0..0"):
            call_te_with_auto_grad(bb, exp, x, no_grad=(1,))
        bb.emit_func_output(x)

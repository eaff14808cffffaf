"""Every differentiable registry operator: derived adjoints vs float64 central differences.

Runs on the NumPy reference evaluator here (tests/numeric/test_kernels_ops.py
repeats the check on the compiled CPU kernels).  Tolerance: the scale-free
directional error |<g, t> - fd| / (|g| |t|) <= 1e-6 (see report/checks.py).
"""
import pytest

from texpr_ad.ops import select
from texpr_ad.report.checks import check_grad, derive

ENTRIES = [e for e in select("*") if e.has_compute]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gradient_matches_finite_differences(entry):
    r = check_grad(entry)
    assert r.status in ("ok", "zero", "nondiff"), f"{entry.name}: {r.detail}"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_adjoint_work_is_order_of_forward(entry):
    """The lowered adjoint costs at most a small constant times the forward."""
    r = check_grad(entry, directions=0)
    if r.status in ("nondiff", "zero"):
        return
    assert r.extra["work_ratio"] <= 16, f"{entry.name}: adjoint/forward work {r.extra['work_ratio']:.1f}"


def test_derivation_is_deterministic():
    """The same operator derives byte-identical adjoints twice (caches rely on it)."""
    for e in ENTRIES[:: max(len(ENTRIES) // 25, 1)]:
        a, b = derive(e), derive(e)
        if a is None:
            continue
        assert [str(g) for g in a.grads] == [str(g) for g in b.grads], e.name

"""Every registry operator on the compiled CPU kernels: the forward matches its NumPy reference
and the adjoint kernels match float64 central differences (same figure as the report)."""
import pytest

from texpr_ad.ops import select
from texpr_ad.testing import check_forward, check_grad, cpu_runner

ENTRIES = [e for e in select("*") if e.has_compute]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_cpu_kernels_forward_and_gradient(entry):
    f = check_forward(entry, cpu_runner)
    assert f.status == "ok", f"{entry.name} forward: {f.detail}"
    g = check_grad(entry, cpu_runner, directions=1)
    assert g.status in ("ok", "zero", "nondiff"), f"{entry.name} gradient: {g.detail}"

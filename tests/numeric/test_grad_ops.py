"""Every differentiable registry operator: derived adjoints vs float64 central differences.

Runs on the NumPy reference evaluator here (tests/numeric/test_kernels_ops.py
repeats the check on the compiled CPU kernels).  Tolerance: the scale-free
directional error |<g, t> - fd| / (|g| |t|) <= 1e-6 (see texpr_ad/testing/ops.py).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from texpr_ad.ops import select
from texpr_ad.te.work import work
from texpr_ad.testing import check_grad, derive

ENTRIES = [e for e in select("*") if e.has_compute]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_gradient_matches_finite_differences(entry):
    r = check_grad(entry)
    assert r.status in ("ok", "zero", "nondiff"), f"{entry.name}: {r.detail}"


# Operators whose adjoint costs more than 4x the forward, and why.  Any adjoint writes every
# element of the gradients it returns, so where those outnumber the forward's iterations the
# ratio is bounded by that size instead (4x the elements written).
WORK_EXCEPTIONS = {
    "strided_slice": "the gradient has the input's 168 elements (zeros off the slice); the "
                     "forward touches only the 24 selected ones",
}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_adjoint_work_is_order_of_forward(entry):
    """The lowered adjoint costs at most 4x the forward (te.work: loop iterations)."""
    d = derive(entry)
    if d is None:
        return
    live = [g for g in d.grads if g is not None]
    ratio = work(live) / max(work(d.outputs), 1)
    if entry.name not in WORK_EXCEPTIONS:
        assert ratio <= 4, f"{entry.name}: adjoint/forward work {ratio:.2f}"
        return
    written = sum(int(np.prod([int(s.value) for s in g.shape])) for g in live)
    assert ratio > 4, f"{entry.name} is listed in WORK_EXCEPTIONS but its ratio is {ratio:.2f}"
    assert work(live) <= 4 * written, f"{entry.name}: {work(live)} iterations for {written} elements"


def test_derivation_is_deterministic():
    """The same operator derives byte-identical adjoints twice (caches rely on it)."""
    for e in ENTRIES[:: max(len(ENTRIES) // 25, 1)]:
        a, b = derive(e), derive(e)
        if a is None:
            continue
        assert [str(g) for g in a.grads] == [str(g) for g in b.grads], e.name


def test_derivation_is_identical_across_processes():
    """Two processes (different hash seeds, so set and dict orders of ids differ) print the same
    adjoints byte for byte."""
    script = ("from texpr_ad.ops import select\nfrom texpr_ad.testing import derive\n"
              "for e in select('dense,conv2d*,max_pool2d,softmax,take,resize_bilinear,layer_norm'):\n"
              "    d = derive(e)\n    print(e.name, *(str(g) for g in d.grads), sep='\\n')\n")
    outs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert outs[0] and outs[0] == outs[1]

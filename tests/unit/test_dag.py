"""te.dag.replace_inputs: rebuilding a DAG on new inputs (checked with te.evaluate and NumPy)."""
from __future__ import annotations

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.te.dag import replace_inputs, topo_order
from texpr_ad.te.tensor import ScatterOp

SEED = 4411
print("seed", SEED)
RNG = np.random.default_rng(SEED)


def _softmax_dag():
    x = te.placeholder((3, 4), "float64", "x")
    w = te.placeholder((4,), "float64", "w")
    k = te.reduce_axis((0, 4), "k")
    m = te.compute((3,), lambda i: te.max(x[i, k], axis=k), name="m")
    e = te.compute((3, 4), lambda i, j: [te.exp(x[i, j] - m[i]), x[i, j] * w[j]], name="e2")
    r = te.reduce_axis((0, 4), "r")
    s = te.compute((3,), lambda i: te.sum(e[0][i, r], axis=r), name="s")
    y = te.compute((3, 4), lambda i, j: e[0][i, j] / s[i] + e[1][i, j], name="y")
    return x, w, y, e


def test_rebuilt_dag_computes_the_same_function_of_new_inputs() -> None:
    x, w, y, e = _softmax_dag()
    x2 = te.placeholder((3, 4), "float64", "x2")
    w2 = te.placeholder((4,), "float64", "w2")
    y2, e1 = replace_inputs([y, e[1]], {x: x2, w: w2})
    assert y2 is not y and e1 is not e[1]
    assert {t.name for t in te.placeholders([y2])} == {"x2", "w2"}
    # the two outputs of the multi-output stage are still one (cloned) stage
    ops = {id(t.op) for t in topo_order([y2]) if t.op.name == "e2"}
    assert len(ops) == 1 and e1.op is next(t.op for t in topo_order([y2]) if t.op.name == "e2")
    xa, wa = RNG.normal(size=(3, 4)), RNG.normal(size=4)
    got = te.evaluate([y2, e1], {x2: xa, w2: wa})
    ex = np.exp(xa - xa.max(1, keepdims=True))
    np.testing.assert_allclose(got[0], ex / ex.sum(1, keepdims=True) + xa * wa, rtol=1e-12)
    np.testing.assert_allclose(got[1], xa * wa, rtol=1e-12)
    # the original DAG is untouched
    (y0,) = te.evaluate([y], {x: xa, w: wa})
    np.testing.assert_allclose(y0, got[0], rtol=0)


def test_untouched_stages_are_shared() -> None:
    _, w, y, _ = _softmax_dag()
    w2 = te.placeholder((4,), "float64", "w2")
    (y2,) = replace_inputs([y], {w: w2})
    shared = {t.op.name for t in topo_order([y2]) if any(t is s for s in topo_order([y]))}
    assert {"x", "m"} <= shared and "y" not in shared


def test_scatter_stage_is_retargeted() -> None:
    idx = te.placeholder((5,), "int64", "idx")
    v = te.placeholder((5,), "float64", "v")
    i = te.reduce_axis((0, 5), "i")
    op = ScatterOp("sc", (te.const(4),), "float64", (i,), (idx[i],), v[i], te.const(True))
    out = te.Tensor(op, 0, op.shape, op.dtype)
    idx2 = te.placeholder((5,), "int64", "idx2")
    v2 = te.placeholder((5,), "float64", "v2")
    (out2,) = replace_inputs([out], {idx: idx2, v: v2})
    ia, va = np.array([0, 3, 0, 1, 3]), RNG.normal(size=5)
    ref = np.zeros(4)
    np.add.at(ref, ia, va)
    np.testing.assert_allclose(te.evaluate([out2], {idx2: ia, v2: va})[0], ref, rtol=1e-12)


def test_mismatched_replacement_is_rejected() -> None:
    x, w, y, _ = _softmax_dag()
    with pytest.raises(ValueError, match="cannot replace.*same dtype, rank"):
        replace_inputs([y], {x: te.placeholder((3, 5), "float64", "bad")})
    with pytest.raises(ValueError, match="cannot replace"):
        replace_inputs([y], {w: te.placeholder((4,), "float32", "bad")})

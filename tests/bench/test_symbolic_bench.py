"""The symbolic-batch bench (bench/symbolic.py): a workload made with a symbolic batch has that
dim a te.var in every input of the batch's size (and only there), its kernels' gradients equal
the static kernels', and a --quick run prints a row per workload and the geomeans."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import symbolic, workloads  # noqa: E402
from texpr_ad.te.expr import Var  # noqa: E402
from texpr_ad.te.tensor import TensorError  # noqa: E402


def test_symbolic_batch_makes_the_batch_dim_a_var_only():
    w = workloads.make("layer_norm", quick=True, symbolic_batch=True)
    x, g, b = w.inputs
    assert isinstance(x.shape[0], Var) and not any(isinstance(d, Var) for d in (*g.shape, *b.shape))
    assert not any(isinstance(d, Var) for t in workloads.make("layer_norm", True).inputs
                   for d in t.shape)  # the option does not outlive its call


def test_symbolic_kernels_match_static_ones():
    sym, st = (symbolic.calls("conv2d", True, s) for s in (True, False))
    for a, b in zip(sym["grads"], st["grads"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max()))


def test_quick_run_prints_rows_and_geomeans(capsys, monkeypatch):
    make = workloads.make

    def failing(name, *a, **kw):  # a definition that needs a static batch is reported, not fatal
        if name == "reduce_sum" and kw.get("symbolic_batch"):
            raise TensorError("dim 0 of 'x' must be static")
        return make(name, *a, **kw)
    monkeypatch.setattr(workloads, "make", failing)
    got = symbolic.run(["softmax", "strided_slice", "reduce_sum"], quick=True, repeat=1)
    out = capsys.readouterr().out
    assert set(got) == {"softmax", "strided_slice"} and set(got["softmax"]) == set(symbolic.SIDES)
    assert "reduce_sum         not built with a symbolic batch: TensorError" in out
    assert "geomean sym/static step" in out and "CPU:" in out

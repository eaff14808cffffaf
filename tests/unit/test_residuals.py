"""Residual decisions (schedule/residuals.py): which forward tensors a vjp saves, and why.

Pure planning: nothing here compiles a kernel."""
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.ops import elementwise as ew
from texpr_ad.ops import nn
from texpr_ad.pullback import Pullback
from texpr_ad.schedule.residuals import ResidualError


def _decisions(p: Pullback) -> dict[str, bool]:
    return {d.tensor.name: d.save for d in p.decisions}


def test_softmax_saves_output_and_row_reductions_and_rebuilds_the_exponential():
    x = te.placeholder((8, 10), "float64", name="x")
    p = Pullback([ew.softmax(x)], [x])
    assert _decisions(p) == {"softmax": True, "softmax_expsum": True, "softmax_exp": False,
                             "softmax_max": False, "softmax_max_red1": True}
    assert p.extra and {t.name for t in p.extra} == {"softmax_expsum", "softmax_max_red1"}
    reasons = {d.tensor.name: d.reason for d in p.decisions}
    assert "output" in reasons["softmax"] and "reduction" in reasons["softmax_expsum"]
    assert "rebuilt as softmax * softmax_expsum" in reasons["softmax_exp"]
    (d,) = [d for d in p.decisions if d.tensor.name == "softmax_exp"]
    assert [t.name for t in d.rebuild] == ["softmax", "softmax_expsum"]
    assert "save      softmax_expsum (8)" in p.explain()
    # the backward reads it as saved_softmax * saved_softmax_expsum where that sum is finite
    from texpr_ad.te.dag import topo_order
    names = {t.name for t in topo_order(p.grads)}
    assert {"softmax_exp_rebuilt", "saved_softmax", "saved_softmax_expsum"} <= names


def test_an_arg_extreme_code_that_reads_no_cotangent_moves_into_the_forward():
    x = te.placeholder((1, 2, 8, 8), "float64", name="x")
    p = Pullback([nn.max_pool2d(x, 3, 2, 1)], [x])
    moved = [d for d in p.decisions if "reads no cotangent" in d.reason]
    assert [d.tensor.name for d in moved] == ["max_pool2d_argext"] and moved[0].save
    assert [t.name for t in p.extra] == ["max_pool2d_argext"]
    # the backward reads it through a slot, and no longer computes it
    from texpr_ad.te.dag import topo_order
    names = {t.name for t in topo_order(p.grads)}
    assert "max_pool2d_argext" not in names and "saved_max_pool2d_argext" in names


def test_a_contraction_gradient_reads_only_inputs():
    a = te.placeholder((4, 5), "float64", name="a")
    b = te.placeholder((5, 3), "float64", name="b")
    p = Pullback([nn.matmul(a, b)], [a, b])
    assert p.decisions == [] and p.extra == []
    assert [p.inputs[k].name for k in p.input_positions] == ["a", "b"]


def test_save_none_recomputes_everything_and_all_saves_everything():
    x = te.placeholder((8, 10), "float64", name="x")
    y = ew.softmax(x)
    none = Pullback([y], [x], save="none")
    assert not any(_decisions(none).values()) and none.saved == []
    assert none.input_positions == [0]
    every = Pullback([y], [x], save="all")
    assert all(_decisions(every).values())


def test_save_by_name_and_unknown_names():
    x = te.placeholder((8, 10), "float64", name="x")
    y = ew.softmax(x)
    p = Pullback([y], [x], save=["softmax_exp"])
    assert [t.name for t in p.saved] == ["softmax_exp"]
    with pytest.raises(ResidualError, match=r"softmax_typo.*reads \["):
        Pullback([y], [x], save=["softmax_typo"])
    with pytest.raises(ResidualError, match="save must be"):
        Pullback([y], [x], save="sometimes")
    assert isinstance(ResidualError("x"), ta.TexprError)

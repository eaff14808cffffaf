"""Reducer kinds are a `ReduceKind` enum that prints, formats and compares as its string."""
from __future__ import annotations

import json

from texpr_ad import te
from texpr_ad.te import ReduceKind


def test_builtin_and_custom_kinds_are_members_equal_to_their_strings():
    x = te.placeholder((4,), name="x")
    k = te.reduce_axis((0, 4), name="k")
    for red, kind in ((te.sum, ReduceKind.SUM), (te.prod, ReduceKind.PROD), (te.max, ReduceKind.MAX),
                      (te.min, ReduceKind.MIN)):
        comb = red(x[k], axis=k).combiner
        assert comb.kind is kind and comb.kind == kind.value
        assert str(comb.kind) == f"{comb.kind}" == json.loads(json.dumps(comb.kind)) == kind.value
    custom = te.comm_reducer(lambda a, b: a + b, lambda t: te.const(0, t), name="add")
    assert custom(x[k], axis=k).combiner.kind is ReduceKind.CUSTOM
    assert te.Reducer("sum", lambda a, b: a + b, lambda t: te.const(0, t), "s").kind is ReduceKind.SUM

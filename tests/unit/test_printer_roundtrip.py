"""Printed stages re-evaluate to structurally equal expressions (STYLE rule 13), over the corpus of
forward operators and derived adjoints of the registry."""
import pytest

from texpr_ad import te
from texpr_ad.ops import select
from texpr_ad.testing import derive
from texpr_ad.te.expr import Reduce, as_expr
from texpr_ad.te.tensor import ComputeOp
from texpr_ad.te.visit import walk

ENTRIES = [e for e in select("*") if e.has_compute]
NS = {n: getattr(te, n) for n in te.__all__}
NS.update(inf=float("inf"), nan=float("nan"))


class _Both:
    """A stage named like a te function (`log`): callable as the function, indexable as the tensor."""

    def __init__(self, fn, tensor):
        self.fn, self.tensor = fn, tensor

    def __call__(self, *a, **k):
        return self.fn(*a, **k)

    def __getitem__(self, idx):
        return self.tensor[idx]


def _reducer(comb):
    """The printed name of a custom reducer, rebuilding nodes with the same combiner."""
    def make(src, axis, where=None, init=None):
        srcs = tuple(as_expr(s) for s in (src if isinstance(src, tuple) else (src,)))
        axes = tuple(axis) if isinstance(axis, list) else (axis,)
        cond = te.const(True) if where is None else as_expr(where)
        inits = tuple(as_expr(i) for i in (init if isinstance(init, tuple) else (init,))) if init is not None else ()
        outs = tuple(Reduce(comb, srcs, axes, cond, k, s.dtype, inits) for k, s in enumerate(srcs))
        return outs if len(outs) > 1 else outs[0]
    return make


def _roundtrip(tensors):
    checked = 0
    for t in te.topo_order(tensors):
        op = t.op
        if not isinstance(op, ComputeOp):
            continue
        ns = dict(NS)
        ns.update({s.name: _Both(NS[s.name], s) if s.name in NS else s for s in te.topo_order([t])})
        ns.update({a.name: a for a in op.axis})
        for b in op.body:
            for x in walk(b):
                if isinstance(x, Reduce):
                    ns.update({a.name: a for a in x.axis})
                    if x.combiner.kind == "custom":
                        ns[x.combiner.name] = _reducer(x.combiner)
        for b in op.body:
            again = eval(te.expr_str(b), ns)  # noqa: S307 - printer output of our own IR
            again = again if not isinstance(again, tuple) else again[b.value_index]
            again = as_expr(again, b.dtype)
            assert again.same_as(b), f"{op.name}: {te.expr_str(b)}\n!= {te.expr_str(again)}"
            checked += 1
    return checked


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_forward_and_adjoint_stages_roundtrip(entry):
    s = entry.sample("float64")
    n = _roundtrip(list(s.outputs))
    d = derive(entry)
    if d is not None:
        n += _roundtrip([g for g in d.grads if g is not None])
    assert n > 0

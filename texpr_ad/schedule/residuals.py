"""Residuals: which forward tensors the backward reads from memory instead of recomputing.

An adjoint graph reads forward tensors (the output, a row maximum, a normalizer...).  Built
on its own, the backward kernel recomputes each of them from the inputs; with residuals the
forward kernel also returns them and the backward reads them as inputs.  `choose` walks the
forward tensors the adjoint reads, nearest first, and decides per tensor by one rule table
(`RULES`, first match wins):

| tensor | decision | why |
| --- | --- | --- |
| an output of the forward | save | the forward returns it anyway: no work, no extra memory |
| a reduction (or scatter) | save | the forward materializes it anyway; recomputing repeats its whole reduction |
| a reduction the adjoint computes from forward tensors alone (a max's tie count) | save | computed in the forward, so the backward does only the work that needs the cotangents |
| elementwise | recompute | a store in the forward and a load in the backward cost about what recomputing a few operations from its operands does; its forward operands become candidates in turn |

`save="none"` recomputes everything (the backward reads only the inputs), `save="all"`
saves every forward tensor the adjoint reads, and a collection of tensor names saves exactly
those (the rest recompute).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from ..errors import TexprError
from ..te.dag import topo_order
from ..te.expr import Read, Reduce
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor
from ..te.visit import walk


class ResidualError(TexprError, ValueError):
    """A `save=` choice that names no forward tensor the backward reads."""


@dataclass(frozen=True)
class Decision:
    """Save `tensor` in the forward (or recompute it in the backward), and why."""

    tensor: Tensor
    save: bool
    reason: str

    def __str__(self) -> str:
        shape = "x".join(str(s) for s in self.tensor.shape) or "scalar"
        return f"{'save     ' if self.save else 'recompute'} {self.tensor.name} ({shape}): {self.reason}"


def _has_reduction(t: Tensor) -> bool:
    op = t.op
    return isinstance(op, ScatterOp) or (
        isinstance(op, ComputeOp) and any(isinstance(x, Reduce) for b in op.body for x in walk(b)))


@dataclass(frozen=True)
class _Where:
    outputs: set[int]   # ids of the forward's outputs
    adjoint: set[int]   # ids of adjoint stages that read no cotangent


# (test, save?, reason): the first row whose test holds decides; the last always holds.
Rule = tuple[Callable[[Tensor, _Where], bool], bool, str]
RULES: tuple[Rule, ...] = (
    (lambda t, w: id(t) in w.outputs, True, "an output of the forward: kept anyway, no extra work"),
    (lambda t, w: id(t) in w.adjoint and _has_reduction(t), True,
     "a reduction of the adjoint that reads no cotangent: computed in the forward, so the "
     "backward does only the work that needs the cotangents"),
    (lambda t, w: _has_reduction(t), True,
     "a reduction: the forward materializes it anyway, and recomputing repeats the reduction"),
    (lambda t, w: True, False,
     "elementwise: recomputing it from its operands costs about what a store and a load would"),
)


def _forward_reads(t: Tensor, fwd: set[int]) -> list[Tensor]:
    """Computed forward tensors that the stage of `t` reads directly (once each, in order)."""
    op = t.op
    exprs = op.body if isinstance(op, ComputeOp) else op.exprs if isinstance(op, ScatterOp) else ()
    seen: dict[int, Tensor] = {}
    for e in exprs:
        for x in walk(e):
            if isinstance(x, Read) and id(x.tensor) in fwd and not isinstance(
                    x.tensor.op, PlaceholderOp):
                seen.setdefault(id(x.tensor), x.tensor)
    return list(seen.values())


def _head_free(adjoints: Sequence[Tensor], heads: Sequence[Tensor], fwd: set[int]) -> set[int]:
    """Computed adjoint-graph tensors that read no cotangent (directly or not): the forward
    can compute them."""
    tainted = {id(h) for h in heads}
    free: set[int] = set()
    for t in topo_order(list(adjoints)):
        if id(t) in fwd or id(t) in tainted or isinstance(t.op, PlaceholderOp):
            continue
        if any(id(s) in tainted for s in t.op.inputs):
            tainted.add(id(t))
        else:
            free.add(id(t))
    return free


def choose(outputs: Sequence[Tensor], adjoints: Sequence[Tensor], heads: Sequence[Tensor] = (),
           save: str | Collection[str] = "auto") -> list[Decision]:
    """The save/recompute decision for every forward tensor the `adjoints` read (directly, or
    through forward tensors they recompute), nearest to the adjoint first.  Adjoint stages
    that read none of the cotangents `heads` count as forward tensors: a saved one is computed
    by the forward."""
    order = topo_order(list(outputs))
    fwd = {id(t) for t in order}
    where = _Where({id(t) for t in outputs}, _head_free(adjoints, heads, fwd))
    fwd |= where.adjoint
    names = None
    if save not in ("auto", "all", "none"):
        if isinstance(save, str) or not all(isinstance(n, str) for n in save):
            raise ResidualError(f"save must be 'auto', 'all', 'none' or a collection of tensor "
                                f"names, got {save!r}")
        names = set(save)
    frontier: dict[int, Tensor] = {}
    for t in topo_order(list(adjoints)):  # adjoint stages (not forward ones) read the frontier
        if id(t) not in fwd:
            for r in _forward_reads(t, fwd):
                frontier.setdefault(id(r), r)
    for t in adjoints:  # an adjoint that is itself a forward tensor (d/dx of y = x is the head)
        if id(t) in fwd and not isinstance(t.op, PlaceholderOp):
            frontier.setdefault(id(t), t)
    decisions: list[Decision] = []
    done: set[int] = set()
    queue = list(frontier.values())
    while queue:
        t = queue.pop(0)
        if id(t) in done:
            continue
        done.add(id(t))
        if names is not None:
            d = Decision(t, t.name in names, "named in save=" if t.name in names else
                         "not named in save=")
        elif save in ("all", "none"):
            d = Decision(t, save == "all", f"save={save!r}")
        else:
            d = next(Decision(t, s, why) for test, s, why in RULES if test(t, where))
        decisions.append(d)
        if not d.save:
            queue.extend(r for r in _forward_reads(t, fwd) if id(r) not in done)
    if names is not None:
        unknown = names - {d.tensor.name for d in decisions}
        if unknown:
            raise ResidualError(f"save= names {sorted(unknown)}, which the backward does not "
                                f"read; it reads {[d.tensor.name for d in decisions]}")
    return decisions

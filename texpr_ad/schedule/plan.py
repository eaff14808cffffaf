"""The loop-nest plan of a kernel: what the scheduler decided and why.

A `Plan` is a small tree of frozen dataclasses.  The renderer turns it into
source text without making any decision of its own; `print(plan)` shows, stage
by stage, what is materialized or inlined, the loop order, which axes are fused
into the parallel loop, the reduction strategy and the scatter strategy.

Change a decision with `build(..., plan_overrides={"Y": {"parallel": False}})`
(see `texpr_ad.schedule.planner.OVERRIDE_KEYS`); the plan is then recomputed
with the override and says so in its notes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..te.expr import Expr, IterVar, Var
from ..te.printer import expr_str
from ..te.tensor import Tensor, shape_str

ACCUMULATION = ("reductions fold into a local scalar of the reduction's dtype (float32 sums "
                "accumulate in float32, like a plain loop in C); integer arithmetic runs in "
                "int64 and wraps to the tensor dtype on store")


@dataclass(frozen=True)
class Inline:
    """Stage `stage` is substituted into the one expression that reads it."""

    stage: str
    into: str
    reason: str


@dataclass(frozen=True)
class ComputeStage:
    """A materialized compute: `tensors[k][axes] = bodies[k]` at every point of `axes`.

    `bodies` already have inlined stages substituted.  The data loops run in
    `order` (outer to inner); when `parallel`, the first `fused` axes of `order`
    are flattened into one `prange`.
    """

    name: str
    tensors: tuple[Tensor | None, ...]  # None: an output of the op that nothing reads
    axes: tuple[IterVar, ...]
    bodies: tuple[Expr, ...]
    order: tuple[IterVar, ...]
    fused: int
    parallel: bool
    is_output: bool
    reduction: tuple[str, ...]
    inlined: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def parallel_axes(self) -> tuple[IterVar, ...]:
        return self.order[: self.fused] if self.parallel else ()


@dataclass(frozen=True)
class ScatterStage:
    """`tensor = zeros(shape); tensor[index] += value` over `order` where `condition`.

    `parallel_axis` (outermost in `order`) is an axis that index dim
    `parallel_dim` equals exactly, so distinct iterations write distinct
    elements and a `prange` over it is race-free; None means serial.
    """

    name: str
    tensor: Tensor
    shape: tuple[Expr, ...]
    order: tuple[IterVar, ...]
    index: tuple[Expr, ...]
    value: Expr
    condition: Expr
    parallel_axis: IterVar | None
    parallel_dim: int
    is_output: bool
    inlined: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def strategy(self) -> str:
        if self.parallel_axis is None:
            return "serial"
        return f"parallel over {self.parallel_axis.name} (injective: index dim {self.parallel_dim} is {self.parallel_axis.name})"


Stage = ComputeStage | ScatterStage


@dataclass(frozen=True)
class Plan:
    """The whole kernel: inputs, symbolic dims, and the materialized stages in order."""

    target: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    params: tuple[Var, ...]
    stages: tuple[Stage, ...]
    inlined: tuple[Inline, ...]
    accumulation: str = ACCUMULATION

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"plan has no materialized stage {name!r}; stages: "
                       f"{[s.name for s in self.stages]}")

    def __str__(self) -> str:
        ins = ", ".join(f"{t.name}: {shape_str(t.shape)} {t.dtype}" for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        lines = [f"Plan(target={self.target})",
                 f"  inputs: {ins or '-'}",
                 f"  outputs: {outs}",
                 f"  symbolic dims (bound from input shapes): "
                 f"{', '.join(v.name for v in self.params) or '-'}",
                 f"  accumulation: {self.accumulation}"]
        for s in self.stages:
            lines += ["", *_stage_lines(s)]
        if self.inlined:
            lines += ["", "inlined (not materialized):"]
            lines += [f"  {i.stage} -> {i.into}: {i.reason}" for i in self.inlined]
        return "\n".join(lines)

    __repr__ = __str__


def _stage_lines(s: Stage) -> list[str]:
    role = "output" if s.is_output else "intermediate"
    match s:
        case ComputeStage():
            shape = shape_str(tuple(a.extent for a in s.axes))
            head = (f"stage {s.name} [{role}, materialized] compute {shape} "
                    + ", ".join(b.dtype for b in s.bodies))
            out = [head, f"  loops: {_loops(s)}"]
            out += [f"  reduction: {r}" for r in s.reduction] or ["  reduction: none"]
        case ScatterStage():
            head = (f"stage {s.name} [{role}, materialized] scatter-add into zeros"
                    f"{shape_str(s.shape)} {s.tensor.dtype}")
            idx = ", ".join(expr_str(i) for i in s.index)
            loops = " > ".join(a.name for a in s.order) or "(single point)"
            out = [head, f"  loops: {loops}; target index [{idx}]",
                   f"  scatter: {s.strategy}"]
    if s.inlined:
        out.append(f"  inlined: {', '.join(s.inlined)}")
    out += [f"  note: {n}" for n in s.notes]
    return out


def _loops(s: ComputeStage) -> str:
    if not s.order:
        return "(zero-dim: a single point, serial)"
    names = [a.name for a in s.order]
    if not s.parallel or s.fused == 0:
        return " > ".join(names) + " (serial)"
    par = names[: s.fused]
    head = f"prange({par[0]})" if len(par) == 1 else f"prange(fused {' * '.join(par)})"
    rest = names[s.fused:]
    inner = f"; innermost {names[-1]}" + (" is the last (contiguous) axis"
                                           if s.order[-1] is s.axes[-1] else "")
    return " > ".join([head, *rest]) + inner

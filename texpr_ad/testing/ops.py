"""Checks of registry operators, shared by the test suite, the coverage report and the bridge.

Each check takes a registry entry and a runner (the NumPy reference evaluator
or a compiled target) and returns a `Result` with its figure, never raising for
an operator failure: failures become a status with a reason.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..deriv import grad
from ..kernels import build
from ..ops.registry import OpEntry, Sample
from ..te import dtype as dt
from ..te.tensor import ComputeOp, ScatterOp, Tensor
from ..te.work import work
from .numeric import Result, Status, fd_step, grad_error, rel_error

Runner = Callable[[Sequence[Tensor], Sequence[Tensor], Sequence[np.ndarray]], list[np.ndarray]]


def interp_runner(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                  arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return te.evaluate(list(outputs), dict(zip(inputs, arrays, strict=True)))


def cpu_runner(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
               arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return list(build(list(outputs), list(inputs), target="cpu")(*arrays))


class CachedCPURunner:
    """`cpu_runner` that builds each (outputs, inputs) DAG once.

    check_grad evaluates the forward many times (finite differences); planning
    it again on every call costs more than running it.
    """

    def __init__(self) -> None:
        self._kernels: dict[tuple[int, ...], Any] = {}

    def kernel(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor]) -> Any:
        key = tuple(id(t) for t in outputs) + (-1,) + tuple(id(t) for t in inputs)
        if key not in self._kernels:
            self._kernels[key] = (build(list(outputs), list(inputs), target="cpu"),
                                  outputs, inputs)  # keep the tensors alive: ids stay unique
        return self._kernels[key][0]

    def __call__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                 arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(self.kernel(outputs, inputs)(*arrays))


def failure(e: BaseException) -> Result:
    """A FAIL result naming the exception and the function it came from."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({tb[-1].name})" if tb else ""
    return Result(Status.FAIL, None, f"{type(e).__name__}: {e}{where}"[:400])


def check_forward(entry: OpEntry, runner: Runner = interp_runner, dtype: str = "float64") -> Result:
    """Forward matches the entry's NumPy reference (max relative error)."""
    try:
        s = entry.sample(dtype)  # type: ignore[misc]
        got = runner(s.outputs, s.inputs, s.arrays)
        want = entry.reference(*s.arrays)  # type: ignore[misc]
        err = max(rel_error(g, w) for g, w in zip(got, want, strict=True))
        tol = entry.tol if dtype == "float64" else 1e-4
        return Result(Status.OK if err <= tol else Status.FAIL, err,
                      "" if err <= tol else f"max rel err {err:.2e}")
    except Exception as e:  # noqa: BLE001 - reported per operator
        return failure(e)


def adjoint_strategy(grads: Sequence[Tensor | None]) -> str:
    """gather | scatter | zero: how the adjoints `grads` were derived (scatter if any
    stage scatters; zero when every adjoint is an exact-zero fill)."""
    kinds = set()
    for g in grads:
        if g is None:
            continue
        if isinstance(g.op, ComputeOp) and g.op.attrs.get("zero"):
            kinds.add("zero")
            continue
        if any(isinstance(t.op, ScatterOp) for t in te.topo_order([g])):
            kinds.add("scatter")
        kinds.add("gather")
    if "scatter" in kinds:
        return "scatter"
    return "gather" if "gather" in kinds else "zero"


@dataclass
class Derived:
    sample: Sample
    outputs: list[Tensor]
    heads: list[Tensor]
    wrt: list[Tensor]
    grads: list[Tensor | None]

    @property
    def strategy(self) -> str:
        """gather | scatter | zero for the derived adjoint stages."""
        return adjoint_strategy(self.grads)


def derive(entry: OpEntry, dtype: str = "float64") -> Derived | None:
    """Adjoints of the entry's float outputs w.r.t. its differentiable inputs (None if none)."""
    s = entry.sample(dtype)  # type: ignore[misc]
    wrt = [x for x, d in zip(s.inputs, s.differentiable, strict=True) if d]
    outs = [o for o in s.outputs if dt.is_float(o.dtype)]
    if not wrt or not outs:
        return None
    heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in outs]
    return Derived(s, outs, heads, wrt, grad(outs, wrt, head=heads))


def kernel_jobs(entry: OpEntry, dtype: str = "float64"
                ) -> list[tuple[str, list[Tensor], list[Tensor], Derived | None]]:
    """(forward | gradient, outputs, inputs, derived) of the kernels an operator builds: the
    forward, and the live adjoints with inputs `[*sample inputs, *heads]`."""
    d = derive(entry, dtype)
    s = d.sample if d is not None else entry.sample(dtype)  # type: ignore[misc]
    jobs = [("forward", list(s.outputs), list(s.inputs), d)]
    if d is not None:
        live = [g for g in d.grads if g is not None]
        if live:
            jobs.append(("gradient", live, [*s.inputs, *d.heads], d))
    return jobs


def vjp_error(outputs: Sequence[Tensor], inputs: Sequence[Tensor], arrays: Sequence[np.ndarray],
              wrt: Sequence[Tensor], grads: Sequence[Tensor | None], heads: Sequence[Tensor],
              runner: Runner, rng: np.random.Generator, directions: int = 2,
              eps: float | None = None) -> float:
    """Adjoints `grads` (of `outputs` w.r.t. `wrt`, seeded by `heads`) run by `runner`,
    against central differences of <head, f(x)> for random head values (`grad_error`).
    A None adjoint is checked as zero."""
    ys = runner(outputs, inputs, arrays)
    hs = [rng.standard_normal(np.shape(y)).astype(y.dtype) for y in ys]
    live = [g for g in grads if g is not None]
    adj = iter(runner(live, [*inputs, *heads], [*arrays, *hs]) if live else [])
    claimed = {}
    for x, g in zip(wrt, grads, strict=True):
        k = list(inputs).index(x)
        claimed[k] = np.zeros(np.shape(arrays[k])) if g is None else next(adj)

    def loss(xs: list[np.ndarray]) -> float:
        return float(sum(np.vdot(h, y) for h, y in zip(hs, runner(outputs, inputs, xs),
                                                         strict=True)))

    eps = fd_step(o.dtype for o in outputs) if eps is None else eps
    return grad_error(loss, arrays, claimed, eps, directions, rng)


def check_grad(entry: OpEntry, runner: Runner = interp_runner, directions: int = 2,
               eps: float | None = None) -> Result:
    """Adjoints against float64 central differences of <head, f(x)> along random directions.

    The figure is max |<g, t> - fd| / (|g| |t|) over inputs and directions (`grad_error`),
    which is scale-free and does not blow up when the directional derivative cancels.
    """
    try:
        d = derive(entry)
        if d is None:
            return Result(Status.NONDIFF, None, "no differentiable input")
        s = d.sample
        worst = vjp_error(d.outputs, s.inputs, s.arrays, d.wrt, d.grads, d.heads, runner,
                          np.random.default_rng(7), directions, eps)
        live = [g for g in d.grads if g is not None]
        strategy = d.strategy
        ratio = work(live) / max(work(d.outputs), 1)
        status = Status.OK if worst <= max(entry.tol, 1e-6) else Status.FAIL
        if status is Status.OK and strategy == "zero":
            status = Status.ZERO
        return Result(status, worst, "" if status != Status.FAIL else f"gradient rel err {worst:.2e}",
                      {"strategy": strategy, "work_ratio": ratio})
    except Exception as e:  # noqa: BLE001
        return failure(e)

"""Per-operator checks shared by the test suite and the coverage report.

Each check takes a registry entry and a runner (the NumPy reference evaluator
or a compiled target) and returns a small result with its figure, never
raising for an operator failure: failures become a status with a reason.
"""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..deriv import grad
from ..ops.registry import OpEntry, Sample
from ..te import dtype as dt
from ..te.tensor import ComputeOp, ScatterOp, Tensor
from ..te.work import work

Runner = Callable[[Sequence[Tensor], Sequence[Tensor], Sequence[np.ndarray]], list[np.ndarray]]


def interp_runner(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                  arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    return te.evaluate(list(outputs), dict(zip(inputs, arrays, strict=True)))


def cpu_runner(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
               arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    from ..kernels import build
    return list(build(list(outputs), list(inputs), target="cpu")(*arrays))


@dataclass
class Result:
    status: str                 # ok | zero | nondiff | fail | skip
    figure: float | None = None
    detail: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def _fail(e: BaseException) -> Result:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({tb[-1].name})" if tb else ""
    return Result("fail", None, f"{type(e).__name__}: {e}{where}"[:400])


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape {a.shape} != reference shape {b.shape}")
    if a.size == 0:
        return 0.0
    scale = max(float(np.abs(b).max()), 1e-300)
    return float(np.abs(a - b).max() / scale)


def check_forward(entry: OpEntry, runner: Runner = interp_runner, dtype: str = "float64") -> Result:
    """Forward matches the entry's NumPy reference (max relative error)."""
    try:
        s = entry.sample(dtype)  # type: ignore[misc]
        got = runner(s.outputs, s.inputs, s.arrays)
        want = entry.reference(*s.arrays)  # type: ignore[misc]
        err = max(_max_rel(g, w) for g, w in zip(got, want, strict=True))
        tol = entry.tol if dtype == "float64" else 1e-4
        return Result("ok" if err <= tol else "fail", err, "" if err <= tol else f"max rel err {err:.2e}")
    except Exception as e:  # noqa: BLE001 - reported per operator
        return _fail(e)


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
        kinds = set()
        for g in self.grads:
            if g is None:
                continue
            if isinstance(g.op, ComputeOp) and g.op.attrs.get("zero"):
                kinds.add("zero")
                continue
            for t in te.topo_order([g]):
                if isinstance(t.op, ScatterOp):
                    kinds.add("scatter")
            kinds.add("gather")
        if "scatter" in kinds:
            return "scatter"
        return "gather" if "gather" in kinds else "zero"


def derive(entry: OpEntry, dtype: str = "float64") -> Derived | None:
    """Adjoints of the entry's float outputs w.r.t. its differentiable inputs (None if none)."""
    s = entry.sample(dtype)  # type: ignore[misc]
    wrt = [x for x, d in zip(s.inputs, s.differentiable, strict=True) if d]
    outs = [o for o in s.outputs if dt.is_float(o.dtype)]
    if not wrt or not outs:
        return None
    heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in outs]
    return Derived(s, outs, heads, wrt, grad(outs, wrt, head=heads))


def check_grad(entry: OpEntry, runner: Runner = interp_runner, directions: int = 2,
               eps: float | None = None) -> Result:
    """Adjoints against float64 central differences of <head, f(x)> along random directions.

    The figure is max |<g, t> - fd| / (|g| |t|) over inputs and directions, which
    is scale-free and does not blow up when the directional derivative cancels.
    """
    try:
        d = derive(entry)
        if d is None:
            return Result("nondiff", None, "no differentiable input")
        s = d.sample
        if eps is None:  # outputs rounded to float32 (casts) need a wider step
            eps = 1e-6 if all(o.dtype == "float64" for o in d.outputs) else 1e-2
        rng = np.random.default_rng(7)
        ys = runner(d.outputs, s.inputs, s.arrays)
        gs = [rng.standard_normal(np.shape(y)).astype(y.dtype) for y in ys]
        live = [g for g in d.grads if g is not None]
        adj = runner(live, list(s.inputs) + d.heads, list(s.arrays) + gs)

        def loss(arrays: list[np.ndarray]) -> float:
            outs = runner(d.outputs, s.inputs, arrays)
            return float(sum(np.vdot(g, y) for g, y in zip(gs, outs, strict=True)))

        worst = 0.0
        for x, a in zip(d.wrt, adj, strict=True):
            k = list(s.inputs).index(x)
            for _ in range(directions):
                t = rng.standard_normal(np.shape(a))
                plus, minus = list(s.arrays), list(s.arrays)
                plus[k] = s.arrays[k] + eps * t
                minus[k] = s.arrays[k] - eps * t
                fd = (loss(plus) - loss(minus)) / (2 * eps)
                an = float(np.vdot(a, t))
                scale = float(np.linalg.norm(a) * np.linalg.norm(t))
                if scale == 0.0:
                    err = abs(fd) / (abs(loss(list(s.arrays))) + 1.0)
                else:
                    err = abs(an - fd) / scale
                worst = max(worst, err)
        strategy = d.strategy
        ratio = work(live) / max(work(d.outputs), 1)
        status = "ok" if worst <= max(entry.tol, 1e-6) else "fail"
        if status == "ok" and strategy == "zero":
            status = "zero"
        return Result(status, worst, "" if status != "fail" else f"gradient rel err {worst:.2e}",
                      {"strategy": strategy, "work_ratio": ratio})
    except Exception as e:  # noqa: BLE001
        return _fail(e)


def timed(fn: Callable[[], object], repeat: int = 3, warmup: int = 1) -> float:
    """Median wall time of fn() in seconds after `warmup` calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))

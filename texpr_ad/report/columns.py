"""The coverage matrix's columns: one spec per column, evaluated per operator.

A column is `Column(key, title, target, fn, enabled, gating, doc)`: `fn(run)`
maps an `OpRun` (one operator, with its expensive checks memoized so several
columns can share them) to a `checks.Result`.  `enabled()` says whether the
column's dependency is present; when it is not, every cell reads "n/a" with the
reason.  A failing cell in a `gating` column makes `texpr-ad coverage` exit
non-zero.  Adding a column is one line in `COLUMNS`.
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Sequence

import numpy as np

from ..ops.registry import OpEntry
from ..te.tensor import Tensor
from ..te.work import work
from .checks import Derived, Result, check_forward, check_grad, derive
from .torch_refs import TORCH_REFS, torch_available

WORK_BUDGET = 16.0  # adjoint/forward iteration ratio above which the work cell fails
TORCH_TOL = 1e-6    # max relative difference between the adjoint and torch autograd (float64)


class CachedCPURunner:
    """`checks.cpu_runner` that builds each (outputs, inputs) DAG once.

    check_grad evaluates the forward many times (finite differences); planning
    it again on every call costs more than running it.
    """

    def __init__(self) -> None:
        self._kernels: dict[tuple[int, ...], Any] = {}

    def kernel(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor]) -> Any:
        from ..kernels import build
        key = tuple(id(t) for t in outputs) + (-1,) + tuple(id(t) for t in inputs)
        if key not in self._kernels:
            self._kernels[key] = (build(list(outputs), list(inputs), target="cpu"),
                                  outputs, inputs)  # keep the tensors alive: ids stay unique
        return self._kernels[key][0]

    def __call__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor],
                 arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(self.kernel(outputs, inputs)(*arrays))


class OpRun:
    """One operator's checks, each computed at most once and shared between columns."""

    def __init__(self, entry: OpEntry) -> None:
        self.entry = entry
        self.cpu = CachedCPURunner()

    @cached_property
    def derived(self) -> Derived | None | BaseException:
        try:
            return derive(self.entry)
        except Exception as e:  # noqa: BLE001 - reported in the cell
            return e

    @cached_property
    def grad(self) -> Result:
        return check_grad(self.entry, self.cpu)

    @cached_property
    def torch(self) -> tuple[Result, Result]:
        return _torch_check(self)


def _no_compute(entry: OpEntry) -> Result | None:
    if entry.has_compute:
        return None
    return Result("nocompute", None, entry.no_compute)


def _derivation(run: OpRun) -> Result | Derived:
    if (r := _no_compute(run.entry)) is not None:
        return r
    d = run.derived
    if isinstance(d, BaseException):
        return Result("fail", None, f"derivation: {type(d).__name__}: {d}"[:400])
    if d is None:
        return Result("nondiff", None, _nondiff_reason(run.entry))
    return d


def _nondiff_reason(entry: OpEntry) -> str:
    s = entry.sample("float64")  # type: ignore[misc]
    if not any(s.differentiable):
        return "no differentiable input" if s.inputs else "no inputs"
    return "integer/bool output"


# -- column functions --------------------------------------------------------------------------

def col_forward(run: OpRun) -> Result:
    """Forward compiled for the CPU matches the NumPy reference (max relative error)."""
    return _no_compute(run.entry) or check_forward(run.entry, run.cpu)


def col_adjoint(run: OpRun) -> Result:
    """How the adjoint was derived: gather, scatter, or exactly zero."""
    d = _derivation(run)
    if isinstance(d, Result):
        return d
    strategy = d.strategy
    if strategy == "zero":
        return Result("zero", None, "integer-valued: the gradient is exactly zero",
                      {"text": "zero"})
    return Result("ok", None, f"{strategy} form", {"text": strategy})


def col_grad(run: OpRun) -> Result:
    """Adjoint kernels (CPU) against float64 central differences (max relative error)."""
    d = _derivation(run)
    if isinstance(d, Result):
        return d
    r = run.grad
    if r.status == "zero":
        return Result("zero", r.figure, "exact zero, confirmed numerically", {"text": "exact"})
    return r


def col_work(run: OpRun) -> Result:
    """Loop iterations of the adjoint over the forward's (te.work, deterministic)."""
    d = _derivation(run)
    if isinstance(d, Result):
        return d
    try:
        live = [g for g in d.grads if g is not None]
        ratio = work(live) / max(work(d.outputs), 1)
    except Exception as e:  # noqa: BLE001
        return Result("fail", None, f"work: {type(e).__name__}: {e}"[:400])
    if d.strategy == "zero":
        return Result("zero", ratio, "no work beyond a zero fill", {"text": ""})
    if ratio > WORK_BUDGET:
        return Result("fail", ratio, f"adjoint costs {ratio:.1f}x the forward "
                                     f"(budget {WORK_BUDGET:g}x)")
    return Result("ok", ratio)


def col_torch(run: OpRun) -> Result:
    """Adjoint (CPU kernels) against torch autograd, max relative difference."""
    return run.torch[0]


def col_torch_time(run: OpRun) -> Result:
    """Backward kernel time over torch.autograd.grad time, same inputs (lower is faster)."""
    return run.torch[1]


def _torch_check(run: OpRun) -> tuple[Result, Result]:
    d = _derivation(run)
    if isinstance(d, Result):
        return d, d
    ref = TORCH_REFS.get(run.entry.name)
    if ref is None:
        na = Result("na", None, "no torch reference for this operator")
        return na, na
    try:
        import torch
        s = d.sample
        ts = [torch.from_numpy(np.array(a)) for a in s.arrays]
        wrt_idx = [list(s.inputs).index(x) for x in d.wrt]
        for k in wrt_idx:
            ts[k].requires_grad_(True)
        outs = ref(*ts)
        want = run.entry.reference(*s.arrays)  # type: ignore[misc]
        float_outs = [o for o in outs if o.dtype.is_floating_point]
        for o, w in zip(outs, want, strict=True):
            if not np.allclose(o.detach().numpy(), w, rtol=1e-9, atol=1e-12):
                bad = Result("fail", None, "torch reference disagrees with the NumPy forward "
                                           "(fix report/torch_refs.py)")
                return bad, Result("na", None, "torch reference broken")
        rng = np.random.default_rng(11)
        heads = [rng.standard_normal(tuple(o.shape)) for o in float_outs]
        th = [torch.from_numpy(h) for h in heads]
        want_g = torch.autograd.grad(float_outs, [ts[k] for k in wrt_idx], th,
                                     retain_graph=True, allow_unused=True)
        live = [g for g in d.grads if g is not None]
        kernel = run.cpu.kernel(live, list(s.inputs) + d.heads)
        args = list(s.arrays) + heads
        got = list(kernel(*args))
        err = 0.0
        it = iter(got)
        for g, w in zip(d.grads, want_g, strict=True):
            mine = np.zeros(np.shape(w) if w is not None else 0) if g is None else next(it)
            ref_g = np.zeros_like(mine) if w is None else w.numpy()
            scale = max(float(np.abs(ref_g).max()) if ref_g.size else 0.0, 1e-300)
            err = max(err, float(np.abs(mine - ref_g).max() / scale) if ref_g.size else 0.0)
        status = "ok" if err <= max(TORCH_TOL, run.entry.tol) else "fail"
        agree = Result(status, err, "" if status == "ok" else f"differs from torch by {err:.2e}")
        ours = _best_time(lambda: kernel(*args))
        theirs = _best_time(lambda: torch.autograd.grad(
            float_outs, [ts[k] for k in wrt_idx], th, retain_graph=True, allow_unused=True))
        ratio = ours / max(theirs, 1e-9)
        return agree, Result("ok", ratio, f"{ours * 1e6:.1f} us vs torch {theirs * 1e6:.1f} us")
    except Exception as e:  # noqa: BLE001
        fail = Result("fail", None, f"torch: {type(e).__name__}: {e}"[:400])
        return fail, Result("na", None, "torch check failed")


def _best_time(fn: Callable[[], object], repeat: int = 7) -> float:
    """Fastest of `repeat` calls after a warm-up (tiny kernels: the minimum is stable)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _optional_check(module: str, attr: str) -> Callable[[OpRun], Result]:
    """A column backed by `module.attr(entry) -> Result`, which may not exist yet."""
    def fn(run: OpRun) -> Result:
        if (r := _no_compute(run.entry)) is not None:
            return r
        try:
            check = getattr(importlib.import_module(module), attr)
            return check(run.entry)
        except Exception as e:  # noqa: BLE001
            return Result("fail", None, f"{type(e).__name__}: {e}"[:400])
    return fn


def _has(module: str, attr: str) -> Callable[[], str]:
    """'' when `module.attr` is importable, else why not."""
    def why_not() -> str:
        try:
            mod = importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - tvm may be absent or broken
            return f"{module} not importable ({type(e).__name__})"
        return "" if hasattr(mod, attr) else f"{module}.{attr} not implemented yet"
    return why_not


def _always() -> str:
    return ""


def _torch_why_not() -> str:
    return "" if torch_available() else "torch not installed"


@dataclass(frozen=True)
class Column:
    key: str                          # JSON key, stable
    title: str                        # short header
    target: str                       # selected by --targets (cpu | torch | tvm | cuda)
    fn: Callable[[OpRun], Result]
    why_not: Callable[[], str]        # '' when enabled, else the reason cells read n/a
    gating: bool                      # a failure here makes the exit code non-zero
    unit: str = ""                    # how the figure is shown: err | ratio | ''

    @property
    def doc(self) -> str:
        return (self.fn.__doc__ or "").strip().splitlines()[0] if self.fn.__doc__ else ""


COLUMNS: tuple[Column, ...] = (
    Column("forward", "fwd cpu", "cpu", col_forward, _always, True, "err"),
    Column("adjoint", "adjoint", "cpu", col_adjoint, _always, True),
    Column("grad", "grad cpu", "cpu", col_grad, _always, True, "err"),
    Column("work", "work", "cpu", col_work, _always, False, "ratio"),
    Column("torch", "torch", "torch", col_torch, _torch_why_not, False, "err"),
    Column("torch_time", "t/torch", "torch", col_torch_time, _torch_why_not, False, "ratio"),
    Column("tvm", "tvm", "tvm", _optional_check("texpr_ad.relax_bridge", "check_op"),
           _has("texpr_ad.relax_bridge", "check_op"), False, "err"),
    Column("cuda", "cuda", "cuda", _optional_check("texpr_ad.kernels", "check_cuda"),
           _has("texpr_ad.kernels", "check_cuda"), False, "err"),
)
COLUMNS_BY_KEY = {c.key: c for c in COLUMNS}
_DOCS = {  # fn docstrings for columns built by factories
    "tvm": "Operator through the TVM Relax bridge: relax.transform.Gradient vs the derived adjoint",
    "cuda": "Forward and adjoint kernels on CUDA against the CPU results (Numba's CUDA simulator when no GPU is present: see environment.cuda_mode)",
}


def column_doc(c: Column) -> str:
    """One line saying what the column checks (no trailing period)."""
    return (_DOCS.get(c.key) or c.doc).rstrip(".")


def select_columns(targets: str) -> list[Column]:
    """Columns whose target is in the comma-separated `targets` ('all' for every one)."""
    want = {t.strip() for t in targets.split(",") if t.strip()}
    known = {c.target for c in COLUMNS}
    if "all" in want:
        want = known
    unknown = want - known
    if unknown:
        raise ValueError(f"unknown target(s) {sorted(unknown)} in --targets; "
                         f"choose from {sorted(known)}")
    return [c for c in COLUMNS if c.target in want]


def evaluate(entry: OpEntry, columns: list[Column], why_not: dict[str, str]) -> dict[str, Any]:
    """One operator's cells: {column key: Result}."""
    run = OpRun(entry)
    cells: dict[str, Any] = {}
    for c in columns:
        if why_not.get(c.key):
            cells[c.key] = Result("na", None, why_not[c.key])
            continue
        try:
            cells[c.key] = c.fn(run)
        except Exception as e:  # noqa: BLE001 - never lose the whole report to one cell
            cells[c.key] = Result("fail", None, f"{type(e).__name__}: {e}"[:400])
    return cells

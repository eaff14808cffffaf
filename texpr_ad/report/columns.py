"""The coverage matrix's columns: one spec per column, evaluated per operator.

A column is `Column(key, title, target, fn, enabled, gating, doc)`: `fn(run)`
maps an `OpRun` (one operator, with its expensive checks memoized so several
columns can share them) to a `testing.Result`.  `enabled()` says whether the
column's dependency is present; when it is not, every cell reads "n/a" with the
reason.  A failing cell in a `gating` column makes `texpr-ad coverage` exit
non-zero.  Adding a column is one line in `COLUMNS`.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import numpy as np

from ..ops.registry import OpEntry
from ..te.work import work
from ..testing import (CachedCPURunner, Derived, Result, Status, check_forward, check_grad,
                       derive, rel_error, timed)
from .torch_refs import TORCH_REFS, torch_available

WORK_BUDGET = 16.0  # adjoint/forward iteration ratio above which the work cell fails
TORCH_TOL = 1e-6    # max relative difference between the adjoint and torch autograd (float64)


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
    return Result(Status.NOCOMPUTE, None, entry.no_compute)


def _derivation(run: OpRun) -> Result | Derived:
    if (r := _no_compute(run.entry)) is not None:
        return r
    d = run.derived
    if isinstance(d, BaseException):
        return Result(Status.FAIL, None, f"derivation: {type(d).__name__}: {d}"[:400])
    if d is None:
        return Result(Status.NONDIFF, None, _nondiff_reason(run.entry))
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
        return Result(Status.ZERO, None, "integer-valued: the gradient is exactly zero",
                      {"text": "zero"})
    return Result(Status.OK, None, f"{strategy} form", {"text": strategy})


def col_grad(run: OpRun) -> Result:
    """Adjoint (CPU) vs float64 central differences: max scale-free |<g,t> - fd| / (|g| |t|)."""
    d = _derivation(run)
    if isinstance(d, Result):
        return d
    r = run.grad
    if r.status == "zero":
        return Result(Status.ZERO, r.figure, "exact zero, confirmed numerically", {"text": "exact"})
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
        return Result(Status.FAIL, None, f"work: {type(e).__name__}: {e}"[:400])
    if d.strategy == "zero":
        return Result(Status.ZERO, ratio, "no work beyond a zero fill", {"text": ""})
    if ratio > WORK_BUDGET:
        return Result(Status.FAIL, ratio, f"adjoint costs {ratio:.1f}x the forward "
                                     f"(budget {WORK_BUDGET:g}x)")
    return Result(Status.OK, ratio)


def col_torch(run: OpRun) -> Result:
    """Adjoint (CPU kernels) against torch autograd, max relative difference."""
    return run.torch[0]


def col_torch_time(run: OpRun) -> Result:
    """Backward kernel time over torch.autograd.grad time on the same small sample, fastest
    of 7 calls each in one process (call overhead dominates; lower is faster)."""
    return run.torch[1]


def _torch_check(run: OpRun) -> tuple[Result, Result]:
    d = _derivation(run)
    if isinstance(d, Result):
        return d, d
    ref = TORCH_REFS.get(run.entry.name)
    if ref is None:
        na = Result(Status.NA, None, "no torch reference for this operator")
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
                bad = Result(Status.FAIL, None, "torch reference disagrees with the NumPy forward "
                                           "(fix report/torch_refs.py)")
                return bad, Result(Status.NA, None, "torch reference broken")
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
            err = max(err, rel_error(mine, np.zeros_like(mine) if w is None else w.numpy()))
        status = Status.OK if err <= max(TORCH_TOL, run.entry.tol) else Status.FAIL
        agree = Result(status, err, "" if status is Status.OK else f"differs from torch by {err:.2e}")
        # tiny kernels: the fastest of 7 calls after a warm-up is the stable figure
        ours = timed(lambda: kernel(*args), repeat=7, stat=min)
        theirs = timed(lambda: torch.autograd.grad(
            float_outs, [ts[k] for k in wrt_idx], th, retain_graph=True, allow_unused=True),
            repeat=7, stat=min)
        ratio = ours / max(theirs, 1e-9)
        return agree, Result(Status.OK, ratio, f"{ours * 1e6:.1f} us vs torch {theirs * 1e6:.1f} us")
    except Exception as e:  # noqa: BLE001
        fail = Result(Status.FAIL, None, f"torch: {type(e).__name__}: {e}"[:400])
        return fail, Result(Status.NA, None, "torch check failed")


def col_tvm(run: OpRun) -> Result:
    """Relax bridge (Gradient, tvm.compile, VM) vs NumPy, our adjoint and central differences."""
    from ..relax_bridge import check_op  # tvm is optional: imported when the column runs
    return _no_compute(run.entry) or check_op(run.entry)


def col_cuda(run: OpRun) -> Result:
    """Forward and adjoint kernels on CUDA against the CPU results
    (Numba's CUDA simulator when no GPU is present: see environment.cuda_mode)."""
    from ..testing.cuda import check_cuda  # numba.cuda is imported when the column runs
    return _no_compute(run.entry) or check_cuda(run.entry)


def _tvm_why_not() -> str:
    """'' when tvm imports; else why not (not installed, or a broken install: its error)."""
    if importlib.util.find_spec("tvm") is None:
        return "tvm not installed"
    from ..relax_bridge.tvm_expr import tvm_import_error
    return tvm_import_error() or ""


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
        """The first paragraph of the column function's docstring, on one line."""
        para = (self.fn.__doc__ or "").strip().split("\n\n")[0]
        return " ".join(line.strip() for line in para.splitlines())


COLUMNS: tuple[Column, ...] = (
    Column("forward", "fwd cpu", "cpu", col_forward, _always, True, "err"),
    Column("adjoint", "adjoint", "cpu", col_adjoint, _always, True),
    Column("grad", "grad cpu", "cpu", col_grad, _always, True, "err"),
    Column("work", "work", "cpu", col_work, _always, False, "ratio"),
    Column("torch", "torch", "torch", col_torch, _torch_why_not, False, "err"),
    Column("torch_time", "t/torch", "torch", col_torch_time, _torch_why_not, False, "ratio"),
    Column("tvm", "tvm", "tvm", col_tvm, _tvm_why_not, False, "err"),
    Column("cuda", "cuda", "cuda", col_cuda, _always, False, "err"),
)
COLUMNS_BY_KEY = {c.key: c for c in COLUMNS}


def column_doc(c: Column) -> str:
    """One line saying what the column checks (no trailing period)."""
    return c.doc.rstrip(".")


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
            cells[c.key] = Result(Status.NA, None, why_not[c.key])
            continue
        try:
            cells[c.key] = c.fn(run)
        except Exception as e:  # noqa: BLE001 - never lose the whole report to one cell
            cells[c.key] = Result(Status.FAIL, None, f"{type(e).__name__}: {e}"[:400])
    return cells

"""The numbers every check reports: statuses, relative errors, gradient checks, timings.

NumPy only (no te, no kernels), so every layer can use it:

    err = rel_error(got, want)                      # max |got - want| / max |want|
    err = grad_error(loss, arrays, {0: g0}, eps=fd_step(dtypes), rng=rng)
    t = timed(lambda: kernel(*args), repeat=5)      # median seconds
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np


class Status(str, Enum):
    """What a check concluded.  A `str`, so JSON and `status == "ok"` read the value."""

    OK = "ok"                # works; the figure is the error or the ratio
    ZERO = "zero"            # the gradient is exactly zero (integer-valued function)
    NONDIFF = "nondiff"      # no float input or no float output by definition
    NOCOMPUTE = "nocompute"  # the operator has no index-expression form
    FAIL = "fail"            # failed; the detail says why
    NA = "na"                # not available here: a dependency or a reference is absent
    SKIP = "skip"            # the check could not run here (no GPU, the reference fails);
    #                          a coverage cell shows it as NA

    def __str__(self) -> str:
        return self.value


@dataclass
class Result:
    """One check's outcome: a status, its figure (an error or a ratio), why, and extras."""

    status: Status
    figure: float | None = None
    detail: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # a misspelled status fails here, not in a report


def rel_error(got: object, want: object, what: str = "") -> float:
    """max |got - want| / max |want| (0 for empty arrays), the figure of every comparison.

    NaN and infinities agree where both arrays have the same value (as NumPy's
    `assert_allclose(equal_nan=True)`); anywhere else a non-finite value gives inf, as
    does any difference between integer or bool arrays.  A shape mismatch raises
    ValueError naming `what`.
    """
    a, b = np.asarray(got), np.asarray(want)
    if a.shape != b.shape:
        raise ValueError(f"{what + ': ' if what else ''}got shape {a.shape}, "
                         f"reference shape {b.shape}")
    if a.size == 0:
        return 0.0
    if not (np.issubdtype(b.dtype, np.inexact) or np.issubdtype(a.dtype, np.inexact)):
        return 0.0 if np.array_equal(a, b) else float("inf")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (np.isnan(a64) & np.isnan(b64)) | (a64 == b64)  # nan and inf in the same places
    if not same.all() and not (np.isfinite(a64[~same]).all() and np.isfinite(b64[~same]).all()):
        return float("inf")
    d = np.where(same, 0.0, np.abs(a64 - b64))
    scale = max(float(np.abs(np.where(np.isfinite(b64), b64, 0.0)).max()), 1e-300)
    return float(d.max() / scale)


def fd_step(dtypes: Iterable[str]) -> float:
    """Central-difference step for a function whose outputs have `dtypes`: values rounded
    to float32 (or less) need a much wider step than float64 ones."""
    return 1e-6 if all(str(d) == "float64" for d in dtypes) else 1e-2


def grad_error(loss: Callable[[list[np.ndarray]], float], arrays: Sequence[np.ndarray],
               grads: Mapping[int, np.ndarray], eps: float = 1e-6, directions: int = 2,
               rng: np.random.Generator | None = None) -> float:
    """Worst error of gradients of a scalar `loss` against float64 central differences.

    `loss(arrays)` is the function; `grads[k]` its claimed gradient with respect to
    `arrays[k]`.  Along `directions` random directions t per argument (drawn from
    `rng`, in the order of `grads`), the error is

        |<g, t> - (loss(x + eps t) - loss(x - eps t)) / (2 eps)| / (|g| |t|)

    which is scale-free and does not blow up when the directional derivative cancels;
    when g is zero it is |fd| / (|loss(x)| + 1).  Perturbed arguments keep their dtype.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    base = list(arrays)
    worst = 0.0
    for k, g in grads.items():
        x = base[k]
        for _ in range(directions):
            t = rng.standard_normal(np.shape(g))
            plus, minus = list(base), list(base)
            plus[k] = np.asarray(x + eps * t).astype(np.asarray(x).dtype)
            minus[k] = np.asarray(x - eps * t).astype(np.asarray(x).dtype)
            fd = (loss(plus) - loss(minus)) / (2 * eps)
            scale = float(np.linalg.norm(g) * np.linalg.norm(t))
            err = abs(float(np.vdot(g, t)) - fd) / scale if scale else \
                abs(fd) / (abs(loss(base)) + 1.0)
            worst = max(worst, err)
    return worst


def numerical_grad(f: Callable[..., float], arrays: Sequence[np.ndarray], k: int,
                   eps: float = 1e-6) -> np.ndarray:
    """The full gradient of scalar `f(*arrays)` with respect to `arrays[k]` by float64
    central differences, one element at a time (small arrays: tests).  Float arrays are
    passed as float64; integer ones (indices) as they are."""
    xs = [np.asarray(x, np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating)
          else np.asarray(x) for x in arrays]
    g = np.zeros(xs[k].shape)
    for pos in np.ndindex(xs[k].shape):
        hi, lo = list(xs), list(xs)
        hi[k], lo[k] = xs[k].copy(), xs[k].copy()
        hi[k][pos] += eps
        lo[k][pos] -= eps
        g[pos] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


def sample_times(*fns: Callable[[], object], repeat: int = 3,
                 warmup: int = 1) -> list[list[float]]:
    """Wall seconds of `repeat` calls of each of `fns`, after `warmup` rounds; the calls are
    interleaved round by round so that every function sees the same machine load, and the order
    rotates every round, so that no function always runs right after the same other one (whose
    thread pool may still be spinning)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(repeat):
        for k in range(len(fns)):
            j = (k + r) % len(fns)
            t0 = time.perf_counter()
            fns[j]()
            times[j].append(time.perf_counter() - t0)
    return times


def timed(fn: Callable[[], object], repeat: int = 3, warmup: int = 1,
          stat: Callable[[list[float]], float] = statistics.median) -> float:
    """`stat` (median; `min` for tiny kernels, where the fastest run is the stable figure)
    of `repeat` wall times of fn() after `warmup` calls, in seconds."""
    return float(stat(sample_times(fn, repeat=repeat, warmup=warmup)[0]))


__all__ = ["Result", "Status", "fd_step", "grad_error", "numerical_grad", "rel_error",
           "sample_times", "timed"]

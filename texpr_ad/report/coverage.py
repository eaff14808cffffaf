"""Run the coverage matrix: every selected operator x every selected column.

    report = run_coverage(select("conv*"), select_columns("cpu,torch"), jobs=2)
    report.failures       # gating failures; the CLI exits 1 when there are any

Operators are independent, so `jobs > 1` evaluates them in worker processes
(spawn-safe: workers receive operator names and column keys, and look the
entries up in the registry themselves); results come back in registry order.
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime
import json
import multiprocessing
import os
import platform
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..kernels.cache import cache_dir, compile_counts
from ..kernels.threads import set_num_threads
from ..ops.registry import OpEntry, get
from ..testing import Result, Status
from .columns import COLUMNS_BY_KEY, Column, column_doc, evaluate

SCHEMA = "texpr_ad.coverage/1"


@dataclass(frozen=True)
class Legend:
    symbol: str
    label: str
    description: str


# The legend, in display order (like the hand-kept status tables of TVM contributors).
LEGEND: dict[Status, Legend] = {
    Status.OK: Legend("✓", "working", "works; the figure is the max relative error or the ratio"),
    Status.ZERO: Legend("0", "integer gradient — exact zero",
                   "integer-valued function (floor, round, sign, ...): the gradient is exactly 0"),
    Status.NONDIFF: Legend("–", "not differentiable",
                      "no float input or no float output by definition (comparisons, argmax, "
                      "casts to int, constants)"),
    Status.NOCOMPUTE: Legend("∅", "no compute form",
                        "no index-expression form (sequential / data-dependent output size)"),
    Status.FAIL: Legend("✗", "failed", "failed; the reason is in the cell's detail"),
    Status.NA: Legend("·", "n/a",
                      "not available: dependency absent, no reference, or not checked"),
}


@dataclass(frozen=True)
class Cell:
    status: Status
    figure: float | None
    detail: str
    text: str                    # compact rendering of the figure ('' when none)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "figure": self.figure, "detail": self.detail,
                "text": self.text}


@dataclass(frozen=True)
class Row:
    name: str
    category: str
    notes: str
    cells: dict[str, Cell]
    seconds: float
    compiled: int = 0            # CPU kernel functions compiled for this row
    loaded: int = 0              # ... and loaded compiled from the disk cache


@dataclass
class Report:
    columns: list[Column]
    rows: list[Row]
    environment: dict[str, Any]
    generated: str
    elapsed_s: float
    na_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> list[tuple[str, str, str]]:
        """(operator, column, detail) of failed cells in gating columns."""
        return [(r.name, c.key, r.cells[c.key].detail) for r in self.rows for c in self.columns
                if c.gating and r.cells[c.key].status is Status.FAIL]

    @property
    def all_failures(self) -> list[tuple[str, str, str]]:
        return [(r.name, c.key, r.cells[c.key].detail) for r in self.rows for c in self.columns
                if r.cells[c.key].status is Status.FAIL]

    def counts(self) -> dict[str, dict[str, int]]:
        """{column: {status: count}} over the rows, every legend status present."""
        out: dict[str, dict[str, int]] = {}
        for c in self.columns:
            n: dict[str, int] = {s: 0 for s in LEGEND}
            for r in self.rows:
                st = r.cells[c.key].status
                n[st] = n.get(st, 0) + 1
            out[c.key] = n
        return out

    def summary_line(self) -> str:
        """`N operators in T s — fwd cpu 140 ok 4 nocompute; ... — OK` (counts per status)."""
        parts = []
        for c in self.columns:
            n = self.counts()[c.key]
            parts.append(f"{c.title} " + " ".join(f"{v} {s}" for s, v in n.items() if v))
        verdict = ("OK" if not self.failures else
                   f"{len(self.failures)} gating failure(s)")
        return (f"{len(self.rows)} operators in {self.elapsed_s:.1f} s — " + "; ".join(parts)
                + f" — {verdict}")

    def kernels_line(self) -> str:
        """`CPU kernels: 3 compiled, 412 loaded from the disk cache (.texpr_cache)`."""
        compiled = sum(r.compiled for r in self.rows)
        loaded = sum(r.loaded for r in self.rows)
        return (f"CPU kernels: {compiled} compiled, {loaded} loaded from the disk cache "
                f"({self.environment.get('cache_dir')})")

    def header_line(self) -> str:
        """Where the figures come from: the CPU, the kernels' code path and threads, the cuda
        mode, and how t/torch is timed (the first line of every rendering)."""
        env = self.environment
        torch = (f", torch on {env['torch_threads']}; t/torch: fastest of 7 calls each, same "
                 "process" if "torch" in env.get("targets", ()) else "")
        return (f"CPU: {env.get('cpu')} ({env.get('cpu_count')} logical cores); kernels: Numba "
                f"target='cpu', {env.get('threads')} thread(s) each{torch}; cuda: "
                f"{env.get('cuda_mode')}")

    def verdict_line(self) -> str:
        """`N operators in T s — OK` or the gating failures by name."""
        head = f"{len(self.rows)} operators in {self.elapsed_s:.1f} s — "
        if not self.failures:
            return head + "OK: no gating failure"
        names = ", ".join(f"{o} [{c}]" for o, c, _ in self.failures[:8])
        more = f" and {len(self.failures) - 8} more" if len(self.failures) > 8 else ""
        return head + f"{len(self.failures)} gating failure(s): {names}{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "generated": self.generated,
            "environment": self.environment,
            "columns": [{"key": c.key, "title": c.title, "target": c.target,
                         "description": column_doc(c), "gating": c.gating,
                         "available": not self.na_reasons.get(c.key),
                         "unavailable_reason": self.na_reasons.get(c.key, "")}
                        for c in self.columns],
            "legend": {k: {"symbol": v.symbol, "label": v.label, "description": v.description}
                       for k, v in LEGEND.items()},
            "operators": [{"name": r.name, "category": r.category, "notes": r.notes,
                           "seconds": round(r.seconds, 3),
                           "cells": {k: c.to_json() for k, c in r.cells.items()}}
                          for r in self.rows],
            "summary": {
                "operators": len(self.rows),
                "by_column": self.counts(),
                "gating_failures": [{"operator": o, "column": c, "detail": d}
                                    for o, c, d in self.failures],
                "other_failures": [{"operator": o, "column": c, "detail": d}
                                   for o, c, d in self.all_failures
                                   if (o, c, d) not in self.failures],
                "ok": not self.failures,
                "elapsed_s": round(self.elapsed_s, 2),
                "kernels_compiled": sum(r.compiled for r in self.rows),
                "kernels_loaded": sum(r.loaded for r in self.rows),
            },
        }


def format_figure(status: str, figure: float | None, unit: str, extra: dict[str, object]) -> str:
    if "text" in extra:
        return str(extra["text"])
    if figure is None:
        return ""
    if unit == "ratio":
        return f"{figure:.2g}x" if figure < 10 else f"{figure:.0f}x"
    if figure == 0.0:
        return "0"
    return f"{figure:.0e}".replace("e-0", "e-").replace("e+0", "e+")


def _to_cell(col: Column, r: Result) -> Cell:
    fig = None if r.figure is None else float(r.figure)
    status = Status.NA if r.status is Status.SKIP else r.status  # the matrix: not checked here
    return Cell(status, fig, r.detail, format_figure(status, fig, col.unit, r.extra))


def _evaluate_row(name: str, keys: Sequence[str], why_not: dict[str, str],
                  entry: OpEntry | None = None) -> Row:
    """One operator's row (runs in a worker process when jobs > 1)."""
    entry = entry or get(name)
    cols = [COLUMNS_BY_KEY[k] for k in keys]
    t0 = time.perf_counter()
    c0, l0 = compile_counts()
    results = evaluate(entry, cols, why_not)
    cells = {c.key: _to_cell(c, results[c.key]) for c in cols}
    c1, l1 = compile_counts()
    return Row(entry.name, entry.category, entry.notes or entry.no_compute, cells,
               time.perf_counter() - t0, c1 - c0, l1 - l0)


def _worker_init() -> None:
    # one operator per process at a time: keep Numba/torch from oversubscribing the cores
    set_num_threads(1)
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass


def _cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def environment(jobs: int, targets: Sequence[str], workers: bool = False) -> dict[str, Any]:
    """The machine, the threads kernels (and torch) ran on (one per worker process), and the
    versions of the libraries involved (from package metadata)."""
    import sys
    from importlib import metadata

    from ..kernels.threads import num_threads
    torch = sys.modules.get("torch")
    env: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform(),
                           "cpu": _cpu_name(), "cpu_count": os.cpu_count(),
                           "threads": 1 if workers else num_threads(),
                           "torch_threads": 1 if workers else torch and torch.get_num_threads(),
                           "jobs": jobs, "targets": list(targets),
                           "cuda_mode": cuda_mode(targets), "cache_dir": str(cache_dir())}
    for key, dist in (("numpy", "numpy"), ("numba", "numba"), ("sympy", "sympy"),
                      ("torch", "torch"), ("tvm", "apache-tvm"), ("texpr_ad", "texpr_ad")):
        try:
            env[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            env[key] = None
    return env


def cuda_mode(targets: Sequence[str]) -> str:
    """How the cuda column ran: "simulator" (Numba's, on the CPU: no GPU ran), "gpu",
    "unavailable" (its cells say why) or "not run" (not in --targets)."""
    if "cuda" not in targets:
        return "not run"
    from ..kernels.cuda_runtime import load_cuda, simulating
    try:
        return "simulator" if simulating() else "gpu" if load_cuda().is_available() else \
            "unavailable"
    except ImportError:
        return "unavailable"


def previous_seconds(path: str | os.PathLike[str]) -> dict[str, float]:
    """Per-operator seconds from an earlier JSON report (empty if none or unreadable)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return {o["name"]: float(o.get("seconds", 0.0)) for o in doc["operators"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def run_coverage(entries: Sequence[OpEntry], columns: Sequence[Column], jobs: int = 1,
                 progress: Callable[[int, int, str], None] | None = None,
                 in_process: bool = False, cost_hint: dict[str, float] | None = None) -> Report:
    """Evaluate `columns` for every entry.  `in_process=True` (or jobs <= 1) keeps the
    entries as given (needed for entries that are not in the registry).  With workers,
    `cost_hint` (seconds per operator, e.g. from the last report) submits the slowest
    first, so one long operator does not finish alone at the end."""
    t0 = time.perf_counter()
    keys = [c.key for c in columns]
    why_not = {c.key: c.why_not() for c in columns}
    rows: list[Row | None] = [None] * len(entries)
    total = len(entries)
    done = 0
    workers = jobs > 1 and not in_process and total > 1
    if not workers:
        for i, e in enumerate(entries):
            if progress:
                progress(done, total, e.name)
            rows[i] = _evaluate_row(e.name, keys, why_not, e)
            done += 1
    else:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                    initializer=_worker_init) as pool:
            hint = cost_hint or {}
            order = sorted(range(total), key=lambda i: -hint.get(entries[i].name, 0.0))
            futs = {pool.submit(_evaluate_row, entries[i].name, keys, why_not): i for i in order}
            for f in cf.as_completed(futs):
                i = futs[f]
                try:
                    rows[i] = f.result()
                except Exception as ex:  # noqa: BLE001 - a crashed worker fails its row only
                    e = entries[i]
                    bad = Cell(Status.FAIL, None,
                               f"worker crashed: {type(ex).__name__}: {ex}"[:400], "")
                    rows[i] = Row(e.name, e.category, e.notes, {k: bad for k in keys}, 0.0)
                done += 1
                if progress:
                    progress(done, total, entries[i].name)
    if progress:
        progress(total, total, "")
    elapsed = time.perf_counter() - t0
    gen = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    env = environment(jobs, sorted({c.target for c in columns}), workers)
    if env["cuda_mode"] == "simulator":  # say it where the cells are read, not only in the header
        columns = [replace(c, title="cuda sim") if c.key == "cuda" else c for c in columns]
    return Report(list(columns), [r for r in rows if r is not None], env, gen, elapsed,
                  {k: v for k, v in why_not.items() if v})

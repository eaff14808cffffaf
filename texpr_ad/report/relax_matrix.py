"""The Relax matrix: one row per Relax tensor op of the installed TVM, through the real pass.

`run_relax_matrix()` (needs apache-tvm; imports `texpr_ad.relax_bridge` lazily):

1. classifies every Relax tensor op (stock gradient / derivable from pure te or from texpr_ad's
   own te (`relax_bridge/own_te.py`) / no-grad / handled by the pass / rewritten before the pass
   (`static_strided_slices`) / not derivable, with the reason);
2. checks every op with a hand-written gradient (and the variants where TVM's were found
   wrong) through `Gradient` + `tvm.compile(llvm)` + VM against central differences, then the
   derived gradient installed in its place, and how far the two gradients differ;
3. calls `register_missing_gradients()` and checks every derived and no-grad op the same way.

Rendered as Markdown, JSON or a terminal table (`texpr-ad coverage --relax`).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

KINDS = {  # kind -> how the matrix says it
    "stock": "stock gradient", "derivable": "derived", "no-grad": "no-grad",
    "native": "pass handles it", "rewritten": "rewritten", "not-derivable": "not derivable",
}
AGREE_TOL = 1e-6  # max relative difference for "agrees" (float64 samples)


@dataclass
class RelaxRow:
    """One op (or op variant) of the matrix."""

    op: str
    kind: str
    reason: str = ""
    check: str = "-"              # "ok", "fail" or "-" (not run)
    error: float | None = None    # scale-free central-difference error (or max |g| if zero)
    detail: str = ""
    derived: str = "-"            # for stock ops: the derived gradient's check
    derived_error: float | None = None
    agreement: float | None = None  # max relative difference stock vs derived gradient
    note: str = ""
    seconds: float = 0.0


@dataclass
class RelaxReport:
    """The matrix and its counts."""

    rows: list[RelaxRow]
    tvm_version: str
    seconds: float
    counts: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[RelaxRow]:
        """Rows whose own check failed, other than stock gradients (TVM's, not ours)."""
        return [r for r in self.rows if r.check == "fail" and r.kind != "stock"]


def _counts(rows: list[RelaxRow]) -> dict[str, Any]:
    plain = [r for r in rows if "[" not in r.op]
    c: dict[str, Any] = {"tensor_ops": len(plain)}
    for k in KINDS:
        c[k] = sum(r.kind == k for r in plain)
    derived = [r for r in plain if r.kind == "derivable"]
    c["derived_ok"] = sum(r.check == "ok" for r in derived)
    c["derived_failed"] = [r.op for r in derived if r.check != "ok"]
    nog = [r for r in plain if r.kind == "no-grad"]
    c["no_grad_ok"] = sum(r.check == "ok" for r in nog)
    c["no_grad_unchecked"] = [r.op for r in nog if r.check == "-"]  # no sample: the note says why
    c["rewritten_ok"] = sum(r.check == "ok" for r in plain if r.kind == "rewritten")
    stock = [r for r in rows if r.kind == "stock"]
    c["stock_checked"] = sum(r.check != "-" for r in stock)
    c["stock_ok"] = sum(r.check == "ok" for r in stock)
    c["override_ok"] = sum(r.derived == "ok" for r in stock)
    c["override_agree"] = sum(r.agreement is not None and r.agreement <= AGREE_TOL
                              for r in stock)
    return c


def run_relax_matrix(ops: list[str] | None = None, compare: bool = True,
                     progress: Callable[[str], None] | None = None) -> RelaxReport:
    """The Relax matrix over `ops` (default: every tensor op and every variant)."""
    from ..relax_bridge import relax_ops as ro
    from ..relax_bridge import relax_opcheck as oc
    from ..relax_bridge.relax_samples import KINK_CONVENTIONS, NO_SAMPLE, SAMPLES, TVM_DEFECTS, \
        VARIANTS, op_of
    t0 = time.perf_counter()
    names = ops or ro.tensor_ops() + sorted(VARIANTS)
    classes = {op: ro.classify(op) for op in {op_of(n) for n in names}}
    rows = []
    for name in names:
        c = classes[op_of(name)]
        note = TVM_DEFECTS.get(name, "") or KINK_CONVENTIONS.get(name, "") or (
            f"not checked: {NO_SAMPLE[name]}" if name in NO_SAMPLE and c.kind == "no-grad" else "")
        rows.append(RelaxRow(name, c.kind, c.reason, note=note))
    by_name = {r.op: r for r in rows}
    testable = [r for r in rows if r.op in SAMPLES or r.op in VARIANTS]

    for r in testable:  # 2: hand-written gradients, and the derived one in their place
        if r.kind != "stock":
            continue
        if progress:
            progress(r.op)
        t = time.perf_counter()
        if compare:
            stock, mine, diff = oc.compare_with_stock(r.op)
            r.derived, r.derived_error = mine.status, mine.error
            r.agreement = diff if diff == diff else None  # NaN: nothing to compare
            if mine.status != "ok":
                r.note = (r.note + "; " if r.note else "") + f"derived: {mine.detail}"
        else:
            stock = oc.check(r.op)
        r.check, r.error, r.detail = stock.status, stock.error, stock.detail
        r.seconds = time.perf_counter() - t

    ro.register_missing_gradients([op for op, c in classes.items()
                                   if c.kind in ("derivable", "no-grad", "rewritten")])
    for r in testable:  # 3: the ops that had no gradient
        if r.kind not in ("derivable", "no-grad", "native", "rewritten"):
            continue
        if progress:
            progress(r.op)
        res = oc.check(r.op)
        r.check, r.error, r.detail, r.seconds = res.status, res.error, res.detail, res.seconds
    assert all(by_name[r.op] is r for r in rows)
    return RelaxReport(rows, ro.tvm_version(), time.perf_counter() - t0, _counts(rows))


# -- renderings ------------------------------------------------------------------------------

def _fig(status: str, err: float | None) -> str:
    if status == "-":
        return "-"
    return f"{status} {err:.1e}" if err is not None else status


def _cells(r: RelaxRow) -> list[str]:
    agree = "-" if r.agreement is None else f"{r.agreement:.1e}"
    why = r.reason if r.kind in ("not-derivable", "native", "no-grad", "rewritten") else ""
    return [r.op, KINDS[r.kind], _fig(r.check, r.error), _fig(r.derived, r.derived_error), agree,
            "; ".join(x for x in (why, r.detail, r.note) if x)]


HEADS = ["op", "gradient", "check (pass vs central diff.)", "derived in its place",
         "stock vs derived", "notes"]


def summary_lines(rep: RelaxReport) -> list[str]:
    c = rep.counts
    return [
        f"TVM {rep.tvm_version}: {c['tensor_ops']} Relax tensor ops: {c['stock']} with a "
        f"hand-written gradient, {c['derivable']} derived ({c['derived_ok']} pass), "
        f"{c['no-grad']} no-grad ({c['no_grad_ok']} pass, {len(c['no_grad_unchecked'])} not "
        f"checked: {', '.join(c['no_grad_unchecked']) or 'none'}), {c['native']} handled by the "
        f"pass, "
        f"{c['rewritten']} rewritten before it ({c['rewritten_ok']} pass), "
        f"{c['not-derivable']} not derivable.",
        f"hand-written gradients (incl. variants): {c['stock_ok']}/{c['stock_checked']} pass; "
        f"derived in their place: {c['override_ok']} pass, {c['override_agree']} agree within "
        f"{AGREE_TOL:g}.",
        "derived failures: " + (", ".join(c["derived_failed"]) or "none") +
        f".  {rep.seconds:.0f} s.",
    ]


def render_relax_markdown(rep: RelaxReport) -> str:
    esc = lambda s: s.replace("|", "\\|")  # noqa: E731
    lines = ["# Relax ops through `relax.transform.Gradient`", ""] + summary_lines(rep) + [
        "", "Errors are scale-free |<g, t> - fd| / (|g| |t|) against central differences of the "
        "compiled forward (float64; float32 where TVM's legalization needs it, tolerance 2e-2); "
        "integer/bool outputs and no_grad must give exactly zero.", "",
        "| " + " | ".join(HEADS) + " |", "|" + " --- |" * len(HEADS)]
    lines += ["| " + " | ".join(esc(x) for x in _cells(r)) + " |" for r in rep.rows]
    return "\n".join(lines) + "\n"


def render_relax_json(rep: RelaxReport) -> str:
    return json.dumps({"tvm": rep.tvm_version, "seconds": rep.seconds, "counts": rep.counts,
                       "rows": [asdict(r) for r in rep.rows]}, indent=1) + "\n"


def render_relax_table(rep: RelaxReport) -> str:
    from .term import table_text
    return "\n".join([table_text(HEADS, [_cells(r) for r in rep.rows]), ""] + summary_lines(rep))


RELAX_RENDERERS = {"md": (".relax.md", render_relax_markdown),
                   "json": (".relax.json", render_relax_json)}



def select_ops(globs: str) -> list[str]:
    """Relax tensor ops and variants matching comma-separated globs ("*" is all of them)."""
    import fnmatch
    from ..relax_bridge.relax_ops import tensor_ops
    from ..relax_bridge.relax_samples import VARIANTS
    names = tensor_ops() + sorted(VARIANTS)
    pats = [g.strip() for g in globs.split(",") if g.strip()] or ["*"]
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) or
                                    fnmatch.fnmatchcase(n, "relax." + p) for p in pats)]


def write_relax_report(rep: RelaxReport, base: Path, formats: list[str]) -> list[Path]:
    """Write `<base>.relax.md` / `.relax.json` for `formats`; the paths written."""
    out = []
    for f in formats:
        ext, fn = RELAX_RENDERERS[f]
        path = base.with_name(base.name + ext)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(fn(rep), encoding="utf-8")
        out.append(path)
    return out


__all__ = ["RELAX_RENDERERS", "RelaxReport", "RelaxRow", "render_relax_json",
           "render_relax_markdown", "render_relax_table", "run_relax_matrix", "select_ops",
           "summary_lines", "write_relax_report"]

"""Renderings of a coverage `Report`: terminal table, Markdown, JSON, one-file HTML."""
from __future__ import annotations

import html
import json
import os
from typing import Callable

from .coverage import LEGEND, Cell, Report
from .term import STATUS_STYLES, table_text


def cell_text(c: Cell) -> str:
    sym = LEGEND[c.status].symbol if c.status in LEGEND else c.status
    return f"{sym} {c.text}".rstrip()


def render_table(report: Report, color: bool | None = None) -> str:
    """Aligned terminal table (rich) with status symbols, ANSI colours when `color`, then
    the legend, the failures, the kernel counts and the summary line."""
    if color is None:
        color = bool(os.environ.get("FORCE_COLOR")) or False
    heads = ["operator", "cat"] + [c.title for c in report.columns]
    rows = [[r.name, r.category] + [cell_text(r.cells[c.key]) for c in report.columns]
            for r in report.rows]
    styles: list[list[str | None]] = [
        [None, None, *(STATUS_STYLES.get(r.cells[c.key].status) for c in report.columns)]
        for r in report.rows]
    lines = [report.header_line(), table_text(heads, rows, styles, color=color)]
    lines.append("")
    lines.append("legend: " + "   ".join(f"{v.symbol} {v.label}" for v in LEGEND.values()))
    lines.extend(_failure_lines(report))
    lines.append(report.kernels_line())
    lines.append(report.summary_line())
    return "\n".join(lines)


def _failure_lines(report: Report) -> list[str]:
    fails = report.all_failures
    if not fails:
        return []
    gating = set(report.failures)
    out = ["failures:"]
    for o, c, d in fails:
        tag = "" if (o, c, d) in gating else " (not gating)"
        out.append(f"  {o} [{c}]{tag}: {d}")
    return out


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    env = report.environment
    meta = (f"Generated {report.generated} in {report.elapsed_s:.1f} s "
            f"(jobs: {env.get('jobs')}; Python {env.get('python')}, numba {env.get('numba')}, "
            f"torch {env.get('torch') or 'absent'}, tvm {env.get('tvm') or 'absent'}, "
            f"cuda: {env.get('cuda_mode')}).")
    out = ["# texpr_ad operator coverage", "", meta, "", _md_escape(report.header_line()), "",
           "| status | meaning |", "| --- | --- |"]
    out += [f"| {v.symbol} {v.label} | {_md_escape(v.description)} |" for v in LEGEND.values()]
    out += ["", "| column | what it checks |", "| --- | --- |"]
    from .columns import column_doc
    for c in report.columns:
        why = report.na_reasons.get(c.key)
        note = f" *(n/a: {why})*" if why else ""
        gate = " Gating." if c.gating else ""
        out.append(f"| {c.title} | {_md_escape(column_doc(c))}.{gate}{note} |")
    out += ["", "| operator | cat | " + " | ".join(c.title for c in report.columns) + " |",
            "| --- | --- | " + " | ".join("---" for _ in report.columns) + " |"]
    for r in report.rows:
        out.append(f"| {r.name} | {r.category} | "
                   + " | ".join(_md_escape(cell_text(r.cells[c.key])) for c in report.columns)
                   + " |")
    fails = report.all_failures
    if fails:
        out += ["", "## Failures", ""]
        gating = set(report.failures)
        out += [f"- **{o}** `{c}`{'' if (o, c, d) in gating else ' (not gating)'}: "
                f"{_md_escape(d)}" for o, c, d in fails]
    out += ["", "## Summary", "", report.summary_line(), "", report.kernels_line(), ""]
    return "\n".join(out)


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=1, ensure_ascii=False) + "\n"


_COLORS = {"ok": ("#d9f2d9", "#17601a"), "zero": ("#d6ecf7", "#0f4c6e"),
           "nondiff": ("#ececec", "#555"), "nocompute": ("#d8d8d8", "#333"),
           "fail": ("#f8c9c4", "#8a1005"), "na": ("#fafafa", "#aaa")}

_CSS = """
body{font:13px/1.35 system-ui,-apple-system,'Segoe UI',sans-serif;margin:18px;color:#222}
h1{font-size:20px;margin:0 0 4px} .meta{color:#666;margin-bottom:10px}
.summary{margin:10px 0;padding:8px 10px;border-radius:6px;font-weight:600}
.summary.good{background:#d9f2d9;color:#17601a} .summary.bad{background:#f8c9c4;color:#8a1005}
table{border-collapse:collapse} th,td{border:1px solid #fff;padding:2px 7px;white-space:nowrap}
thead th{position:sticky;top:0;background:#333;color:#fff;font-weight:600;z-index:1}
td.op{font-family:ui-monospace,Menlo,monospace;background:#f4f4f4}
td.cat{color:#777;background:#f4f4f4;text-align:center}
td.c{text-align:center;font-family:ui-monospace,Menlo,monospace;font-size:12px}
.legend{display:flex;flex-wrap:wrap;gap:6px;margin:8px 0 12px}
.legend span{padding:3px 8px;border-radius:4px}
.counts td,.counts th{padding:2px 8px;border:1px solid #ddd;text-align:right}
.counts th{background:#eee;color:#222;position:static}
.fails li{margin:2px 0} code{font-family:ui-monospace,Menlo,monospace}
"""


def _style(status: str) -> str:
    bg, fg = _COLORS.get(status, ("#fff", "#000"))
    return f"background:{bg};color:{fg}"


def render_html(report: Report) -> str:
    """One self-contained page: inline CSS, no scripts, no network."""
    e = html.escape
    env = report.environment
    ok = not report.failures
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>texpr_ad operator coverage</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>texpr_ad operator coverage</h1>",
             (f"<div class='meta'>generated {e(report.generated)} in {report.elapsed_s:.1f} s · "
              f"jobs: {env.get('jobs')} · Python {e(str(env.get('python')))} · numba "
              f"{e(str(env.get('numba')))} · torch {e(str(env.get('torch') or 'absent'))} · "
              f"tvm {e(str(env.get('tvm') or 'absent'))} · cuda: "
              f"{e(str(env.get('cuda_mode')))}<br>{e(report.header_line())}</div>"),
             f"<div class='summary {'good' if ok else 'bad'}'>{e(report.verdict_line())}</div>",
             "<div class='legend'>"]
    parts += [f"<span style='{_style(k)}' title='{e(v.description)}'>{e(v.symbol)} "
              f"{e(v.label)}</span>" for k, v in LEGEND.items()]
    parts.append("</div>")
    from .columns import column_doc
    heads = "".join(
        f"<th title='{e(column_doc(c))}"
        f"{e(' (n/a: ' + report.na_reasons[c.key] + ')') if c.key in report.na_reasons else ''}'>"
        f"{e(c.title)}</th>" for c in report.columns)
    parts.append(f"<table><thead><tr><th>operator</th><th>cat</th>{heads}</tr></thead><tbody>")
    for r in report.rows:
        tds = "".join(
            f"<td class='c' style='{_style(c.status)}' title='{e(c.detail or c.status)}'>"
            f"{e(cell_text(c))}</td>" for c in (r.cells[col.key] for col in report.columns))
        parts.append(f"<tr><td class='op' title='{e(r.notes)}'>{e(r.name)}</td>"
                     f"<td class='cat'>{e(r.category)}</td>{tds}</tr>")
    parts.append("</tbody></table>")
    counts = report.counts()
    parts.append("<h2>Counts</h2><table class='counts'><tr><th>column</th>"
                 + "".join(f"<th>{e(v.symbol)} {e(v.label)}</th>" for v in LEGEND.values())
                 + "</tr>")
    for c in report.columns:
        parts.append(f"<tr><th>{e(c.title)}</th>"
                     + "".join(f"<td>{counts[c.key].get(s, 0)}</td>" for s in LEGEND) + "</tr>")
    parts.append("</table>")
    fails = report.all_failures
    if fails:
        gating = set(report.failures)
        parts.append("<h2>Failures</h2><ul class='fails'>")
        parts += [f"<li><code>{e(o)}</code> [{e(c)}]"
                  f"{'' if (o, c, d) in gating else ' (not gating)'}: {e(d)}</li>"
                  for o, c, d in fails]
        parts.append("</ul>")
    parts.append("<h2>Columns</h2><ul>")
    for c in report.columns:
        why = report.na_reasons.get(c.key)
        na = e(f" — n/a: {why}") if why else ""
        parts.append(f"<li><b>{e(c.title)}</b>: {e(column_doc(c))}"
                     f"{' (gating)' if c.gating else ''}{na}</li>")
    parts.append("</ul></body></html>\n")
    return "\n".join(parts)


RENDERERS: dict[str, tuple[str, Callable[[Report], str]]] = {
    "md": (".md", render_markdown),
    "json": (".json", render_json),
    "html": (".html", render_html),
}

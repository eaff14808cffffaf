"""The terminal side of the report: rich tables as text, and the progress of a run on stderr.

Tables are rendered by `rich` into a string (so `render_table` stays a pure function and
its output can be written anywhere): no box, a rule under the header, two spaces between
columns, trailing spaces stripped, ANSI colours only when asked.  Every cell is a
`rich.text.Text`, so brackets in operator names or error messages are never read as markup.

Progress is a `rich.progress.Progress` (bar, count, elapsed, remaining, current operator)
when stderr is a terminal; otherwise one plain line per operator, so CI logs stay readable
and free of control characters.
"""
from __future__ import annotations

import io
import sys
from types import TracebackType
from typing import IO, Any, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

# coverage statuses -> rich styles (the ANSI codes the hand-written table used: 32, 36, 90, 31;1, 2)
STATUS_STYLES = {"ok": "green", "zero": "cyan", "nondiff": "bright_black",
                 "nocompute": "bright_black", "fail": "bold red", "na": "dim"}


def table_text(heads: Sequence[str], rows: Sequence[Sequence[str]],
               styles: Sequence[Sequence[str | None]] | None = None, color: bool = False) -> str:
    """`rows` under `heads` as an aligned text table, never folded (as wide as its content).
    `styles[i][j]` is a rich style for cell (i, j), used only with `color`."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, header_style="", expand=False)
    for h in heads:
        table.add_column(Text(h), no_wrap=True, overflow="ignore")
    for i, row in enumerate(rows):
        table.add_row(*(Text(t, style=(styles[i][j] or "") if color and styles else "")
                        for j, t in enumerate(row)))
    width = sum(max([len(h), *(len(r[j]) for r in rows)]) + 2 for j, h in enumerate(heads)) + 8
    buf = io.StringIO()
    console = Console(file=buf, width=max(width, 80), color_system="standard" if color else None,
                      force_terminal=color, no_color=not color, highlight=False, soft_wrap=False,
                      legacy_windows=False, emoji=False, markup=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


class Progress:
    """A progress callback `progress(done, total, name)` for `run_coverage` (or, with
    `total`, `progress(name)` for the Relax matrix), used as a context manager.

    On a terminal it draws a rich progress bar on `stream`; elsewhere it writes one line
    per operator (`[3/144] conv2d`); `enabled=False` is silent."""

    def __init__(self, enabled: bool = True, stream: IO[str] | None = None,
                 total: int | None = None, what: str = "coverage") -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total
        self.what = what
        self._done = 0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.tty:
            from rich import progress as rp
            self._bar = rp.Progress(
                rp.TextColumn("{task.fields[what]}"), rp.BarColumn(), rp.MofNCompleteColumn(),
                rp.TimeElapsedColumn(), rp.TimeRemainingColumn(),
                rp.TextColumn("{task.description}"),
                console=Console(file=self.stream, highlight=False), transient=False)
            self._task = self._bar.add_task("", total=self.total, what=self.what)
            self._bar.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __call__(self, done: int | str, total: int | None = None, name: str = "") -> None:
        started = None
        if isinstance(done, str):  # progress(name): item number self._done + 1 is starting
            name, done, total = done, self._done, self.total
            self._done += 1
            started = self._done
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, description=name)
        elif name:
            n = done if started is None else started
            count = f"{n}/{total}" if total else f"{n}"
            self.stream.write(f"[{count}] {name}\n")
            self.stream.flush()


__all__ = ["STATUS_STYLES", "Progress", "table_text"]

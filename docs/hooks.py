"""Runnable code in the docs: the MkDocs hook and the block runner tests/docs/test_docs.py uses.

Every ```` ```python ```` block in docs/*.md is code that runs (see docs/writing_docs.md).  The
words after `python` on the fence line are markers:

- `output`      the docs build runs the page's blocks and inserts what this block prints
                right after it (so printed adjoints and plans are produced, never pasted);
- `requires=M`  (comma-separated modules) the block needs optional modules; where one cannot
                be imported the block is skipped (by the test, with the reason) and its output
                says it was not produced;
- `norun`       a fragment that is shown, never run (e.g. a skeleton with `...`).

The blocks of one page run in order in one namespace, like a notebook.  Execution is compiled
with the page's path and its line numbers, so a traceback points at the line in docs/*.md.

This file imports nothing from MkDocs at module level: the test imports it without MkDocs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKERS = ("output", "norun")
_MARK = "\n@@docs-blocks@@"  # precedes the JSON a --json run prints (stray output may come first)
# a fenced python block, possibly indented (inside an admonition or a list)
_FENCE = re.compile(
    r"^(?P<indent>[ ]*)(?P<fence>`{3,})python(?P<opts>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ ]*$",
    re.M | re.S)


class DocBlockError(Exception):
    """A block's markers are malformed or its code raised."""


@dataclass
class Block:
    """One fenced python block of a page (`line` is the 1-based line of its first code line)."""

    start: int
    end: int
    indent: str
    fence: str
    body: str
    line: int
    output: bool = False
    norun: bool = False
    requires: tuple[str, ...] = ()
    result: str | None = None  # printed text after running; None when not run
    skipped: str | None = None  # why it was not run
    extra: dict[str, Any] = field(default_factory=dict)

    def missing(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]


def parse(markdown: str, page: str = "<page>") -> list[Block]:
    """The python blocks of `markdown`, with their markers checked."""
    blocks = []
    for m in _FENCE.finditer(markdown):
        indent = m["indent"]
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                         for line in m["body"].split("\n"))
        line = markdown.count("\n", 0, m.start("body")) + 1
        b = Block(m.start(), m.end(), indent, m["fence"], body, line)
        for word in m["opts"].split():
            if word in MARKERS:
                setattr(b, word, True)
            elif word.startswith("requires="):
                b.requires = tuple(x for x in word[len("requires="):].split(",") if x)
            else:
                raise DocBlockError(f"{page}:{line - 1}: unknown marker {word!r} on a python "
                                    f"block; use output, norun or requires=MODULE[,MODULE]")
        if b.output and b.norun:
            raise DocBlockError(f"{page}:{line - 1}: a block cannot be both output and norun")
        blocks.append(b)
    return blocks


def run(blocks: list[Block], page: str, upto: int | None = None) -> dict[str, Any]:
    """Run the blocks (the first `upto` of them) in order in one namespace; fill `.result` with
    what each printed and `.skipped` with why one did not run.  A block that raises is a
    DocBlockError naming the page line and carrying the traceback."""
    ns: dict[str, Any] = {"__name__": "__docs__"}
    for b in blocks[:upto]:
        if b.norun:
            b.skipped = "norun"
            continue
        missing = b.missing()
        if missing:
            b.skipped = f"needs {', '.join(missing)} (not installed)"
            continue
        code = compile("\n" * (b.line - 1) + b.body, page, "exec")
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, ns)
        except Exception as e:
            tb = traceback.format_exc()
            raise DocBlockError(f"{page}:{b.line}: the python block starting here raised "
                                f"{type(e).__name__}: {e}\n{tb}") from e
        b.result = out.getvalue()
        if b.output and not b.result.strip():
            raise DocBlockError(f"{page}:{b.line}: a block marked `output` printed nothing")
    return ns


def render(markdown: str, blocks: list[Block]) -> str:
    """`markdown` with the markers removed and each `output` block followed by its output."""
    parts, pos = [], 0
    for b in blocks:
        parts.append(markdown[pos:b.start])
        code = "\n".join(b.indent + x if x else x for x in b.body.rstrip("\n").split("\n"))
        parts.append(f"{b.indent}{b.fence}python\n{code}\n{b.indent}{b.fence}")
        if b.output:
            text = (b.result if b.result is not None else
                    f"(output not produced: this block {b.skipped} where these docs were built)")
            text = text.rstrip("\n").replace(b.fence, "'''")
            shown = "\n".join(b.indent + x if x else x for x in text.split("\n"))
            parts.append(f'\n\n{b.indent}{b.fence}text title="output (produced by the docs build)"'
                         f"\n{shown}\n{b.indent}{b.fence}")
        pos = b.end
    parts.append(markdown[pos:])
    return "".join(parts)


def process(markdown: str, page: str) -> str:
    """Parse, run the blocks up to the last `output` one (if any), and render (in this process)."""
    blocks = parse(markdown, page)
    last = max((k for k, b in enumerate(blocks) if b.output), default=-1)
    if last >= 0:
        run(blocks, page, upto=last + 1)
    return render(markdown, blocks)


def process_isolated(markdown: str, page: str, cwd: Path) -> str:
    """`process`, with the blocks run in a fresh Python process (`python hooks.py --json`), so
    pages cannot see each other's state and `mkdocs serve` can run a page again (a torch.library
    op or a Relax gradient cannot be registered twice in one process)."""
    import json
    import subprocess
    import sys
    import tempfile
    blocks = parse(markdown, page)
    last = max((k for k, b in enumerate(blocks) if b.output), default=-1)
    if last >= 0:
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
            f.write(markdown)
        try:
            r = subprocess.run([sys.executable, __file__, "--json", "--upto", str(last + 1),
                                "--name", page, f.name], cwd=cwd, capture_output=True, text=True)
        finally:
            Path(f.name).unlink()
        if r.returncode != 0:
            raise DocBlockError(r.stderr.strip() or f"{page}: running the blocks failed")
        for b, (result, skipped) in zip(blocks, json.loads(r.stdout.rpartition(_MARK)[2]), strict=True):
            b.result, b.skipped = result, skipped
    return render(markdown, blocks)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook (`hooks:` in mkdocs.yml): run and render a page's python blocks."""
    from mkdocs.exceptions import PluginError
    path = str(Path(config["docs_dir"]).name) + "/" + page.file.src_uri
    try:
        return process_isolated(markdown, path, Path(config["config_file_path"]).parent)
    except DocBlockError as e:
        raise PluginError(str(e)) from None


def main(argv: list[str]) -> int:
    """`python docs/hooks.py PAGE.md ...`: run the pages' blocks; prints one `skipped: <why>`
    line per block not run, exit 1 on a failing block (the test runs each page in its own
    process this way, so registrations and flags set by examples do not leak into other tests).
    `--json [--upto N] [--name NAME] PAGE.md` prints [result, skipped] per block (the hook)."""
    import argparse
    import json
    import sys
    p = argparse.ArgumentParser(prog="docs/hooks.py")
    p.add_argument("--json", action="store_true")
    p.add_argument("--upto", type=int)
    p.add_argument("--name")
    p.add_argument("pages", nargs="+")
    a = p.parse_args(argv)
    for page in a.pages:
        name = a.name or page
        blocks = parse(Path(page).read_text(), name)
        try:
            run(blocks, name, upto=a.upto)
        except DocBlockError as e:
            print(e, file=sys.stderr)
            return 1
        if a.json:
            print(_MARK + json.dumps([[b.result, b.skipped] for b in blocks]))
            continue
        for b in blocks:
            if b.skipped and b.skipped != "norun":
                print(f"skipped: {name}:{b.line}: {b.skipped}")
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))

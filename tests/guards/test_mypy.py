"""The type check of the core: mypy over texpr_ad/ (settings in pyproject.toml, [tool.mypy]) may
report only the errors mypy_baseline.txt lists, and the baseline may only shrink.

A new error fails `test_no_new_type_errors`: fix it (or, where mypy is wrong, write
`# type: ignore[code]` with the reason beside it).  A listed error that no longer occurs fails
`test_baseline_only_shrinks`: delete its line (or lower its count).  Each baseline line is
`count file [code] message`, without line numbers, so edits elsewhere in a file do not churn it.

Regenerate the baseline (only after fixing errors, or when a mypy or NumPy upgrade rewords them):

    .venv/bin/python tests/guards/test_mypy.py

mypy's cache lives in the system temp folder, so a run leaves the checkout clean; a cold run
takes about 10 s (Numba, TVM, torch and JAX are not read, see pyproject.toml), a warm one 1 s.
"""
from __future__ import annotations

import functools
import hashlib
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("mypy_baseline.txt")
CACHE = Path(tempfile.gettempdir()) / (
    "texpr_ad_mypy_" + hashlib.sha1(str(ROOT).encode()).hexdigest()[:10])

# `texpr_ad/te/x.py:12: error: Message text  [code]` (mypy's default one-line form)
_ERROR = re.compile(r"^(?P<file>[^:]+):\d+(?::\d+)?: error: (?P<msg>.*?)  \[(?P<code>[a-z0-9-]+)\]$")

Entry = tuple[str, str, str]  # (file relative to the repo, code, message)


def parse(output: str, root: Path = ROOT) -> Counter[Entry]:
    """mypy's error lines as baseline entries (notes and the summary are skipped)."""
    found: Counter[Entry] = Counter()
    for line in output.splitlines():
        if ": error: " not in line:
            continue
        m = _ERROR.match(line)
        assert m, f"cannot read this mypy line: {line!r}"
        path = Path(m["file"])
        file = (path.relative_to(root) if path.is_absolute() else path).as_posix()
        msg = re.sub(r"\bline \d+\b", "line N", m["msg"])  # `already defined on line 66`
        found[(file, m["code"], msg)] += 1
    return found


@functools.cache
def run_mypy() -> Counter[Entry]:
    from mypy import api  # the `test` extra installs it: pip install -e ".[test]"

    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", str(CACHE), "--no-pretty", "--show-error-codes",
                                "--no-error-summary", "--hide-error-context",
                                str(ROOT / "texpr_ad")])
    assert status in (0, 1), f"mypy did not run (exit {status}):\n{out}\n{err}"
    return parse(out)


def read_baseline(text: str | None = None) -> Counter[Entry]:
    """The baseline file's entries (or those of `text` in its format)."""
    if text is None:
        text = BASELINE.read_text(encoding="utf-8")
    found: Counter[Entry] = Counter()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            count, file, rest = line.split(" ", 2)
            code, msg = rest[1:].split("] ", 1)
            found[(file, code, msg)] += int(count)
    return found


def format_baseline(entries: Counter[Entry]) -> str:
    head = ("# mypy errors in texpr_ad/ that are still to fix: count file [code] message.\n"
            "# Only delete lines (tests/guards/test_mypy.py says how to regenerate).\n")
    return head + "".join(f"{n} {file} [{code}] {msg}\n"
                          for (file, code, msg), n in sorted(entries.items()))


def _lines(entries: Counter[Entry]) -> str:
    return format_baseline(entries).split("\n", 2)[2]


def test_no_new_type_errors():
    new = run_mypy() - read_baseline()
    assert not new, ("mypy errors not in tests/guards/mypy_baseline.txt; fix them (run "
                     "`.venv/bin/python -m mypy` for their lines):\n" + _lines(new))


def test_baseline_only_shrinks():
    gone = read_baseline() - run_mypy()
    assert not gone, ("fixed, so delete these lines from tests/guards/mypy_baseline.txt (or "
                      "lower their count):\n" + _lines(gone))


def test_the_baseline_reader_and_parser_agree():
    """Baseline lines read back as written, and mypy's lines parse with their line numbers
    dropped (in messages too), absolute paths made relative, notes skipped."""
    out = (f"{ROOT}/texpr_ad/a.py:3: error: Name \"x\" already defined on line 1  [no-redef]\n"
           "texpr_ad/a.py:9: note: Left operand is of type \"int | None\"\n"
           "texpr_ad/b.py:12:5: error: Item \"None\" of \"X | None\" has no attribute \"y\"  "
           "[union-attr]\n"
           "texpr_ad/b.py:40: error: Item \"None\" of \"X | None\" has no attribute \"y\"  "
           "[union-attr]\n")
    entries = parse(out)
    assert entries == {("texpr_ad/a.py", "no-redef", 'Name "x" already defined on line N'): 1,
                       ("texpr_ad/b.py", "union-attr",
                        'Item "None" of "X | None" has no attribute "y"'): 2}
    assert _lines(entries).splitlines()[1] == \
        '2 texpr_ad/b.py [union-attr] Item "None" of "X | None" has no attribute "y"'
    assert read_baseline(format_baseline(entries)) == entries


if __name__ == "__main__":
    BASELINE.write_text(format_baseline(run_mypy()), encoding="utf-8")
    print(f"wrote {sum(read_baseline().values())} errors to {BASELINE}", file=sys.stderr)

"""Every python block in docs/*.md runs, and the site builds with warnings as errors.

The marker convention (`output`, `requires=MODULE`, `norun`) is in docs/writing_docs.md; the
runner is docs/hooks.py, shared with the MkDocs hook that inserts the printed output.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["docs_hooks"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


hooks = _hooks()
HAVE_MKDOCS = importlib.util.find_spec("mkdocs") is not None


def test_pages_found():
    assert {"index.md", "cli.md", "coverage_schema.md", "troubleshooting.md"} <= set(PAGES)


def _needs_own_run(page: str) -> bool:
    """A page with python blocks that the strict build does not already run (the build runs a
    page up to its last `output` block; without mkdocs every page with blocks runs here)."""
    blocks = hooks.parse((DOCS / page).read_text(), f"docs/{page}")
    last_output = max((k for k, b in enumerate(blocks) if b.output), default=-1)
    return bool(blocks) and not (HAVE_MKDOCS and all(b.norun for b in blocks[last_output + 1:]))


def test_some_page_has_code():
    assert any(hooks.parse((DOCS / p).read_text(), f"docs/{p}") for p in PAGES)


@pytest.mark.parametrize("page", [p for p in PAGES if _needs_own_run(p)] or ["<none>"])
def test_page_code_runs(page: str) -> None:
    """The page's python blocks run in order in one namespace, in a process of their own (so
    what an example registers, e.g. Relax gradients, does not leak into other tests), with the
    repo root as working directory (the kernel cache is the usual .texpr_cache/). Pages the
    strict build runs in full are checked by test_mkdocs_build_strict instead."""
    if page == "<none>":
        assert HAVE_MKDOCS, "no page left to run here, so the strict build must run them all"
        return
    r = subprocess.run([sys.executable, str(DOCS / "hooks.py"), f"docs/{page}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-8000:]
    skipped = [line for line in r.stdout.splitlines() if line.startswith("skipped: ")]
    if skipped:
        pytest.skip("; ".join(skipped))


def test_markers_are_checked():
    md = "```python outptu\nprint(1)\n```\n"
    with pytest.raises(hooks.DocBlockError, match="unknown marker 'outptu'"):
        hooks.parse(md, "x.md")


def test_output_is_inserted_and_errors_name_the_line():
    md = "text\n\n```python output\nprint(6 * 7)\n```\n\n```python norun\nx = ...\n```\n"
    out = hooks.process(md, "x.md")
    assert "```python\nprint(6 * 7)\n```" in out and "\n42\n" in out and "norun" not in out
    with pytest.raises(hooks.DocBlockError, match=r"x\.md:4: .* raised ZeroDivisionError"):
        hooks.process("a\n\n```python output\n1 / 0\n```\n", "x.md")


def test_missing_module_skips_and_says_so():
    md = "```python output requires=no_such_module_xyz\nimport no_such_module_xyz\n```\n"
    out = hooks.process(md, "x.md")
    assert "output not produced: this block needs no_such_module_xyz (not installed)" in out


@pytest.mark.skipif(not HAVE_MKDOCS,
                    reason="mkdocs not installed (pip install -e '.[docs]')")
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    html = (tmp_path / "site" / "differentiation" / "index.html").read_text()
    assert "output (produced by the docs build)" in html

"""No private names imported across modules of texpr_ad (DESIGN.md's house rules: a helper two
modules need is public where its concept lives), read from the source.

Every `from X import _name` and `import X._name` in texpr_ad/ (module level or inside a
function; relative or absolute) whose X is a texpr_ad module is a violation when `_name` starts
with one underscore (dunders such as `__version__` are fine).  Importing a public name from a
private module (`from .._env import debug_level`) is fine, and so is a private alias of a public
name (`from .plan import with_cpu as _cpu`).

A violation is fixed by making the name public where it lives; one in a file that another change
is rewriting is listed in KNOWN with its reason, and the test fails when it is gone, so the list
only shrinks.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "texpr_ad"

# (importing file relative to texpr_ad/, module imported from, name): why it is still there
KNOWN: dict[tuple[str, str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def private_imports(root: Path = PKG) -> dict[tuple[str, str, str], int]:
    """{(file relative to `root`, module, private name): line} for every private import of a
    module of the package at `root` (named `root.name`)."""
    found: dict[tuple[str, str, str], int] = {}
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root.parent).with_suffix("")
        parts = rel.parts[:-1] if f.name == "__init__.py" else rel.parts
        package = parts if f.name == "__init__.py" else parts[:-1]  # where `.` points
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.ImportFrom):
                base = list(package[:len(package) - node.level + 1]) if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                pairs = [(module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                pairs = [tuple(a.name.rsplit(".", 1)) for a in node.names if "." in a.name]
            else:
                continue
            for module, name in pairs:
                if module.split(".")[0] == root.name and _private(name):
                    found[(str(f.relative_to(root).as_posix()), module, name)] = node.lineno
    return found


def test_no_private_names_imported_across_modules():
    bad = {k: line for k, line in private_imports().items() if k not in KNOWN}
    assert not bad, "private names imported from another texpr_ad module; make each public " \
        "where it lives (rename it, update its users):\n" + "\n".join(
            f"  texpr_ad/{f}:{line}: from {m} import {n}" for (f, m, n), line in sorted(bad.items()))


def test_known_violations_still_exist():
    gone = set(KNOWN) - set(private_imports())
    assert not gone, "fixed, remove from KNOWN in tests/guards/test_private_imports.py:\n" + \
        "\n".join(f"  {k}" for k in sorted(gone))


def test_the_guard_sees_every_spelling(tmp_path):
    """Relative imports at any depth, absolute ones, `import a.b._c`, lazy imports inside
    functions are found; public names, dunders, private aliases and other packages are not."""
    pkg = tmp_path / "texpr_ad"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub.m import _a, __version__, b as _b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "m.py").write_text(
        "from . import _c\nfrom .. import _d\nimport texpr_ad.sub._e\nfrom os import _exit\n"
        "def f():\n    from texpr_ad.sub.m import _g\n")
    assert private_imports(pkg) == {
        ("__init__.py", "texpr_ad.sub.m", "_a"): 1,
        ("sub/m.py", "texpr_ad.sub", "_c"): 1,
        ("sub/m.py", "texpr_ad", "_d"): 2,
        ("sub/m.py", "texpr_ad.sub", "_e"): 3,
        ("sub/m.py", "texpr_ad.sub.m", "_g"): 6,
    }

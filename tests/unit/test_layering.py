"""Which part of texpr_ad may import which (DESIGN.md, "Packages"), read from the source.

Every `import` and `from ... import` in texpr_ad/ (module level or inside a function:
a lazy import is still a dependency) is parsed with `ast`, nothing is imported, and
each is checked against the table below.  A unit is a package folder (`te`, `kernels`,
...) or a top-level module (`api`, `torch`, ...).  The layers, lowest first:

    errors, _env                         everything may use them
    te                                   the IR
    deriv, ops, arrays                   adjoints; the operator library; array conversion
    schedule                             plans
    kernels                              rendering, compiling, calling (the only numba user)
    api, pullback, torch, jax, __init__  the public front doors
    testing                              checking helpers: statuses, errors, gradient checks
    relax_bridge                         TVM (the only tvm user)
    report, __main__                     the coverage report and the CLI: may use anything

A violation is fixed in the importing code, not by widening the table; one that
belongs to another change is listed in KNOWN with its reason, and the test fails
when it is gone, so the list only shrinks.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "texpr_ad"

BASE = {"errors", "_env"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_env": {"errors"},
    "te": BASE,
    "deriv": BASE | {"te"},
    "ops": BASE | {"te"},
    "arrays": BASE | {"te"},
    "schedule": BASE | {"te", "deriv"},
    "kernels": BASE | {"te", "schedule", "arrays"},
    "api": BASE | {"te", "deriv", "schedule", "kernels", "arrays", "pullback"},
    "pullback": BASE | {"te", "deriv", "schedule", "kernels"},
    "torch": BASE | {"te", "deriv", "kernels", "arrays", "api", "pullback"},
    "jax": BASE | {"te", "deriv", "kernels", "arrays", "api", "pullback"},
    "__init__": BASE | {"te", "deriv", "ops", "schedule", "kernels", "arrays", "api", "pullback"},
    "testing": BASE | {"te", "deriv", "ops", "schedule", "kernels"},
    "relax_bridge": BASE | {"te", "deriv", "ops", "kernels", "testing"},
    "report": None,  # type: ignore[dict-item]  # anything
    "__main__": {"report"},
}
# third-party packages only some units may import (all others: anyone)
EXTERNAL = {"numba": {"kernels"}, "tvm": {"relax_bridge"}, "tvm_ffi": {"relax_bridge"},
            # relax_bridge.train_torch exports PyTorch models to Relax (torch.export)
            "torch": {"torch", "report", "relax_bridge"}, "jax": {"jax"}, "rich": {"report"}}
KNOWN: dict[tuple[str, str], str] = {}  # (file, imported unit or package): why it is still there


def _unit(module: str) -> str:
    """texpr_ad.kernels.build -> kernels; texpr_ad -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(dotted: str) -> bool:
    path = PKG.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports() -> list[tuple[str, str, str, int]]:
    """(file relative to texpr_ad/, importing unit, imported name, line) for every import."""
    out = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG.parent).with_suffix("")
        package = ".".join(rel.parts[:-1])  # the package a relative import starts from
        me = _unit(".".join(rel.parts[:-1] if f.name == "__init__.py" else rel.parts))
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from texpr_ad import te` imports the package te, not texpr_ad/__init__
                names = [f"{mod}.{a.name}" if _is_module(f"{mod}.{a.name}") else mod
                         for a in node.names]
            for n in names:
                out.append((str(f.relative_to(PKG)), me, n, node.lineno))
    return out


def violations() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for file, me, name, line in imports():
        top = name.split(".")[0]
        if top == "texpr_ad":
            other = _unit(name)
            allowed = ALLOWED[me]
            if other != me and allowed is not None and other not in allowed:
                found[(file, other)].append(f"texpr_ad/{file}:{line}: {me} imports {name}")
        elif top in EXTERNAL and me not in EXTERNAL[top]:
            found[(file, top)].append(f"texpr_ad/{file}:{line}: {me} imports {name}")
    return found


def test_every_unit_is_in_the_table():
    units = {me for _, me, _, _ in imports()}
    assert units <= set(ALLOWED), f"add {sorted(units - set(ALLOWED))} to ALLOWED"


def test_imports_follow_the_layers():
    bad = {k: v for k, v in violations().items() if k not in KNOWN}
    assert not bad, "imports against the layering (DESIGN.md, Packages):\n" + "\n".join(
        line for lines in bad.values() for line in lines)


def test_known_violations_still_exist():
    gone = set(KNOWN) - set(violations())
    assert not gone, f"fixed: remove {sorted(gone)} from KNOWN"


def test_nothing_imports_the_report_but_the_cli():
    users = {(file, me) for file, me, name, _ in imports()
             if name.startswith("texpr_ad.report") and me not in ("report", "__main__")}
    assert not users, users


def test_no_import_cycle_between_units():
    graph: dict[str, set[str]] = defaultdict(set)
    for _, me, name, _ in imports():
        if name.split(".")[0] == "texpr_ad" and _unit(name) != me:
            graph[me].add(_unit(name))
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(v):] + [v]))
            if v not in state:
                visit(v, path + [v])
        state[u] = 2

    for u in sorted(graph):
        if u not in state:
            visit(u, [u])


def test_the_guard_sees_lazy_and_relative_imports():
    """The parser finds what the table is about: lazy imports inside functions, relative
    imports at any depth, and `from .. import te` as the package te."""
    found = {(me, name) for _, me, name, _ in imports()}
    assert ("relax_bridge", "tvm") in found                  # lazy, inside functions
    assert ("report", "texpr_ad.testing") in found           # from ..testing import ...
    assert ("testing", "texpr_ad.te") in found               # from .. import te
    assert not any(name == "texpr_ad" and me != "__main__" for me, name in found)

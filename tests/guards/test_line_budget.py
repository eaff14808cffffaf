"""A line budget per package of texpr_ad (tinygrad's `sz.py` and `MAX_LINE_COUNT`): the non-blank
lines of each subpackage (and of the top-level modules together) may not exceed BUDGET.

A feature that needs more either shrinks code elsewhere in the package or raises the budget
deliberately, in the same commit, with the reason in that commit's message.  The budgets were
set at today's count rounded up to the next 50, so the next feature meets them.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "texpr_ad"
TOP = "*.py"  # the modules directly in texpr_ad/ (api, torch, jax, pullback, ...)

BUDGET = {
    TOP: 1434,
    "te": 2917,
    "deriv": 1767,
    "ops": 2700,
    "schedule": 4797,
    "kernels": 3736,
    "relax_bridge": 3554,
    "report": 1465,
    "testing": 500,
}


def line_counts(root: Path = PKG) -> Counter[str]:
    """Non-blank lines per top-level subpackage of `root` (TOP for the modules directly in it)."""
    counts: Counter[str] = Counter()
    for f in root.rglob("*.py"):
        rel = f.relative_to(root)
        unit = rel.parts[0] if len(rel.parts) > 1 else TOP
        counts[unit] += sum(1 for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
    return counts


def test_every_package_has_a_budget():
    counts = line_counts()
    assert set(counts) == set(BUDGET), (
        f"new packages {sorted(set(counts) - set(BUDGET))} need a budget in "
        f"tests/guards/test_line_budget.py; gone: {sorted(set(BUDGET) - set(counts))}")


def test_packages_stay_within_their_line_budget():
    over = {u: (n, BUDGET[u]) for u, n in line_counts().items() if n > BUDGET.get(u, n)}
    assert not over, "over the line budget (non-blank lines): " + ", ".join(
        f"texpr_ad/{u} {n} > {b}" for u, (n, b) in sorted(over.items())) + \
        ". Shrink the code, or raise BUDGET in tests/guards/test_line_budget.py deliberately, " \
        "in the same commit, saying why in its message."


def test_the_count_skips_blank_lines_only(tmp_path):
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "a.py").write_text("x = 1\n\n   \n# a comment counts\n")
    (tmp_path / "sub" / "b.py").write_text('"""doc"""\n\ny = 2\n')
    (tmp_path / "sub" / "deeper" / "c.py").write_text("z = 3\n")
    assert line_counts(tmp_path) == {TOP: 2, "sub": 3}

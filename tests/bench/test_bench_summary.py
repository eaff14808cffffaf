"""The bench's summary arithmetic: geometric means per comparison, worst rows, plain/registry."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.__main__ import print_summary  # noqa: E402


def _row(name: str, fwd: float, step: float, bwd: float | None, **extra) -> dict:
    r = {"name": name, "errors": {}, "err": {}, **extra}
    for c, x in (("fwd", fwd), ("step", step), ("bwd", bwd)):
        if x is None:
            r["errors"][c] = "RuntimeError: boom"
        else:
            r[c] = {"t": x, "min": x, "torch": 1.0, "torch_min": 1.0, "jax": None}
    return r


def test_summary_geomeans_worst_rows_and_failures(capsys):
    rows = [_row("a", 4.0, 1.0, 2.0), _row("a:plain", 1.0, 2.0, None, plain_over_registry=2.0),
            _row("b", 1.0, 4.0, 0.5), _row("b:plain", 1.0, 8.0, 1.0, plain_over_registry=2.0)]
    print_summary(rows)
    out = capsys.readouterr().out
    reg = next(line for line in out.splitlines() if line.strip().startswith("registry"))
    plain = next(line for line in out.splitlines() if line.strip().startswith("plain ("))
    assert "2/2 complete" in reg and "2.00   2.00   1.00" in reg
    assert "fwd a 4.00x" in reg and "step b 4.00x" in reg and "bwd a 2.00x" in reg
    assert "1/2 complete" in plain and "1.00   4.00   1.00" in plain
    assert "geometric mean 2.00 over 2 operators" in out
    assert "a:plain bwd: RuntimeError: boom" in out

"""The bench's summary arithmetic: geometric means per comparison, worst rows, plain/registry."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.__main__ import print_cache_line, print_overall, print_summary  # noqa: E402


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


def test_overall_summary_takes_every_row_and_names_those_above_1_5x_inductor(capsys):
    rows = [_row("a", 1.0, 2.0, 1.0), _row("a:plain", 1.0, 0.5, 1.0)]
    rows[0]["step"]["ind"], rows[1]["step"]["ind"] = 1.0, 0.25  # step 2x and 2x Inductor
    rows[0]["fwd"]["ind"] = 2.0  # fwd 0.5x; a:plain fwd not timed against Inductor
    user = [{"name": "u", "fwd": {"texpr": (3.0, 3.0), "eager": (1.0, 1.0)},
             "step": {"texpr": (1.0, 1.0), "eager": (2.0, 2.0), "inductor": (1.0, 1.0)},
             "bwd": {}}]
    print_overall(rows, user)
    out = capsys.readouterr().out.splitlines()
    eager = next(line for line in out if line.strip().startswith("texpr/eager"))
    ind = next(line for line in out if line.strip().startswith("texpr/inductor"))
    # eager step: 2, 0.5, 0.5 -> 0.79; fwd: 1, 1, 3 -> 1.44; bwd: 1, 1 -> 1
    assert eager.split()[1:4] == ["1.44", "0.79", "1.00"] and eager.split()[-1] == "3/3/2"
    # Inductor step: 2, 2, 1 -> 1.59; fwd: 0.5 alone
    assert ind.split()[1:4] == ["0.50", "1.59", "-"] and ind.split()[-1] == "1/3/0"
    assert any(line.strip() == "step above 1.5x Inductor: a 2.00x, a:plain 2.00x" for line in out)
    assert any(line.strip() == "fwd above 1.5x Inductor: none" for line in out)


def test_compile_summary_compares_first_calls_with_torch_compile(capsys):
    from bench.__main__ import print_compile_summary
    comp = {"a": {"cold_fwd": 2.0, "cold_step": 8.0, "warm_fwd": 0.5, "warm_step": 1.0,
                  "cold_ind_fwd": 4.0, "cold_ind_step": 2.0, "warm_ind_fwd": 1.0,
                  "warm_ind_step": 1.0},
            "b": {"cold_fwd": 8.0, "cold_step": 2.0, "warm_fwd": 2.0, "warm_step": 4.0,
                  "cold_ind_fwd": 1.0, "cold_ind_step": 8.0, "warm_ind_fwd": 1.0,
                  "warm_ind_step": 4.0},
            "a:plain": {"cold_fwd": 100.0, "cold_step": 100.0}}  # plain rows: no Inductor
    print_compile_summary(comp)
    out = capsys.readouterr().out
    assert "over 2 workloads" in out
    assert "texpr_ad       cold 4.00 / 4.00; warm 1.00 / 2.00" in out, out
    assert "torch.compile  cold 2.00 / 4.00; warm 1.00 / 2.00" in out, out


def test_the_footer_says_how_many_timed_kernels_were_compiled_and_how_many_loaded(capsys,
                                                                                  monkeypatch):
    from texpr_ad.kernels import cache
    monkeypatch.setattr(cache, "compile_counts", lambda: (3, 41))
    print_cache_line()
    out = capsys.readouterr().out
    assert "3 compiled in this run, 41 loaded from the disk cache" in out

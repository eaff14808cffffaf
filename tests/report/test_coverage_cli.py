"""The coverage report and the `texpr-ad` CLI: schema, known statuses, renderings, commands.

The report's checks compare against independent references (the registry's
NumPy forwards, central differences, torch autograd); these tests pin what the
report says about operators whose answer is known by definition.
"""
from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from texpr_ad.ops import registry
from texpr_ad import testing
from texpr_ad.report import cli, columns
from texpr_ad.report.columns import select_columns
from texpr_ad.report.coverage import LEGEND, SCHEMA, run_coverage

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_op.py"
OPS = "relu,dense,take,floor,argmax,nms"
NAMES = OPS.split(",")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One `coverage --format table -o PATH` run (the `make report` path) on a small subset."""
    out = tmp_path_factory.mktemp("cov") / "coverage"
    import io
    from contextlib import redirect_stdout
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli.main(["coverage", "--ops", OPS, "--targets", "cpu,torch", "--format", "table",
                       "-o", str(out), "--no-progress", "--color", "never"])
    return {"rc": rc, "stdout": buf.getvalue(), "base": out,
            "json": json.loads(out.with_suffix(".json").read_text())}


# -- JSON schema (docs/coverage_schema.md) -----------------------------------------------------

def _check_schema(doc: dict) -> None:
    assert doc["schema"] == SCHEMA
    assert isinstance(doc["generated"], str) and "T" in doc["generated"]
    env = doc["environment"]
    for k in ("python", "numpy", "numba", "jobs", "targets"):
        assert k in env, k
    keys = []
    for c in doc["columns"]:
        assert set(c) >= {"key", "title", "target", "description", "gating", "available",
                          "unavailable_reason"}
        assert isinstance(c["gating"], bool) and isinstance(c["available"], bool)
        keys.append(c["key"])
    assert len(set(keys)) == len(keys)
    assert set(doc["legend"]) == set(LEGEND)
    for v in doc["legend"].values():
        assert set(v) == {"symbol", "label", "description"}
    for op in doc["operators"]:
        assert set(op) >= {"name", "category", "notes", "cells"}
        assert list(op["cells"]) == keys
        for cell in op["cells"].values():
            assert set(cell) == {"status", "figure", "detail", "text"}
            assert cell["status"] in doc["legend"]
            assert cell["figure"] is None or isinstance(cell["figure"], (int, float))
            assert isinstance(cell["detail"], str) and isinstance(cell["text"], str)
    s = doc["summary"]
    assert s["operators"] == len(doc["operators"])
    assert set(s["by_column"]) == set(keys)
    for col, counts in s["by_column"].items():
        assert sum(counts.values()) == len(doc["operators"]), col
    assert isinstance(s["ok"], bool) and s["ok"] == (not s["gating_failures"])
    assert isinstance(s["kernels_compiled"], int) and isinstance(s["kernels_loaded"], int)


def test_json_schema_is_valid(written):
    doc = written["json"]
    _check_schema(doc)
    assert [o["name"] for o in doc["operators"]] == [e.name for e in registry.select(OPS)]
    assert {c["key"] for c in doc["columns"]} == {"forward", "adjoint", "grad", "work", "torch",
                                                  "torch_time"}


def test_known_statuses(written):
    cells = {o["name"]: o["cells"] for o in written["json"]["operators"]}
    # floor is integer-valued: the gradient is an exact zero, confirmed numerically
    assert cells["floor"]["forward"]["status"] == "ok"
    assert cells["floor"]["adjoint"]["status"] == "zero"
    assert cells["floor"]["grad"]["status"] == "zero"
    # argmax has an integer output: not differentiable by definition
    assert cells["argmax"]["forward"]["status"] == "ok"
    for k in ("adjoint", "grad", "work", "torch"):
        assert cells["argmax"][k]["status"] == "nondiff", k
    # nms has no compute form: every column says so, with the registry's reason
    assert all(c["status"] == "nocompute" for c in cells["nms"].values())
    assert "sequential" in cells["nms"]["forward"]["detail"]
    # dense works everywhere; its errors are tiny (float64)
    for k in ("forward", "adjoint", "grad", "work", "torch", "torch_time"):
        assert cells["dense"][k]["status"] == "ok", (k, cells["dense"][k])
    assert cells["dense"]["forward"]["figure"] < 1e-12
    assert cells["dense"]["grad"]["figure"] < 1e-6
    assert cells["dense"]["torch"]["figure"] < 1e-12
    assert cells["dense"]["adjoint"]["text"] == "gather"
    assert cells["dense"]["work"]["figure"] == pytest.approx(2.0)  # dX and dW: one matmul each
    # take has data-dependent indices: a scatter adjoint, which must still check out
    assert cells["take"]["adjoint"]["text"] == "scatter"
    assert cells["take"]["grad"]["status"] == "ok"
    assert written["rc"] == 0 and written["json"]["summary"]["ok"]


def test_renderings_contain_every_operator(written):
    base = written["base"]
    md = base.with_suffix(".md").read_text()
    page = base.with_suffix(".html").read_text()
    for name in NAMES:
        assert f"| {name} |" in md
        assert f">{name}</td>" in page
        assert name in written["stdout"]
    for status in LEGEND.values():
        assert status.label in md and html.escape(status.label) in page
    # self-contained: no scripts, no external resources
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "<style>" in page
    # the terminal table: one line per operator, the summary last
    lines = written["stdout"].splitlines()
    assert sum(1 for ln in lines if ln.split(" ")[0] in NAMES) == len(NAMES)
    assert lines[-1].startswith(f"{len(NAMES)} operators") and lines[-1].endswith("OK")


def test_jobs_2_gives_the_same_rows_in_registry_order():
    entries = registry.select("floor,relu,nms,argmax")
    cols = select_columns("cpu")
    a = run_coverage(entries, cols, jobs=2)
    b = run_coverage(entries, cols, jobs=1)
    assert [r.name for r in a.rows] == [e.name for e in entries]
    assert [{k: c.status for k, c in r.cells.items()} for r in a.rows] == \
           [{k: c.status for k, c in r.cells.items()} for r in b.rows]


# -- failures make the exit code non-zero -----------------------------------------------------

def _patch_registry(monkeypatch: pytest.MonkeyPatch, entries: list) -> None:
    monkeypatch.setattr(registry, "select", lambda pattern="*": entries)


def test_exit_code_when_a_forward_fails(monkeypatch, capsys):
    relu = registry.get("relu")
    bad = replace(relu, name="relu_wrong_ref", reference=lambda x: [x + 1.0])
    _patch_registry(monkeypatch, [relu, bad])
    rc = cli.main(["coverage", "--targets", "cpu", "--no-progress", "--color", "never"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "relu_wrong_ref [forward]" in out and "max rel err" in out
    assert "1 gating failure" in out.splitlines()[-1]


def test_exit_code_when_a_gradient_check_fails(monkeypatch, capsys):
    _patch_registry(monkeypatch, [registry.get("dense")])
    monkeypatch.setattr(columns, "check_grad",
                        lambda entry, runner: testing.Result("fail", 0.5, "gradient rel err 5e-01"))
    rc = cli.main(["coverage", "--targets", "cpu", "--format", "json", "--no-progress"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and not doc["summary"]["ok"]
    assert doc["summary"]["gating_failures"] == [
        {"operator": "dense", "column": "grad", "detail": "gradient rel err 5e-01"}]


def test_unknown_target_and_empty_selection_are_usage_errors(capsys):
    assert cli.main(["coverage", "--targets", "cpu,gpu"]) == 2
    assert "gpu" in capsys.readouterr().err
    assert cli.main(["coverage", "--ops", "no_such_op*"]) == 2
    assert "matches no operator" in capsys.readouterr().err


# -- show / grad ------------------------------------------------------------------------------

def test_show(capsys):
    assert cli.main(["show", "dense"]) == 0
    out = capsys.readouterr().out
    for part in ("=== forward ", "=== adjoints", "=== forward plan", "=== adjoint plan",
                 "=== adjoint kernel source", "# ddata", "# dweight"):
        assert part in out, part
    assert "def " in out and "compute(" in out


def test_show_no_compute_and_unknown(capsys):
    assert cli.main(["show", "nms"]) == 0
    assert "no compute form" in capsys.readouterr().out
    assert cli.main(["show", "no_such_op"]) == 2
    assert "no_such_op" in capsys.readouterr().err


def test_grad_example(capsys):
    assert cli.main(["grad", f"{EXAMPLE}:causal_conv", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "seed 3" in out and "# dx" in out and "# dw" in out
    assert "=== adjoint kernel source" in out
    check = out.split("=== numerical check")[1].splitlines()[1]
    assert check.startswith("ok") and "max rel err" in check


def test_grad_symbolic_dims_need_shapes(capsys):
    assert cli.main(["grad", f"{EXAMPLE}:scaled_rows"]) == 2
    assert "--shapes x=" in capsys.readouterr().err
    assert cli.main(["grad", f"{EXAMPLE}:scaled_rows", "--shapes", "x=3x8", "--no-source"]) == 0
    out = capsys.readouterr().out
    assert out.split("=== numerical check")[1].splitlines()[1].startswith("ok")
    assert cli.main(["grad", f"{EXAMPLE}:nope"]) == 2
    assert "no function 'nope'" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    r = subprocess.run([sys.executable, "-m", "texpr_ad", "--help"], capture_output=True,
                       check=False, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "coverage" in r.stdout and "grad" in r.stdout


def test_second_process_compiles_nothing(tmp_path):
    """The forward and gradient checks run again in a new process load every kernel from the
    disk cache: the report's kernel counts say 0 compiled the second time."""
    cmd = [sys.executable, "-m", "texpr_ad", "coverage", "--ops", "relu,dense,take,softmax",
           "--targets", "cpu", "--format", "json", "-o", str(tmp_path / "cov"), "--no-progress"]
    env = {**os.environ, "TEXPR_CACHE_DIR": str(tmp_path / "cache")}
    counts = []
    for _ in range(2):
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
        s = json.loads((tmp_path / "cov.json").read_text())["summary"]
        counts.append((s["kernels_compiled"], s["kernels_loaded"]))
    (c1, l1), (c2, l2) = counts
    assert c1 > 0, counts              # a fresh cache folder: the first run compiles
    # the second compiles nothing; it loads each kernel (helpers such as the index check that
    # a kernel called are inside its cached machine code, so they may count only the first time)
    assert c2 == 0 and 0 < l2 <= c1 + l1, counts

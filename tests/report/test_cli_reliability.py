"""Issue 28, the CLI: `coverage --relax` checks its options as `coverage` does (items 4, 14).

Before: `--relax` took `--jobs 0` and `--targets gpu` and exited 0, found an unwritable `-o`
only after the whole matrix ran (a traceback, exit 1), and a broken tvm install gave a
traceback.  Now each is one `texpr-ad coverage: error: ...` line, exit 2, before any work.
"""
import subprocess
import sys
from pathlib import Path

import pytest

from texpr_ad.report import cli

ROOT = Path(__file__).resolve().parents[2]


def _usage_error(argv, capsys) -> str:
    assert cli.main(["coverage", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.count("\n") == 0, err
    assert err.startswith("texpr-ad coverage: error: "), err
    return err


MISTAKES = [  # (arguments, what the one line says); each with and without --relax
    (["--jobs", "0"], "--jobs must be >= 1, got 0"),
    (["--jobs", "-3"], "--jobs must be >= 1, got -3"),
    (["--targets", "gpu"], "unknown target(s) ['gpu'] in --targets"),
    (["--targets", "cpu,gpu"], "unknown target(s) ['gpu']"),
    (["--ops", ","], "--ops ',' names no operator"),
    (["--ops", ""], "--ops '' names no operator"),
    (["--targets", ","], "--targets ',' names no target"),
    (["-o", ""], "-o needs a path"),
]


@pytest.mark.parametrize("relax", [False, True], ids=["coverage", "relax"])
@pytest.mark.parametrize("argv,message", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_option_mistakes_are_usage_errors_on_both_paths(argv, message, relax, capsys, no_matrix):
    err = _usage_error([*argv, *(["--relax"] if relax else [])], capsys)
    assert message in err
    assert not no_matrix


@pytest.mark.parametrize("relax", [False, True], ids=["coverage", "relax"])
def test_unwritable_output_is_found_before_the_matrix(tmp_path, capsys, no_matrix, relax):
    if relax:
        pytest.importorskip("tvm")
    (tmp_path / "blocker").write_text("a file, not a folder")
    out = tmp_path / "blocker" / "sub" / "report"
    err = _usage_error(["--ops", "relu" if not relax else "relax.nn.gelu", "--format", "json",
                        "-o", str(out), *(["--relax"] if relax else [])], capsys)
    assert "-o: cannot write" in err and str(tmp_path / "blocker") in err
    assert not no_matrix


def test_relax_output_that_is_a_folder(tmp_path, capsys, no_matrix):
    pytest.importorskip("tvm")
    (tmp_path / "rep.relax.md").mkdir()
    err = _usage_error(["--relax", "--ops", "relax.nn.gelu", "-o", str(tmp_path / "rep")], capsys)
    assert "rep.relax.md (is a folder)" in err
    assert not no_matrix


BROKEN = {  # how a broken install fails on `import tvm`
    "OSError": 'raise OSError("libtvm.so: cannot open shared object file")',
    "ImportError": 'raise ImportError("undefined symbol: TVMFFIFunctionCall")',
    "RuntimeError": 'raise RuntimeError("tvm_ffi ABI mismatch\\nsecond line")',
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_tvm_install_is_one_line(tmp_path, kind):
    """A `tvm` package whose import fails (simulated on PYTHONPATH, in a process of its own):
    one line naming the failure and the fix, exit 2 (as a missing tvm), no traceback."""
    (tmp_path / "tvm").mkdir()
    (tmp_path / "tvm" / "__init__.py").write_text(BROKEN[kind] + "\n")
    r = subprocess.run([sys.executable, "-m", "texpr_ad", "coverage", "--relax", "--ops",
                        "relax.nn.gelu", "--no-progress"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env={**_env(), "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    err = r.stderr.strip()
    assert "Traceback" not in err and err.count("\n") == 0, err
    assert f"--relax: importing tvm failed ({kind}: " in err and "reinstall" in err, err


def test_broken_tvm_install_makes_the_tvm_column_na_with_the_reason(tmp_path):
    """More of the class: without --relax, the tvm column of a broken install failed in every
    row (not gating); it is n/a with the import failure as its reason, as 'tvm not installed'."""
    import json
    (tmp_path / "tvm").mkdir()
    (tmp_path / "tvm" / "__init__.py").write_text(BROKEN["OSError"] + "\n")
    r = subprocess.run([sys.executable, "-m", "texpr_ad", "coverage", "--ops", "relu",
                        "--targets", "tvm", "--format", "json", "--no-progress"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       env={**_env(), "PYTHONPATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    (col,) = [c for c in rep["columns"] if c["key"] == "tvm"]
    assert "importing tvm failed (OSError: libtvm.so" in col["unavailable_reason"]
    assert "Traceback" not in r.stderr


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

"""Issue 13, class 9: every usage mistake exits 2 with one line on stderr, never a traceback;
1 only when a check fails (docs/cli.md)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from texpr_ad.report import cli

ROOT = Path(__file__).resolve().parents[2]

USER_FILE = '''
from texpr_ad import te

def raises():
    raise ValueError("boom")

def returns_int():
    return 3

def returns_ints():
    return (1, 2)

def returns_nothing():
    return ([], [])

def exits():
    raise SystemExit(0)

def reads_out_of_bounds():
    A = te.placeholder((3,), "float64", name="A")
    return te.compute((3,), lambda i: A[i + 5], name="B"), [A]

def input_not_listed():
    A = te.placeholder((3,), "float64", name="A")
    return te.compute((3,), lambda i: A[i] * 2.0, name="B"), []

def symbolic():
    n = te.var("n")
    A = te.placeholder((n,), "float64", name="A")
    return te.compute((n,), lambda i: A[i] * 2.0, name="B"), [A]
'''


@pytest.fixture(scope="module")
def user(tmp_path_factory):
    d = tmp_path_factory.mktemp("user")
    (d / "ops.py").write_text(USER_FILE)
    (d / "syntax.py").write_text("def f(:\n    pass\n")
    (d / "imports.py").write_text("import no_such_module_texpr\n\ndef f():\n    pass\n")
    return d


GRAD_MISTAKES = [  # (arguments after `grad`, what stderr must say)
    (["syntax.py:f"], r"syntax error in .*syntax.py line 1"),
    (["imports.py:f"], r"importing .*imports.py raised ModuleNotFoundError: .*no_such_module_texpr"
                       r"' \(imports.py line 1\)"),
    (["ops.py:raises"], r"raised ValueError: boom \(ops.py line 5\)"),
    (["ops.py:returns_int"], r"must return \(outputs, inputs\), got int"),
    (["ops.py:returns_ints"], r"must be te tensors, got int"),
    (["ops.py:returns_nothing"], r"returned no outputs"),
    (["ops.py:exits"], r"raised SystemExit"),
    (["ops.py:reads_out_of_bounds"], r"out of bounds"),
    (["ops.py:input_not_listed"], r"not listed in inputs"),
    (["ops.py:no_such_function"], r"has no function 'no_such_function'"),
    (["ops.py"], r"expected FILE.py:FUNC"),
    (["missing.py:f"], r"no file"),
    (["ops.py:symbolic"], r"--shapes A=4x5"),
    (["ops.py:symbolic", "--shapes", "A=x3"], r"--shapes expects NAME=4x5"),
    (["ops.py:symbolic", "--shapes", "A=-3"], r"--shapes expects NAME=4x5"),
    (["ops.py:symbolic", "--shapes", "A=3x4"], r"gives 2 dims; 'A' has 1"),
    (["ops.py:symbolic", "--shapes", "B=3"], r"are not inputs"),
]


@pytest.mark.parametrize("argv,message", GRAD_MISTAKES, ids=[" ".join(a) for a, _ in GRAD_MISTAKES])
def test_grad_usage_mistakes_exit_2_with_one_line(user, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(user)
    assert cli.main(["grad", *argv, "--no-source"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("texpr-ad grad: error: ")
    assert re.search(message, err[-1]), err[-1]
    assert "Traceback" not in "\n".join(err)


def test_grad_exit_1_only_when_the_check_fails(user, monkeypatch, capsys):
    monkeypatch.chdir(user)
    assert cli.main(["grad", "ops.py:symbolic", "--shapes", "A=3", "--no-source"]) == 0
    assert cli.main(["grad", "ops.py:symbolic", "--shapes", "A=0", "--no-source"]) == 0
    monkeypatch.setattr(cli, "_user_grad_check", lambda *a, **k: ("fail", 1.0, ""))
    assert cli.main(["grad", "ops.py:symbolic", "--shapes", "A=3", "--no-source"]) == 1


@pytest.mark.parametrize("output", ["{blocker}/sub/report", "{tmp}/a_folder"])
def test_unwritable_output_is_a_usage_error_before_the_run(tmp_path, capsys, monkeypatch,
                                                           output):
    (tmp_path / "blocker").write_text("a file, not a folder")
    (tmp_path / "a_folder.md").mkdir()
    called = []
    monkeypatch.setattr("texpr_ad.report.coverage.run_coverage", lambda *a, **k: called.append(1))
    out = output.format(blocker=tmp_path / "blocker", tmp=tmp_path)
    assert cli.main(["coverage", "--ops", "relu", "--targets", "cpu", "--format", "md",
                     "-o", out, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "error: -o: cannot write" in err and "Traceback" not in err
    assert not called  # no minutes of work before the mistake is reported


def _exit_code(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's own mistakes (unknown choice, missing argument)
        return int(e.code)


@pytest.mark.parametrize("argv", [["show", "relu", "--dtype", "foo"], ["show", "no_such_op"],
                                  ["coverage", "--jobs", "0"], ["bogus"], ["grad"]])
def test_other_usage_mistakes_exit_2(capsys, argv):
    assert _exit_code(argv) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_real_process_prints_no_traceback(user):
    r = subprocess.run([sys.executable, "-m", "texpr_ad", "grad", "ops.py:raises"], cwd=user,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.strip().count("\n") == 0, r.stderr

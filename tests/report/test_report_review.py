"""What the coverage report told a new reader that was not so (the report review pass).

Each test pins one finding: before its fix, the report or the CLI misled (a typo'd operator
silently dropped, a CUDA mode claimed that did not run, a header naming neither the CPU nor
the threads the timings ran on).
"""
import pytest

from texpr_ad.report import cli


@pytest.fixture
def no_matrix(monkeypatch):
    """Record (instead of run) both matrices: a usage error must come before any of them."""
    calls = []
    monkeypatch.setattr("texpr_ad.report.coverage.run_coverage", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("texpr_ad.report.relax_matrix.run_relax_matrix",
                        lambda *a, **k: calls.append(a))
    return calls


def test_an_ops_glob_that_matches_nothing_is_refused_even_beside_one_that_matches(
        capsys, no_matrix):
    """`--ops relu,reluu` ran relu alone and exited 0: the typo'd operator was silently
    missing from the report.  Each glob must match; the line names it and close names."""
    assert cli.main(["coverage", "--ops", "relu,reluu", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("texpr-ad coverage: error: --ops 'reluu' matches no operator"), err
    assert "relu" in err.split("matches no operator")[1], err  # the close name
    assert not no_matrix


def test_a_relax_ops_glob_that_matches_nothing_is_refused(capsys, no_matrix):
    pytest.importorskip("tvm")
    assert cli.main(["coverage", "--relax", "--ops", "relax.nn.gelu,relax.nn.gelux",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--ops 'relax.nn.gelux' matches no Relax tensor op" in err, err
    assert not no_matrix

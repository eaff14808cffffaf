"""Fixtures shared by the report and CLI tests."""
import pytest


@pytest.fixture
def no_matrix(monkeypatch):
    """Record (instead of run) both matrices: a usage error must come before any of them."""
    calls = []
    monkeypatch.setattr("texpr_ad.report.coverage.run_coverage", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("texpr_ad.report.relax_matrix.run_relax_matrix",
                        lambda *a, **k: calls.append(a))
    return calls

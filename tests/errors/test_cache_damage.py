"""Issue 13, class 8: a damaged kernel cache is detected, reported and rebuilt; no writable
folder at all compiles in memory with a warning (never a raw UnpicklingError, EOFError,
UnicodeDecodeError or tempfile's error)."""
import tempfile
import warnings

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad.kernels import cache
from texpr_ad.kernels.cache import CacheWarning


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A private cache folder; modules and one-time warnings forgotten before and after."""
    monkeypatch.setenv("TEXPR_CACHE_DIR", str(tmp_path))
    for reset in (cache._MODULES.clear, cache._WARNED.clear):
        reset()
    yield tmp_path
    cache._MODULES.clear()
    cache._WARNED.clear()


def _run(scale: float) -> np.ndarray:
    A = te.placeholder((4,), "float64", name="A")
    B = te.compute((4,), lambda i: A[i] * scale, name="B")
    return ta.build([B], [A])(np.arange(4.0))[0]


def _second_process(scale: float) -> tuple[np.ndarray, list[str]]:
    """Run the kernel as a new process would: the module is imported again from disk."""
    cache._MODULES.clear()
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        y = _run(scale)
    return y, [str(w.message) for w in rec if issubclass(w.category, CacheWarning)]


DAMAGE = {  # how a file gets damaged: truncated, emptied, overwritten with garbage
    "truncated": lambda b: b[: len(b) // 3],
    "empty": lambda b: b"",
    "garbage": lambda b: b"garbage\n\xff\xfe" * 3,
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
@pytest.mark.parametrize("suffix", [".nbi", ".nbc", ".py"])
def test_damaged_cache_file_warns_names_it_and_rebuilds(fresh, suffix, kind):
    scale = 2.0 + 0.25 * sorted(DAMAGE).index(kind) + [".nbi", ".nbc", ".py"].index(suffix)
    want = np.arange(4.0) * scale
    np.testing.assert_array_equal(_run(scale), want)
    files = [p for p in fresh.rglob(f"*{suffix}") if p.name.startswith("texpr_")]
    assert files, sorted(fresh.rglob("*"))
    for p in files:
        p.write_bytes(DAMAGE[kind](p.read_bytes()))
    y, msgs = _second_process(scale)
    np.testing.assert_array_equal(y, want)
    assert any("damaged" in m and files[0].name in m for m in msgs), msgs
    y, msgs = _second_process(scale)  # repaired: the next run loads quietly from the cache
    np.testing.assert_array_equal(y, want)
    assert msgs == []


def _no_tempdir():
    raise FileNotFoundError("No usable temporary directory found in ['/tmp']")


def test_no_writable_folder_compiles_in_memory_with_a_warning(fresh, monkeypatch):
    blocker = fresh / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TEXPR_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "gettempdir", _no_tempdir)
    with pytest.warns(CacheWarning, match="no writable folder.*TEXPR_CACHE_DIR"):
        y = _run(7.0)
    np.testing.assert_array_equal(y, np.arange(4.0) * 7.0)
    assert cache.cache_dir() is None
    assert not list(fresh.rglob("texpr_*"))


@pytest.mark.parametrize("where", ["a_file/cache", "a_file"])  # under a file; a file itself
def test_unwritable_texpr_cache_dir_falls_back_to_temp_with_a_warning(fresh, monkeypatch, where):
    (fresh / "a_file").write_text("not a folder")
    monkeypatch.setenv("TEXPR_CACHE_DIR", str(fresh / where))
    monkeypatch.setattr(tempfile, "tempdir", str(fresh / "tmp"))
    (fresh / "tmp").mkdir()
    with pytest.warns(CacheWarning, match="TEXPR_CACHE_DIR=.*cannot be written"):
        assert cache.cache_dir() == fresh / "tmp" / "texpr_cache"


def test_cache_warning_is_a_texpr_warning():
    assert issubclass(CacheWarning, ta.errors.TexprWarning)

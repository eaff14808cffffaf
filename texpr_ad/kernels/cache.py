"""Compile generated source through a real file in a cache folder.

The file is named by a hash of the source, so Numba's own `cache=True` finds
its compiled machine code beside it (in `__pycache__`) and a second process
starts warm.  A real file (plus a `linecache` entry) also makes tracebacks and
Numba errors point into readable generated code.  Within one process, modules
are kept in a dict keyed by the source text.

The folder is `$TEXPR_CACHE_DIR`, else `.texpr_cache/` under the current
directory; if that cannot be written, a folder under the system temp dir (with a
`CacheWarning` when `$TEXPR_CACHE_DIR` was set).  With no writable folder at all,
kernels are compiled in memory, not cached on disk (one `CacheWarning`).

texpr_ad's float32 GEMM (`gemm_f32.py`) is cached by Numba itself, beside its source (or
under NUMBA_CACHE_DIR, or the user's cache folder); where Numba finds none of them writable,
under `numba/` in this folder, else it is compiled in memory too.

Damaged cache files (truncated, empty, garbage: a full disk, a killed process, a
copy gone wrong) are detected when they are read: a `CacheWarning` names the file,
it is removed and the kernel is compiled again (and cached afresh).
`compile_counts()` says how many of the CPU functions this process ran were
compiled and how many were loaded from the disk cache.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import linecache
import os
import sys
import tempfile
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from ..errors import TexprWarning

_MODULES: dict[str, ModuleType] = {}
_WARNED: set[str] = set()


class CacheWarning(TexprWarning):
    """The kernel cache could not be used as configured (a damaged file, no writable folder)."""


def _warn_once(key: str, msg: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(msg, CacheWarning, stacklevel=3)


def _writable(d: Path) -> str | None:
    """None when `d` exists or was created and a file can be made in it, else why not."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=d).close()
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"


def cache_dir() -> Path | None:
    """The folder generated kernels are written to (created on demand); None when no folder
    can be written (kernels are then compiled in memory, see `load`)."""
    env = os.environ.get("TEXPR_CACHE_DIR")
    tried: list[str] = []
    for d in [Path(env) if env else Path.cwd() / ".texpr_cache", _temp_folder()]:
        why = "none usable" if d is None else _writable(d)
        if why is None:
            if env and tried:
                _warn_once(f"env:{env}", f"TEXPR_CACHE_DIR={env} cannot be written ({tried[0]}); "
                                         f"caching kernels in {d}")
            return d
        tried.append(f"{d or 'the system temp dir'}: {why}")
    _warn_once("none", "no writable folder for the texpr_ad kernel cache (" + "; ".join(tried) +
               "): kernels are compiled in memory and not cached across processes; set "
               "TEXPR_CACHE_DIR to a writable folder")
    return None


@contextlib.contextmanager
def numba_cache_dir(folder: Path) -> Iterator[None]:
    """Numba's NUMBA_CACHE_DIR set to `folder` while functions are decorated inside (a
    dispatcher's cache locator keeps the folder it was created with)."""
    from numba.core import config
    old = config.CACHE_DIR
    config.CACHE_DIR = str(folder)
    try:
        yield
    finally:
        config.CACHE_DIR = old


def warn_uncached(what: str) -> None:
    """One CacheWarning: `what` (compiled by Numba with cache=True) has no cache folder."""
    _warn_once(f"uncached:{what}", f"Numba finds no writable cache folder for {what} (its "
                                   f"package folder, NUMBA_CACHE_DIR, the user's cache folder "
                                   f"and texpr_ad's kernel cache all unusable): it is compiled "
                                   f"in memory in every process; set TEXPR_CACHE_DIR (or "
                                   f"NUMBA_CACHE_DIR) to a writable folder")


def _temp_folder() -> Path | None:
    try:
        return Path(tempfile.gettempdir()) / "texpr_cache"
    except (OSError, FileNotFoundError):  # "No usable temporary directory found"
        return None


def compile_counts() -> tuple[int, int]:
    """(compiled, loaded from disk) over the jitted CPU functions of the generated modules this
    process has called so far, from Numba's own per-signature cache statistics."""
    compiled = loaded = 0
    for mod in list(_MODULES.values()):
        for fn in vars(mod).values():
            stats = getattr(fn, "stats", None)
            if stats is None or getattr(getattr(fn, "py_func", None), "__module__", None) != mod.__name__:
                continue  # not a dispatcher of this module (e.g. an imported vecmath helper)
            compiled += sum(stats.cache_misses.values())
            loaded += sum(stats.cache_hits.values())
    return compiled, loaded


def module_name(source: str) -> str:
    return "texpr_" + hashlib.sha256(source.encode()).hexdigest()[:20]


def load(source: str) -> ModuleType:
    """Import `source` as a module from `<cache_dir>/<hash>.py` (memoized by source text)."""
    mod = _MODULES.get(source)
    if mod is not None:
        return mod
    name = module_name(source)
    folder = cache_dir()
    path = None if folder is None else _write(folder / f"{name}.py", source)
    if path is None:  # no disk cache: the same source with Numba's caching off
        mod = ModuleType(name)
        mod.__file__ = f"<texpr_ad kernel {name}>"
        linecache.cache[mod.__file__] = (len(source), None, source.splitlines(True), mod.__file__)
        sys.modules[name] = mod
        exec(compile(source.replace("cache=True", "cache=False"), mod.__file__, "exec"),
             vars(mod))
    else:
        linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        for fn in vars(mod).values():
            _guard_numba_cache(fn)
    _MODULES[source] = mod
    return mod


def _write(path: Path, source: str) -> Path | None:
    """`path` holding exactly `source` (written if missing or damaged), None if it cannot be."""
    data = source.encode()
    try:
        if path.exists():
            if path.read_bytes() == data:
                return path  # untouched: keeps its mtime (Numba's cache index is keyed by it)
            _warn_once(str(path), f"damaged kernel cache file {path} (its content does not "
                                  f"match its hash): rewriting it")
        # write-then-rename: concurrent processes never see a half-written file
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return path
    except OSError as e:
        _warn_once(f"write:{path.parent}", f"cannot write the kernel cache file {path} ({e}); "
                                           f"compiling kernels in memory")
        return None


def _guard_numba_cache(fn: Any) -> None:
    """Make a damaged Numba cache file of dispatcher `fn` (index `.nbi` or data `.nbc`) a
    warning, a removed file and a recompilation, instead of an UnpicklingError/EOFError on
    every later run.  Numba's loader only forgives missing files and version mismatches."""
    cache: Any = getattr(fn, "_cache", None)  # Numba internals, untyped
    files = getattr(cache, "_cache_file", None)
    if files is None or getattr(cache, "_texpr_guarded", False):
        return
    inner: Callable[..., Any] = cache.load_overload

    def load_overload(sig: Any, target_context: Any) -> Any:
        try:
            return inner(sig, target_context)
        except Exception as e:  # anything that fails to load is a cache miss
            index = Path(files._index_path)
            data = sorted(index.parent.glob(index.name.removesuffix(".nbi") + ".*.nbc"))
            try:
                files._load_index()
                bad = [p.name for p in data]  # the index reads: a data file is damaged
            except Exception:
                bad = [index.name]
            for p in [index, *data]:
                p.unlink(missing_ok=True)
            warnings.warn(f"damaged Numba cache file {', '.join(bad)} in {index.parent} "
                          f"({type(e).__name__}: {e}): removed it, compiling {fn.__name__} again",
                          CacheWarning, stacklevel=2)
            return None

    cache.load_overload = load_overload
    cache._texpr_guarded = True

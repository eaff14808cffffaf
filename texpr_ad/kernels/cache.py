"""Compile generated source through a real file in a cache folder.

The file is named by a hash of the source, so Numba's own `cache=True` finds
its compiled machine code beside it (in `__pycache__`) and a second process
starts warm.  A real file (plus a `linecache` entry) also makes tracebacks and
Numba errors point into readable generated code.  Within one process, modules
are kept in a dict keyed by the source text.

The folder is `$TEXPR_CACHE_DIR`, else `.texpr_cache/` under the current
directory; if that cannot be written, a folder under the system temp dir.
`compile_counts()` says how many of the CPU functions this process ran were
compiled and how many were loaded from the disk cache.
"""
from __future__ import annotations

import hashlib
import importlib.util
import linecache
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

_MODULES: dict[str, ModuleType] = {}


def cache_dir() -> Path:
    """The folder generated kernels are written to (created on demand)."""
    env = os.environ.get("TEXPR_CACHE_DIR")
    for d in ([Path(env)] if env else [Path.cwd() / ".texpr_cache"]) + \
             [Path(tempfile.gettempdir()) / "texpr_cache"]:
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            continue
    raise OSError("no writable folder for the texpr_ad kernel cache; set TEXPR_CACHE_DIR")


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
    path = cache_dir() / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        # write-then-rename: concurrent processes never see a half-written file, and an
        # existing file keeps its mtime (Numba's cache index is keyed by it)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    _MODULES[source] = mod
    return mod

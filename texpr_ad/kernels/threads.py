"""Numba's threading layer: which one kernels run on, and how each is made safe.

A parallel kernel runs on one of Numba's three threading layers; what each tolerates
(Numba's documentation, and measured here with 8 threads calling kernels and a
`multiprocessing` fork pool whose workers call kernels after the parent did):

| layer | threads | forked child | what texpr_ad does |
| --- | --- | --- | --- |
| `tbb` (the `tbb` dependency) | safe | safe | preferred: chosen unless you set a layer |
| `omp`, GNU libgomp | safe | killed (SIGTERM) by Numba on its first parallel kernel: the pool hangs | kernels in a forked child run a serial build, with one `ThreadingWarning` |
| `omp`, Intel | safe | safe | nothing |
| `workqueue` | process aborts on concurrent calls | safe | one process-wide lock serializes kernel calls |

`NUMBA_THREADING_LAYER` (or `numba.config.THREADING_LAYER`) set by you is respected; the
table's guards then apply to whatever layer Numba starts.  The pip `tbb` wheel puts
`libtbb.so.12` in `<prefix>/lib`, which the loader does not search, so `prefer_tbb` loads it
by path first (without that Numba silently falls back to GNU OpenMP).
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from contextlib import nullcontext
from typing import Any, ContextManager

from ..errors import TexprWarning

_TBB_LIBS = ("libtbb.so.12", "libtbb.12.dylib", "tbb12.dll")


class ThreadingWarning(TexprWarning):
    """Kernels run with less parallelism than asked, to stay safe (e.g. in a forked child)."""


class _State:
    layer: str | None = None        # Numba's layer once started
    gnu_omp: bool = False           # GNU OpenMP: parallel regions are unsafe after fork
    forked: bool = False            # this process is a fork of one that started the layer
    call_lock: ContextManager[Any] = nullcontext()  # held around each kernel call


STATE = _State()


def prefer_tbb() -> bool:
    """Let Numba find TBB (the pip wheel's libtbb, loaded by path), so that its default choice
    (and `NUMBA_THREADING_LAYER=tbb`, `safe`, `threadsafe`, `forksafe`) is TBB; nothing when
    you chose `omp` or `workqueue`.  True when TBB can be used."""
    import numba
    if numba.config.THREADING_LAYER in ("omp", "workqueue"):  # chosen by you: respected
        return False
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        files = distribution("tbb").files or []
    except PackageNotFoundError:
        return False
    for f in files:
        if f.name in _TBB_LIBS:
            try:
                ctypes.CDLL(str(f.locate()), mode=ctypes.RTLD_GLOBAL)
                return True
            except OSError:
                return False
    return False


def after_launch() -> None:
    """Record the layer Numba started and install its guards (call once, after launch)."""
    import numba
    STATE.layer = numba.threading_layer()
    if STATE.layer == "workqueue":
        STATE.call_lock = threading.Lock()
    if STATE.layer == "omp":
        from numba.np.ufunc import omppool
        STATE.gnu_omp = omppool.openmp_vendor == "GNU"
    os.register_at_fork(after_in_child=_in_child)


def _in_child() -> None:
    STATE.forked = True
    if isinstance(STATE.call_lock, type(threading.Lock())):
        STATE.call_lock = threading.Lock()  # a lock held by another thread at fork stays held


def serial_only() -> bool:
    """True where a parallel kernel would kill this process (a fork under GNU OpenMP)."""
    return STATE.forked and STATE.gnu_omp


_WARNED: list[bool] = []


def warn_serial() -> None:
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn("texpr_ad kernels run serially in this process: it was forked after GNU "
                      "OpenMP started, which cannot run parallel regions after a fork; install "
                      "`tbb` (Numba then uses it) or use multiprocessing's 'spawn' or "
                      "'forkserver' start method for parallel kernels in workers",
                      ThreadingWarning, stacklevel=4)

"""Numba's threading layer: which one kernels run on, and how each is made safe.

A parallel kernel runs on one of Numba's three threading layers; what each tolerates
(Numba's documentation, and measured here with 8 threads calling kernels and a
`multiprocessing` fork pool whose workers call kernels after the parent did):

| layer | threads | forked child | what texpr_ad does |
| --- | --- | --- | --- |
| `omp`, GNU libgomp (Numba's default on Linux) | safe | killed (SIGTERM) by Numba on its first parallel kernel: a fork pool hangs | kernels in a forked child run a serial build of the same source, with one `ThreadingWarning` |
| `omp`, Intel | safe | safe | nothing |
| `tbb` (`NUMBA_THREADING_LAYER=tbb`, `pip install tbb`) | safe | safe, parallel | nothing |
| `workqueue` (where no OpenMP is installed) | the process aborts on concurrent calls | safe | one process-wide lock serializes kernel calls |

GNU OpenMP stays the default: TBB's workers keep spinning after a parallel loop and take the
cores from the BLAS threads of contraction stages (measured on 2 cores: dense forward median
6.9-9.7 ms under TBB, 5.8-6.7 ms under OpenMP with `OMP_WAIT_POLICY=PASSIVE`), though it
launches small kernels faster.  Ask for it with `NUMBA_THREADING_LAYER=tbb` (or `safe`,
`threadsafe`, `forksafe`): the pip `tbb` wheel puts `libtbb.so.12` in `<prefix>/lib`, which the
loader does not search, so `load_tbb` loads it by path first (else Numba cannot use it).
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


def load_tbb() -> bool:
    """Let Numba find the pip wheel's libtbb (loaded by path) where you asked for a layer TBB
    can be (`tbb`, `safe`, `threadsafe`, `forksafe`).  True when TBB can be used."""
    import numba
    if numba.config.THREADING_LAYER not in ("tbb", "safe", "threadsafe", "forksafe"):
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


_WARNED: list[bool] = []


def warn_serial() -> None:
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn("texpr_ad kernels run serially in this process: it was forked after GNU "
                      "OpenMP started, which cannot run parallel regions after a fork; for "
                      "parallel kernels in workers use multiprocessing's 'spawn' or "
                      "'forkserver' start method, or NUMBA_THREADING_LAYER=tbb (pip install "
                      "tbb, the `tbb` extra)",
                      ThreadingWarning, stacklevel=4)


def set_num_threads(n: int) -> None:
    """Run parallel kernels on `n` threads (`numba.set_num_threads`), e.g. one in each worker
    process of a pool that already keeps the cores busy."""
    import numba
    numba.set_num_threads(n)


def num_threads() -> int:
    """The threads parallel kernels run on (`numba.get_num_threads`)."""
    import numba
    return int(numba.get_num_threads())

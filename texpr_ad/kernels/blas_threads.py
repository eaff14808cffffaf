"""The thread count of NumPy's BLAS while texpr_ad's own contraction stages run.

`numba_cpu.stack_matmul` splits a product over `numba.get_num_threads()` Python threads, each a
BLAS call.  Where BLAS runs its own thread pool as well (OpenBLAS's default: one thread per
core), the two pools oversubscribe the cores, and OpenBLAS's workers keep spinning after each
call and take the cores from the Numba loops of the next stage (measured on 2 cores at
b47a8d8, conv2d 8x64x56x56 3x3 backward: median 53-77 ms in the default environment, 41-61 ms
with OPENBLAS_NUM_THREADS=1, 32-35 ms with this module; one BLAS call on BLAS's own threads
instead of the split: 50-63 ms).  So `single_threaded()` sets every BLAS library loaded in the
process to one thread around texpr_ad's BLAS calls and restores the count it found afterwards:
the user's own setting (`OPENBLAS_NUM_THREADS`, `threadpoolctl`) holds outside texpr_ad's
kernels (NumPy calls made by other threads *during* such a stage also run on one thread).

The libraries are found once, through threadpoolctl; each gets a (get, set) pair of thread-count
functions from `_HANDLES`, by its threadpoolctl `internal_api`:

| library | handles | why |
| --- | --- | --- |
| OpenBLAS | its C `openblas_get/set_num_threads` (any symbol prefix/suffix), through ctypes | about 0.3 us a call, and from any thread (threadpoolctl's own `set_num_threads` lets only the first thread that called it change OpenBLAS) |
| others (MKL, BLIS, FlexiBLAS) | the threadpoolctl controller's `get_num_threads`/`set_num_threads` | |

Nested and concurrent kernel calls share one count: the first to enter sets one thread, the
last to leave restores what the first found.
"""
from __future__ import annotations

import ctypes
import functools
import itertools
import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

Handles = tuple[Callable[[], int], Callable[[int], Any]]

_OPENBLAS_AFFIXES = tuple(itertools.product(("", "scipy_"), ("", "64_", "_64")))


def _openblas(lib: Any) -> Handles | None:
    """OpenBLAS's own C functions, under whichever symbol prefix/suffix this build uses."""
    for pre, suf in _OPENBLAS_AFFIXES:
        get = getattr(lib.dynlib, f"{pre}openblas_get_num_threads{suf}", None)
        put = getattr(lib.dynlib, f"{pre}openblas_set_num_threads{suf}", None)
        if get is not None and put is not None:
            get.restype, put.restype, put.argtypes = ctypes.c_int, None, [ctypes.c_int]
            return get, put
    return None


def _controller(lib: Any) -> Handles | None:
    return lib.get_num_threads, lib.set_num_threads


_HANDLES: dict[str, Callable[[Any], Handles | None]] = {"openblas": _openblas}


@functools.cache
def blas_handles() -> tuple[Handles, ...]:
    """(get, set) thread-count functions of each BLAS library loaded in this process."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # a base dependency; without it BLAS keeps its own thread count
        return ()
    found = []
    for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
        h = _HANDLES.get(lib.internal_api, _controller)(lib)
        if h is not None:
            found.append(h)
    return tuple(found)


class _Shared:
    lock = threading.Lock()
    depth = 0                  # kernel calls inside `single_threaded` right now
    saved: list[int] = []      # the counts the first of them found


def _reset_in_child() -> None:
    _Shared.lock, _Shared.depth = threading.Lock(), 0  # a lock held at fork stays held


os.register_at_fork(after_in_child=_reset_in_child)


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the body with every loaded BLAS library on one thread, then restore their counts."""
    handles = blas_handles()
    with _Shared.lock:
        if _Shared.depth == 0:
            _Shared.saved = [get() for get, _ in handles]
            for (_, put), n in zip(handles, _Shared.saved, strict=True):
                if n != 1:
                    put(1)
        _Shared.depth += 1
    try:
        yield
    finally:
        with _Shared.lock:
            _Shared.depth -= 1
            if _Shared.depth == 0:
                for (_, put), n in zip(handles, _Shared.saved, strict=True):
                    if n != 1:
                        put(n)

"""`CpuKernel`: the CPU target's kernel, Numba source compiled through the on-disk cache."""
from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..arrays import eval_shape
from ..schedule.plan import Plan
from ..te.expr import Const
from .kernel import Kernel, no_keywords
from .numba_cpu import CPURenderer, compile_source
from .render import Renderer


class CpuKernel(Kernel):
    """A built CPU kernel: NumPy arrays in, NumPy arrays out.

    Large intermediates (the renderer's `workspace`: im2col buffers, materialized
    stages of 1 MiB or more) are allocated on a thread's first call and reused by its
    later calls, as long as the kernel lives: fresh allocations that size come from
    `mmap`, and faulting their pages in again on every call cost more than the stage
    that fills them.  Outputs are always new arrays; a scatter's output of at least 32 MiB is
    passed in as `np.zeros` (`Zeroing.FRESH`: fresh pages, zeroed by the OS when first touched).
    """

    def __init__(self, plan: Plan, renderer: Renderer | None = None) -> None:
        renderer = renderer or CPURenderer()
        super().__init__(plan, renderer)
        self._ws_spec = [(t.shape, t.dtype) for t in renderer.workspace(plan)]
        self._ws_sized = all(isinstance(s, Const) for t, _ in self._ws_spec for s in t)
        self._ws = threading.local()
        self._zeroed = [(tuple(int(d.value) for d in t.shape), t.dtype)  # type: ignore[attr-defined]
                        for t in plan.zeroed]
        self._fn = compile_source(self.source)

    def __call__(self, *arrays: Any, **keywords: Any) -> tuple[np.ndarray, ...]:
        if keywords:
            no_keywords(keywords, self.plan.inputs)
        args, params = self._prepare(arrays)
        res = self._run(*args, *params, *self._workspace(params),
                        *(np.zeros(s, dtype=d) for s, d in self._zeroed))
        out: list[np.ndarray] = []
        for r, t in zip(res, self.plan.outputs, strict=True):
            r = r.reshape(()) if t.ndim == 0 else r
            out.append(r.copy() if any(np.may_share_memory(r, x) for x in out) else r)  # listed twice
        return tuple(out)

    def _workspace(self, params: list[int]) -> list[np.ndarray]:
        """This thread's workspace arrays for these symbolic dims' values (new when one changed)."""
        ws = getattr(self._ws, "arrays", None)
        if ws is not None and self._ws_sized:
            return ws
        shapes = [eval_shape(s, dict(zip(self.plan.params, params))) for s, _ in self._ws_spec]
        if ws is None or any(a.shape != s for a, s in zip(ws, shapes)):
            ws = self._ws.arrays = [np.empty(s, dtype=d) for s, (_, d) in zip(shapes, self._ws_spec)]
        return ws

    def bind(self, arrays: Sequence[Any]) -> Callable[..., tuple[np.ndarray, ...]]:
        """This kernel on C-contiguous arrays shaped and typed as `arrays`, checked now, not again
        (texpr_ad.torch's plans vouch); itself for several or 0-dim outputs/inputs, a workspace."""
        params, outs = self._prepare(arrays)[1], self.outputs
        plain = len(outs) == 1 and not (self._ws_spec or self._zeroed) \
            and all(t.ndim for t in (*outs, *self.inputs))
        return (lambda *a: self._run(*a, *params)) if plain else self

    def _internal_error(self, e: Exception) -> str:
        return (f"internal error: the generated kernel failed to compile ({type(e).__name__}); "
                f"its source is {self._fn.py_func.__code__.co_filename} (kernel.source); "
                f"please report it with print(kernel.plan)")

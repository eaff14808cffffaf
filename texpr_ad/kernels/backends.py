"""The targets, one record each: what a target requires, how it refines a target-neutral
plan, how it renders the plan and what kernel class compiles and calls the source.

    build = plan (schedule.planner.plan_stages) -> backend.refine -> backend.renderer().render
            -> backend.kernel_class (compile; call)

Adding a target means adding its modules and one row per layer: its refine step in
schedule/ with its row in `schedule.planner.REFINE` (the one home of the refine steps, so
that `plan_kernel(target=...)` works without kernels/, which schedule/ may not import), and
its renderer and kernel class in kernels/ with its record here.  `Backend.refine` reads
`REFINE`; tests/kernels/test_backends.py checks that the two tables name the same targets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..schedule.plan import Plan, ScheduleError
from ..schedule.planner import REFINE
from .cpu_kernel import CpuKernel
from .cuda_kernel import CudaKernel
from .cuda_render import CUDARenderer
from .cuda_runtime import require_cuda
from .kernel import Kernel
from .numba_cpu import CPURenderer
from .render import Renderer

Overrides = Mapping[str, Mapping[str, Any]] | None


def _always() -> None:
    """The CPU target needs nothing beyond the package's own dependencies (numba)."""


@dataclass(frozen=True)
class Backend:
    """One target.  `available()` raises, naming the fix, when the target cannot run here."""

    name: str
    available: Callable[[], None]
    renderer: Callable[[], Renderer]
    kernel_class: Callable[[Plan, Renderer], Kernel]

    @property
    def refine(self) -> Callable[[Plan, Overrides], Plan]:
        """The target's refine step (target-neutral plan, overrides -> the target's plan)."""
        return REFINE[self.name]


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("cpu", _always, CPURenderer, CpuKernel),
    # one @cuda.jit kernel per stage; numba.cuda is imported when the generated module loads
    Backend("cuda", require_cuda, CUDARenderer, CudaKernel),
)}


def backend(target: str) -> Backend:
    """The record of `target`, or a ScheduleError listing the targets."""
    if target not in BACKENDS:
        raise ScheduleError(f"unknown target {target!r}; choose one of {tuple(BACKENDS)}")
    return BACKENDS[target]

"""`build`: schedule, render and compile a tensor DAG into a callable kernel.

    kernel = build([Y], [A, W], target="cpu")
    (y,) = kernel(a, w)          # NumPy in, NumPy out (a tuple, one array per output)
    print(kernel.plan)           # what the scheduler decided and why
    print(kernel.source)         # the generated Numba source

Pipeline: plan (`schedule.planner.plan_stages`, target-neutral) -> refine (the target's
own decisions, `backend.refine`) -> render (`backend.renderer`, pure) -> compile and call
(`backend.kernel_class`).  The targets are the records of `kernels/backends.py`.
Scheduling decisions are changed with `plan_overrides` (see `texpr_ad.schedule.planner`),
or by passing an edited plan to the target's kernel class, `cpu_kernel.CpuKernel(plan)` or
`cuda_kernel.CudaKernel(plan)` (unchecked: your responsibility).

Environment: `TEXPR_DEBUG>=2` prints each plan, `>=3` also the source;
`TEXPR_CACHE_DIR` sets the cache folder.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..schedule.planner import plan_stages
from ..te.tensor import Tensor
from .backends import BACKENDS, backend
from .kernel import (Kernel, KernelArgumentError, KernelIndexError, index_error,  # noqa: F401
                     symbolic_divisors)

TARGETS = tuple(BACKENDS)


def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor], target: str = "cpu",
          plan_overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Kernel:
    """Compile `outputs` as a function of the placeholders `inputs` for `target`.

    Every placeholder reachable from the outputs must be listed in `inputs`;
    symbolic dims (`te.var`) are bound from the shapes of the arrays passed in.
    `plan_overrides={"stage": {"parallel": False, "fuse": 2, "order": [...],
    "inline": False}}` changes the scheduler's decisions for a stage.
    """
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    target_ = backend(target)
    target_.available()
    plan = plan_stages(list(outputs), list(inputs), plan_overrides)
    plan = target_.refine(plan, plan_overrides)
    return target_.kernel_class(plan, target_.renderer())

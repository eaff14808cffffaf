"""The backend records: one per target, and the planner's refine table names the same targets."""
from __future__ import annotations

import pytest

from texpr_ad.kernels.backends import BACKENDS, backend
from texpr_ad.schedule.planner import REFINE
from texpr_ad.schedule.plan import ScheduleError


def test_every_backend_has_its_refine_step_and_no_more():
    assert set(BACKENDS) == set(REFINE)
    for name, b in BACKENDS.items():
        assert b.refine is REFINE[name]


def test_unknown_target_names_the_targets():
    with pytest.raises(ScheduleError, match="choose one of"):
        backend("tpu")


def test_host_stand_in_reads_the_cuda_array_interface():
    """A torch CUDA tensor's `.dtype` is a torch dtype: the stand-in takes the interface's typestr
    (on the H100 the torch op failed with "Cannot interpret 'torch.float64' as a data type")."""
    import numpy as np

    from texpr_ad.kernels.cuda_runtime import host_stand_in

    class TorchLike:  # what the CUDA kernel sees of a torch.cuda tensor
        dtype = "torch.float64"
        shape = (2, 3)
        __cuda_array_interface__ = {"typestr": "<f8", "shape": (2, 3), "data": (0, False),
                                    "strides": None, "version": 3}

    h = host_stand_in(TorchLike())
    assert h.dtype == np.float64 and h.shape == (2, 3)


def test_cpu_and_cuda_kernels_are_siblings_that_run_the_base_init(capsys):
    """Each target's kernel class runs `Kernel.__init__`: under `flags(debug=3)` each prints its
    plan and source (CudaKernel used to subclass the CPU kernel, skip its __init__ and read
    TEXPR_DEBUG itself, so `flags` did not reach it).  Built without a GPU: nothing is launched."""
    from texpr_ad import te
    from texpr_ad._env import flags
    from texpr_ad.kernels.kernel import Kernel
    from texpr_ad.schedule.planner import plan_stages

    A = te.placeholder((4,), "float32", name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    for b in BACKENDS.values():
        plan = b.refine(plan_stages([B], [A]), None)
        with flags(debug=3):
            k = b.kernel_class(plan, b.renderer())
        out = capsys.readouterr().out
        assert isinstance(k, Kernel) and str(plan) in out and k.source in out, b.name
    assert not issubclass(BACKENDS["cuda"].kernel_class, BACKENDS["cpu"].kernel_class)

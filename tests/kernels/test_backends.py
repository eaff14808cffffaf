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

    from texpr_ad.kernels.numba_cuda import host_stand_in

    class TorchLike:  # what the CUDA kernel sees of a torch.cuda tensor
        dtype = "torch.float64"
        shape = (2, 3)
        __cuda_array_interface__ = {"typestr": "<f8", "shape": (2, 3), "data": (0, False),
                                    "strides": None, "version": 3}

    h = host_stand_in(TorchLike())
    assert h.dtype == np.float64 and h.shape == (2, 3)

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

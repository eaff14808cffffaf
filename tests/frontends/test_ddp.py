"""A model with a texpr_ad op trains under torch.distributed DDP (issue #27 item 6): two
processes started with spawn, gloo, on the CPU; the parameters after a few steps equal the
single-process run on the whole batch."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_two_processes_match_one(tmp_path, monkeypatch):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # children import ddp_model
    monkeypatch.setenv("PYTHONPATH", ":".join([str(Path(__file__).parent), *sys.path]))
    import ddp_model
    out = str(tmp_path / "params")
    torch.multiprocessing.spawn(ddp_model.ddp_worker, args=(2, _free_port(), out), nprocs=2)
    single = ddp_model.Net()
    ddp_model.train(single, *ddp_model.data())
    want = single.state_dict()
    for rank in (0, 1):
        got = torch.load(f"{out}.{rank}")
        assert got.keys() == want.keys()
        for k in want:
            torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=1e-12)
    assert not torch.equal(want["g"], torch.ones(8, dtype=torch.float64))  # it trained

"""The CUDA planner's tiled contractions (schedule/cuda.py TILE): which stages tile, in which
tile shape, and which do not.  Plans only (no GPU, no simulator); the kernels' values are
checked in tests/cuda (simulator sweep with tiles forced, sim_features.tiled_contractions)."""
from __future__ import annotations

import pytest

from texpr_ad import te
from texpr_ad.ops import nn
from texpr_ad.schedule import cuda
from texpr_ad.schedule.plan import ComputeStage, CudaStrategy, Tile
from texpr_ad.schedule.planner import plan_stages


@pytest.fixture(autouse=True)
def gpu_tiles(monkeypatch):
    """The GPU's tile shapes and thresholds, whatever the environment of this process."""
    monkeypatch.setattr(cuda, "TILES", (Tile(16, 4, 16), Tile(16, 2, 16)))
    monkeypatch.setattr(cuda, "TILE_MIN", 32)
    monkeypatch.setattr(cuda, "TILE_MIN_BLOCKS", 256)


def _plans(outs, ins) -> dict[str, object]:
    plan = cuda.refine(plan_stages(outs, ins))
    return {st.name: st.cuda for st in plan.stages if isinstance(st, ComputeStage)}


def _matmul(m: int, n: int, k: int, **kw):
    a, b = te.placeholder((m, k), name="a"), te.placeholder((k, n), name="b")
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r, **kw), name="y")
    return [y], [a, b]


def test_a_large_matmul_tiles_in_the_largest_shape_that_fills_the_gpu():
    big = _plans(*_matmul(1024, 1024, 256))["y"]  # 16 x 16 tiles of 64: enough blocks
    assert big.strategy is CudaStrategy.TILE and big.tile == Tile(16, 4, 16)
    mid = _plans(*_matmul(512, 1024, 1024))["y"]  # 128 tiles of 64, 512 of 32
    assert mid.strategy is CudaStrategy.TILE and mid.tile == Tile(16, 2, 16)


def test_batched_matmuls_and_convolutions_tile_over_their_batch_and_window_axes():
    x, y = te.placeholder((32, 256, 128), name="x"), te.placeholder((32, 128, 256), name="y")
    assert _plans([nn.batch_matmul(x, y, transpose_b=False)], [x, y])["T_batch_matmul"].tile \
        == Tile(16, 4, 16)
    img, w = te.placeholder((8, 64, 56, 56), name="img"), te.placeholder((64, 64, 3, 3), name="w")
    conv = _plans([nn.conv2d(img, w, 1, 1)], [img, w])
    tiled = [n for n, c in conv.items() if c.strategy is CudaStrategy.TILE]
    assert len(tiled) == 1 and conv[tiled[0]].tile == Tile(16, 4, 16)  # M = n*y*x, K = c*ry*rx


@pytest.mark.parametrize("why, graph", [
    ("short reduction", lambda: _matmul(1024, 1024, 16)),
    ("too few tiles", lambda: _matmul(64, 256, 4096)),
    ("an init", lambda: _matmul(1024, 1024, 256, init=[te.const(1.0, "float32")])),
])
def test_these_contractions_do_not_tile(why, graph):
    assert _plans(*graph())["y"].strategy is not CudaStrategy.TILE, why


def test_a_symbolic_extent_does_not_tile():
    n = te.var("n")
    a, b = te.placeholder((n, 256), name="a"), te.placeholder((256, 1024), name="b")
    r = te.reduce_axis((0, 256), name="r")
    y = te.compute((n, 1024), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="y")
    assert _plans([y], [a, b])["y"].strategy is not CudaStrategy.TILE

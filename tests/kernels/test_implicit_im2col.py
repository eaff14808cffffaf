"""Implicit im2col (schedule/cpu_implicit.py): a stride-1 convolution's product reads a padded
copy of its input in place, through a table of row offsets, instead of a stored gather.

The decision is checked on the plan (which stages exist, the window record, the notes), the
numbers against float64 torch (forward and both gradients) for the formulations users write,
and the runtime (`numba_cpu.window_matmul`) on both of its paths against an explicit gather."""
from __future__ import annotations

import numpy as np
import pytest

import texpr_ad as ta
from texpr_ad import te
from texpr_ad import _env
from texpr_ad.kernels.numba_cpu import window_matmul, window_matmul_a
from texpr_ad.ops import nn
from texpr_ad.schedule import plan_kernel

SEED = 2468


def rng():
    print(f"seed {SEED}")
    return np.random.default_rng(SEED)


@pytest.fixture
def gemm(monkeypatch):
    """Set TEXPR_AD_GEMM for one test (the planner asks _env.native_gemm, which caches)."""
    def set_(value):
        monkeypatch.setenv("TEXPR_AD_GEMM", value)
        _env.native_gemm.cache_clear()
    yield set_
    monkeypatch.delenv("TEXPR_AD_GEMM", raising=False)
    _env.native_gemm.cache_clear()


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


def _window(plan, name):
    c = plan.stage(name).cpu.contraction
    return None if c is None else c.window


def guarded_conv(x, w, pad, dil=1, extra=None):
    """A stride-1 2-d convolution with its padding written as a guard in the body; `extra`
    (ry, rx) -> an additional condition."""
    n, c, h, wd = _shape(x)
    o, _, kh, kw = _shape(w)
    oh, ow = h + 2 * pad - dil * (kh - 1), wd + 2 * pad - dil * (kw - 1)
    rc, ry, rx = (te.reduce_axis((0, e), name=nm) for e, nm in ((c, "c"), (kh, "ry"), (kw, "rx")))

    def body(b, f, i, j):
        yy, xx = i + dil * ry - pad, j + dil * rx - pad
        cond = [yy >= 0, yy < h, xx >= 0, xx < wd] + ([extra(ry, rx)] if extra else [])
        return te.sum(te.if_then_else(te.all(*cond), x[b, rc, yy, xx], 0.0) * w[f, rc, ry, rx],
                      axis=[rc, ry, rx])

    return te.compute((n, o, oh, ow), body, name="Y")


def _torch_check(y, x, w, torch_fn):
    """Forward and both gradients of `y` (float32 kernels) against float64 torch."""
    torch = pytest.importorskip("torch")
    head = te.placeholder(y.shape, "float32", name="head")
    dx, dw = ta.grad(y, [x, w], head=head)
    r = rng()
    xs, ws, hs = (r.standard_normal(_shape(t)).astype("float32") for t in (x, w, y))
    tx, tw = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xs, ws))
    ty = torch_fn(tx, tw)
    gx, gw = torch.autograd.grad(ty, [tx, tw], torch.from_numpy(hs.astype(np.float64)))
    fwd, bwd = ta.build([y], [x, w]), ta.build([dx, dw], [x, w, head])
    (got,) = fwd(xs, ws)
    got_dx, got_dw = bwd(xs, ws, hs)
    for a, b in ((got, ty.detach()), (got_dx, gx), (got_dw, gw)):
        scale = float(np.abs(b.numpy()).max())
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5 * scale)
    return fwd.plan, bwd.plan, dx


def test_registry_conv2d_reads_its_padded_input_in_place(gemm):
    gemm("native")
    torch = pytest.importorskip("torch")
    x = te.placeholder((2, 4, 34, 34), "float32", name="x")
    w = te.placeholder((8, 4, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, stride=1, padding=1)
    fwd, bwd, dx = _torch_check(y, x, w, lambda a, b: torch.nn.functional.conv2d(a, b, padding=1))
    names = [s.name for s in fwd.stages]
    assert "conv2d_padded" in names and not any(n.endswith("_im2col") for n in names), str(fwd)
    win = _window(fwd, "conv2d")
    # rows (c, ry, rx) of the padded 36x36 image, computed on 34x36 and cropped to 34x34
    assert (win.extents, win.strides, win.base, win.grid, win.out) == (
        (4, 3, 3), (36 * 36, 36, 1), 0, (34, 36), (34, 34)), str(fwd)
    assert any(n.startswith("implicit im2col") for n in fwd.stage("conv2d").notes)
    # the input gradient: the flipped kernel over the padded head, computed on the cropped box
    # (the padded grid's crop folded into the product), rows ascending (K axes reversed)
    win = _window(bwd, dx.op.name)
    assert win is not None and win.flip == (False, True, True) and win.out == (34, 34), str(bwd)
    assert any(n.startswith("cropped:") for n in bwd.stage(dx.op.name).notes), str(bwd)
    # the weight gradient: windows of the padded input as A's rows (c, ry, rx), summed over
    # the batch, against the head on the padded grid (zero in its two padded columns)
    dw = next(s for s in bwd.stages if s.cpu.contraction is not None
              and s.cpu.contraction.window is not None and s.cpu.contraction.window.side == "a")
    win = dw.cpu.contraction.window
    assert (win.extents, win.strides, win.base, win.out) == (
        (4, 3, 3), (36 * 36, 36, 1), 0, (34, 34)), str(bwd)
    assert _shape(dw.cpu.contraction.b) == (2, 34, 36, 8), str(bwd)
    assert not any(s.name.endswith("_im2col") for s in bwd.stages), str(bwd)


@pytest.mark.parametrize("pad,dil,k,hw", [(1, 1, 3, (34, 40)), (2, 2, 3, (33, 35)),
                                          (2, 1, 5, (36, 34)), (0, 1, 3, (40, 40))])
def test_guarded_formulations_match_torch(gemm, pad, dil, k, hw):
    gemm("native")
    torch = pytest.importorskip("torch")
    x = te.placeholder((2, 3, *hw), "float32", name="x")
    w = te.placeholder((6, 3, k, k), "float32", name="w")
    y = guarded_conv(x, w, pad, dil)
    fwd, _, _ = _torch_check(y, x, w, lambda a, b: torch.nn.functional.conv2d(
        a, b, padding=pad, dilation=dil))
    win = _window(fwd, "Y")
    assert win is not None, str(fwd)
    if pad == 0:  # nothing to pad: the product reads x itself
        assert fwd.stage("Y").cpu.contraction.b is x and len(fwd.stages) == 1, str(fwd)


def test_causal_conv1d_pads_one_side(gemm):
    gemm("native")
    torch = pytest.importorskip("torch")
    x = te.placeholder((2, 4, 300), "float32", name="x")
    w = te.placeholder((8, 4, 5), "float32", name="w")
    rc, r = te.reduce_axis((0, 4), name="c"), te.reduce_axis((0, 5), name="r")
    y = te.compute((2, 8, 300), lambda b, f, t: te.sum(
        te.if_then_else(t - r >= 0, x[b, rc, t - r], 0.0) * w[f, rc, r], axis=[rc, r]), name="Y")
    fwd, _, _ = _torch_check(y, x, w, lambda a, b: torch.nn.functional.conv1d(
        torch.nn.functional.pad(a, (4, 0)), b.flip(-1)))
    assert _window(fwd, "Y") is not None and _shape(fwd.stage("Y_padded").tensors[0]) == (
        2, 4, 304), str(fwd)


@pytest.mark.parametrize("case", ["mask", "stride", "blas", "float64", "override"])
def test_what_keeps_the_stored_gather(gemm, case):
    gemm("blas" if case == "blas" else "native")
    dtype = "float64" if case == "float64" else "float32"
    x = te.placeholder((2, 3, 36, 36), dtype, name="x")
    w = te.placeholder((6, 3, 3, 3), dtype, name="w")
    if case == "mask":  # a guard that is not padding: the centre tap masked out
        y = guarded_conv(x, w, 1, extra=lambda ry, rx: te.any(ry != 1, rx != 1))
    else:
        y = nn.conv2d(x, w, stride=2 if case == "stride" else 1, padding=1)
    ov = {y.op.name: {"implicit": False}} if case == "override" else None
    plan = plan_kernel([y], [x, w], overrides=ov)
    assert _window(plan, y.op.name) is None, str(plan)
    assert plan.stage(f"{y.op.name}_im2col") is not None, str(plan)
    if case == "mask":  # and the numbers still follow the mask
        r = rng()
        xs, ws = (r.standard_normal(_shape(t)).astype(dtype) for t in (x, w))
        wm = ws.astype(np.float64).copy()
        wm[:, :, 1, 1] = 0
        xp = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        want = np.einsum("ncyxij,ocij->noyx", win, wm)
        (got,) = ta.build([y], [x, w])(xs, ws)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_window_matmul_matches_an_explicit_gather(gemm, dtype):
    """Both runtime paths (float32 on the native GEMM, float64 gathered for BLAS) against
    np.matmul on the gathered rows; garbage columns of the padded grid are cropped."""
    gemm("native")
    r = rng()
    nb, m, c, pw, ph = 3, 16, 8, 40, 23
    src = r.standard_normal((nb, c, ph, pw)).astype(dtype)
    a = r.standard_normal((nb, m, c * 4)).astype(dtype)
    extents, strides, base = (c, 2, 2), (ph * pw, 2 * pw, 1), 3  # dilated rows, shifted base
    out_hw, grid = (20, 37), (20, pw)
    out = np.full((nb, m, *out_hw), np.nan, dtype)
    window_matmul(a, src, extents, strides, base, grid, out)
    flat = src.reshape(nb, -1).astype(np.float64)
    rows = [base + i * strides[0] + j * strides[1] + k * strides[2]
            for i in range(c) for j in range(2) for k in range(2)]
    cols = (out_hw[0] - 1) * pw + out_hw[1]
    b = np.stack([[flat[q, s:s + cols] for s in rows] for q in range(nb)])
    full = np.zeros((nb, m, out_hw[0] * pw))
    full[:, :, :cols] = a.astype(np.float64) @ b
    want = full.reshape(nb, m, out_hw[0], pw)[..., :out_hw[1]]
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_window_matmul_a_matches_an_explicit_gather(gemm, dtype):
    """The weight-gradient runtime: windows as A's rows, summed over the batch, both paths."""
    gemm("native")
    r = rng()
    nb, c, pw, ph, n = 3, 7, 40, 23, 70
    src = r.standard_normal((nb, c, ph, pw)).astype(dtype)
    extents, strides, base = (c, 2, 3), (ph * pw, 2 * pw, 1), 5
    sliding, grid = (20, 34), (20, pw)
    b = r.standard_normal((nb, sliding[0], pw, n)).astype(dtype)
    b[:, :, sliding[1]:] = 0  # the contract: zero at the padded columns
    b = b.reshape(nb, sliding[0] * pw, n)
    out = np.full((c * 6, n), np.nan, dtype)
    window_matmul_a(src, extents, strides, base, grid, sliding, b, out)
    flat = src.reshape(nb, -1).astype(np.float64)
    rows = [base + i * strides[0] + j * strides[1] + k * strides[2]
            for i in range(c) for j in range(2) for k in range(3)]
    cols = (sliding[0] - 1) * pw + sliding[1]
    want = sum(np.stack([flat[q, s:s + cols] for s in rows]) @ b[q, :cols].astype(np.float64)
               for q in range(nb))
    np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                               atol=1e-4 if dtype == "float32" else 1e-12)


def test_weight_gradient_with_an_infinite_input_matches_torch(gemm):
    """The padded columns of the weight gradient's windows meet zeros of the head: an inf of
    the input there would make NaN of a finite entry; the runtime recomputes such a result from
    the exact windows, so the non-finite entries are torch's and the others match."""
    gemm("native")
    torch = pytest.importorskip("torch")
    x = te.placeholder((2, 4, 34, 34), "float32", name="x")
    w = te.placeholder((8, 4, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, stride=1, padding=1)
    head = te.placeholder(y.shape, "float32", name="head")
    _, dw = ta.grad(y, [x, w], head=head)
    k = ta.build([dw], [x, w, head])
    assert any(s.cpu.contraction is not None and s.cpu.contraction.window is not None
               for s in k.plan.stages), str(k.plan)
    r = rng()
    xs, ws, hs = (r.standard_normal(_shape(t)).astype("float32") for t in (x, w, y))
    xs[0, 1, 5, 33] = np.inf  # the last column: next to the padded columns of its row
    (got,) = k(xs, ws, hs)
    tx, tw = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xs, ws))
    (gw,) = torch.autograd.grad(torch.nn.functional.conv2d(tx, tw, padding=1), [tw],
                                torch.from_numpy(hs.astype(np.float64)))
    gw = gw.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(gw))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(gw))
    fin = np.isfinite(gw)
    assert fin.sum() > 0
    np.testing.assert_allclose(got[fin], gw[fin], rtol=1e-4, atol=1e-4)


def _nobatch_conv(x, w):
    rc, ry, rx = (te.reduce_axis((0, e), name=n) for e, n in ((3, "c"), (3, "ry"), (3, "rx")))
    return te.compute((6, 38, 38), lambda f, i, j: te.sum(
        x[rc, i + ry, j + rx] * w[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")


CASES = {  # name: (x shape, w shape, build, torch, expected window sides or None: any)
    "conv3d": ((2, 3, 10, 12, 40), (4, 3, 3, 3, 3), lambda x, w: nn.conv3d(x, w, 1, 1),
               lambda F, a, b: F.conv3d(a, b, padding=1), {"b", "a"}),
    "no batch": ((3, 40, 40), (6, 3, 3, 3), _nobatch_conv,
                 lambda F, a, b: F.conv2d(a[None], b)[0], {"b", "a"}),
    "rectangular": ((2, 5, 36, 70), (7, 5, 3, 5), lambda x, w: nn.conv2d(x, w, 1, (1, 2)),
                    lambda F, a, b: F.conv2d(a, b, padding=(1, 2)), {"b", "a"}),
    "grouped": ((2, 4, 36, 40), (8, 2, 3, 3), lambda x, w: nn.conv2d(x, w, 1, 1, groups=2),
                lambda F, a, b: F.conv2d(a, b, padding=1, groups=2), None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_other_convolutions_match_torch(gemm, case):
    """Every window kind on a 3-d convolution, a batch-free one and a rectangular kernel; a
    grouped convolution (channel index f // g * cg + c, not a plain axis) right either way."""
    gemm("native")
    torch = pytest.importorskip("torch")
    xs, ws, build, tf, sides = CASES[case]
    x, w = te.placeholder(xs, "float32", name="x"), te.placeholder(ws, "float32", name="w")
    fwd, bwd, _ = _torch_check(build(x, w), x, w, lambda a, b: tf(torch.nn.functional, a, b))
    got = {s.cpu.contraction.window.side for p in (fwd, bwd) for s in p.stages
           if s.cpu.contraction is not None and s.cpu.contraction.window is not None}
    if sides is not None:
        assert got == sides, (str(fwd), str(bwd))


@pytest.mark.parametrize("batch", [1, 3])
def test_symbolic_batch_convolution_runs_implicit_im2col(gemm, batch):
    """A batch size known only at the call (torch.compile's dynamic shapes) keeps the implicit
    im2col of the forward, the cropped input gradient and the weight gradient (summed over the
    symbolic batch): they had fallen back to loops, 35-50x slower.  Values equal the static
    kernels' and float64 torch's."""
    gemm("native")
    torch = pytest.importorskip("torch")
    n = te.var("n")
    x = te.placeholder((n, 4, 34, 34), "float32", name="x")
    w = te.placeholder((8, 4, 3, 3), "float32", name="w")
    y = nn.conv2d(x, w, 1, 1)
    fwd, bwd = ta.vjp([y], [x, w])
    assert _window(fwd.kernel.plan, y.name) is not None, str(fwd.kernel.plan)
    bplan = bwd.kernel.plan
    assert _window(bplan, "dx") is not None and _window(bplan, "dw") is not None, str(bplan)
    assert "cropped" in str(bplan)
    r = rng()
    xs = r.standard_normal((batch, 4, 34, 34)).astype("float32")
    ws, hs = r.standard_normal((8, 4, 3, 3)).astype("float32"), \
        r.standard_normal((batch, 8, 34, 34)).astype("float32")
    (got,), res = fwd(xs, ws)
    got_dx, got_dw = bwd(res, hs)
    tx, tw = (torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (xs, ws))
    ty = torch.nn.functional.conv2d(tx, tw, padding=1)
    gx, gw = torch.autograd.grad(ty, [tx, tw], torch.from_numpy(hs.astype(np.float64)))
    for a, b in ((got, ty.detach()), (got_dx, gx), (got_dw, gw)):
        scale = float(np.abs(b.numpy()).max())
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5 * scale)

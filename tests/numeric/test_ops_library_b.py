"""The L2/L4/L5 operator library (nn, reduction, vision) against independent references.

Every registry entry of these categories is checked automatically: its float64
sample evaluated by the te reference evaluator must match the entry's NumPy
reference to rtol 1e-10.  Conventions (padding counts, align_corners, tie
rules) are cross-checked against PyTorch where it has the same operator.
Samples are seeded by `rng_for(name)` (crc32 of the name, printed on failure).
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.ops import nn, nn_samples, reduction, registry, vision
from texpr_ad.ops.registry import select

CATEGORIES = ("L2", "L4", "L5")
ENTRIES = [e for e in select("*") if e.category in CATEGORIES]
COMPUTE = [e.name for e in ENTRIES if e.has_compute]

REQUIRED = """dense matmul batch_matmul einsum_ij_jk einsum_bij_bjk einsum_i_i einsum_ij_ji conv1d
conv2d conv2d_strided conv2d_dilated conv2d_grouped conv2d_depthwise conv3d conv2d_transpose
conv2d_winograd max_pool1d max_pool2d max_pool3d avg_pool2d_pad_incl avg_pool2d_pad_excl
global_max_pool2d global_avg_pool2d adaptive_avg_pool2d upsampling_nearest upsampling_bilinear
flatten pad_constant pad_edge pad_reflect lrn l2_normalize left_shift right_shift equal not_equal
greater greater_equal less less_equal logical_and logical_or logical_not argmax argmin sum max min
mean prod prod_with_zero variance std logsumexp cumsum strided_slice broadcast_to resize_nearest
resize_bilinear multibox_prior multibox_transform_loc roi_align""".split()


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _run(name: str, dtype: str = "float64") -> tuple[registry.Sample, list[np.ndarray]]:
    s = registry.get(name).sample(dtype)  # type: ignore[misc]
    return s, te.evaluate(s.outputs, dict(zip(s.inputs, s.arrays, strict=True)))


def _close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != reference {want.shape}"
    if got.dtype.kind in "fc":
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def test_required_operators_registered() -> None:
    names = {e.name for e in ENTRIES}
    assert not [n for n in REQUIRED if n not in names]
    nms = registry.get("nms")
    assert not nms.has_compute and "sequential" in nms.no_compute and nms.category == "L5"


@pytest.mark.parametrize("name", COMPUTE)
def test_forward_matches_numpy_reference(name: str) -> None:
    print(f"sample seed for {name}: {_seed(name)}")
    s, outs = _run(name)
    refs = registry.get(name).reference(*s.arrays)  # type: ignore[misc]
    assert len(refs) == len(outs), f"{name}: {len(outs)} outputs, reference gives {len(refs)}"
    for k, (o, r, t) in enumerate(zip(outs, refs, s.outputs, strict=True)):
        assert o.dtype == np.dtype(t.dtype)
        _close(o, r, 1e-10, f"{name} output {k}")


@pytest.mark.parametrize("name", COMPUTE)
def test_float32_sample_builds_and_evaluates(name: str) -> None:
    s, outs = _run(name, "float32")
    for t, a in zip(s.inputs, s.arrays, strict=True):
        assert str(a.dtype) == t.dtype, f"{name}: array {a.dtype} for {t.name!r} ({t.dtype})"
        assert t.dtype in ("float32", "int32", "int64", "bool"), f"{name}: {t.name!r} is {t.dtype}"
    refs = registry.get(name).reference(*[a.astype(np.float64) if a.dtype.kind == "f" else a
                                          for a in s.arrays])  # type: ignore[misc]
    for k, (o, r) in enumerate(zip(outs, refs, strict=True)):
        _close(o, np.asarray(r).astype(o.dtype), 1e-4, f"{name} float32 output {k}")


@pytest.mark.parametrize("name", COMPUTE)
def test_entry_metadata(name: str) -> None:
    e = registry.get(name)
    assert e.category in CATEGORIES and callable(e.reference) and not e.no_compute
    a, b = e.sample("float64"), e.sample("float64")  # type: ignore[misc]
    for x, y in zip(a.arrays, b.arrays, strict=True):
        np.testing.assert_array_equal(x, y, err_msg=f"{name}: sample is not deterministic")
    for t, arr, diff in zip(a.inputs, a.arrays, a.differentiable, strict=True):
        assert isinstance(t.op, te.PlaceholderOp)
        assert arr.shape == tuple(int(d.value) for d in t.shape)
        assert not diff or te.dtype.is_float(t.dtype), f"{name}: {t.name!r} is {t.dtype}"
    float_out = any(te.dtype.is_float(o.dtype) for o in a.outputs)
    assert any(a.differentiable) == (float_out and name not in ("multibox_prior",)), name
    assert all(int(np.prod([int(d.value) for d in o.shape])) <= 5000 for o in a.outputs)
    if "max_pool" in name or name in ("max", "min"):
        assert "tie" in e.notes, f"{name}: notes must state the tie convention"


def test_no_compute_entries_have_reasons() -> None:
    for e in ENTRIES:
        if not e.has_compute:
            assert e.no_compute and e.reference is None, e.name


# -- PyTorch cross-checks of the conventions ----------------------------------------------------

torch = pytest.importorskip("torch")
F = torch.nn.functional
T = torch.from_numpy

TORCH = {
    "conv1d": lambda x, w: F.conv1d(T(x), T(w), padding=1),
    "conv2d": lambda x, w: F.conv2d(T(x), T(w)),
    "conv2d_strided": lambda x, w: F.conv2d(T(x), T(w), stride=2, padding=1),
    "conv2d_dilated": lambda x, w: F.conv2d(T(x), T(w), dilation=2, padding=1),
    "conv2d_grouped": lambda x, w: F.conv2d(T(x), T(w), padding=1, groups=2),
    "conv2d_depthwise": lambda x, w: F.conv2d(T(x), T(w).reshape(6, 1, 3, 3), padding=1, groups=3),
    "conv3d": lambda x, w: F.conv3d(T(x), T(w), padding=1),
    "conv2d_transpose": lambda x, w: F.conv_transpose2d(T(x), T(w), stride=2, padding=1,
                                                        output_padding=1),
    "conv2d_winograd": lambda x, w: F.conv2d(T(x), T(w), padding=1),
    "max_pool1d": lambda x: F.max_pool1d(T(x), 3, 2, 1),
    "max_pool2d": lambda x: F.max_pool2d(T(x), 3, 2, 1),
    "max_pool3d": lambda x: F.max_pool3d(T(x), 2, 2),
    "avg_pool2d_pad_incl": lambda x: F.avg_pool2d(T(x), 3, 2, 1, count_include_pad=True),
    "avg_pool2d_pad_excl": lambda x: F.avg_pool2d(T(x), 3, 2, 1, count_include_pad=False),
    "adaptive_avg_pool2d": lambda x: F.adaptive_avg_pool2d(T(x), (3, 2)),
    "upsampling_nearest": lambda x: F.interpolate(T(x), scale_factor=(2, 3), mode="nearest"),
    "upsampling_bilinear": lambda x: F.interpolate(T(x), scale_factor=2, mode="bilinear",
                                                   align_corners=False),
    "resize_nearest": lambda x: F.interpolate(T(x), size=(8, 4), mode="nearest"),
    "resize_bilinear": lambda x: F.interpolate(T(x), size=(7, 4), mode="bilinear",
                                               align_corners=False),
    "resize_bilinear_align_corners": lambda x: F.interpolate(T(x), size=(7, 4), mode="bilinear",
                                                             align_corners=True),
    "lrn": lambda x: F.local_response_norm(T(x), 3, alpha=0.1, beta=0.75, k=2.0),
    "pad_reflect": lambda x: F.pad(T(x)[None, None], (2, 3, 0, 2, 1, 0), mode="reflect")[0, 0],
    "pad_edge": lambda x: F.pad(T(x)[None, None], (2, 3, 0, 2, 1, 0), mode="replicate")[0, 0],
    "logsumexp": lambda x: torch.logsumexp(T(x), 1),
    "cumsum": lambda x: torch.cumsum(T(x), 1),
    "l2_normalize": lambda x: F.normalize(T(x), dim=1, eps=1e-6),
    "prod_with_zero": lambda x: torch.prod(T(x), 1),
    "argmax": lambda x: torch.argmax(T(x), 1).int(),
}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_matches_pytorch(name: str) -> None:
    s, outs = _run(name)
    want = TORCH[name](*s.arrays).numpy()
    _close(outs[0], want.astype(outs[0].dtype), 1e-9, f"{name} vs torch")


# -- symbolic dims and errors ---------------------------------------------------------------------

def test_symbolic_batch_dim() -> None:
    n = te.var("n")
    x = te.placeholder((n, 3, 5, 5), "float64", "x")
    w = te.placeholder((2, 3, 3, 3), "float64", "w")
    y = nn.conv2d(x, w, padding=1)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 3, 5, 5)), rng.standard_normal((2, 3, 3, 3))
    (got,) = te.evaluate([y], {x: a, w: b})
    _close(got, nn_samples.np_conv(a, b, (1, 1), (1, 1), (1, 1)), 1e-10, "symbolic batch conv2d")


def test_conv2d_channel_mismatch_names_tensors() -> None:
    x, w = te.placeholder((1, 3, 5, 5), name="img"), te.placeholder((4, 2, 3, 3), name="kern")
    with pytest.raises(te.TensorError, match=r"'img'.*3 input channels.*'kern'"):
        nn.conv2d(x, w)
    with pytest.raises(te.TensorError, match="groups=4"):
        nn.conv2d(te.placeholder((1, 8, 5, 5), name="img"), te.placeholder((6, 2, 3, 3)), groups=4)


def test_shape_errors_name_tensors() -> None:
    with pytest.raises(te.TensorError, match=r"'a' has K=4 but weight 'b' has K=5"):
        nn.dense(te.placeholder((2, 4), name="a"), te.placeholder((3, 5), name="b"))
    with pytest.raises(te.TensorError, match=r"'p'.*'q' do not broadcast"):
        reduction.greater(te.placeholder((3, 4), name="p"), te.placeholder((3,), name="q"))
    with pytest.raises(te.TensorError, match=r"'f' has dtype float32, needs bool"):
        reduction.logical_and(te.placeholder((3,), name="f"), te.placeholder((3,), "bool", "g"))
    with pytest.raises(te.TensorError, match="axis 3 is out of range for tensor 'h'"):
        reduction.sum(te.placeholder((2, 3), name="h"), 3)
    with pytest.raises(te.TensorError, match="must be 3x3"):
        nn.conv2d_winograd(te.placeholder((1, 2, 6, 6)), te.placeholder((2, 2, 5, 5), name="k5"))
    with pytest.raises(te.TensorError, match="exceeds"):
        nn.mirror_pad(te.placeholder((3,), name="v"), (3,), (0,), "REFLECT")
    with pytest.raises(te.TensorError, match="sample_ratio must be > 0"):
        vision.roi_align(te.placeholder((1, 2, 4, 4)), te.placeholder((2, 5)), 2, 1.0, 0)
    with pytest.raises(te.TensorError, match="einsum.*'B'"):
        nn.einsum("ij,jk->ik", te.placeholder((2, 3), name="A"), te.placeholder((4, 2), name="B"))


def test_argmax_ties_take_first_index() -> None:
    x = te.placeholder((2, 4), "float64", "x")
    (got,) = te.evaluate([reduction.argmax(x, 1), ], {x: np.array([[1.0, 3, 3, 0], [2, 2, 2, 2]])})
    np.testing.assert_array_equal(got, [1, 0])

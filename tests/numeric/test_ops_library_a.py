"""Operator library, part A (elementwise.py, shape.py, losses.py): every registered sample is
evaluated with the reference evaluator and compared with its independent NumPy reference;
the references themselves are spot-checked against PyTorch; user mistakes raise clear errors.

Samples are seeded by operator name (`registry.rng_for`), so every run sees the same arrays.
"""
from __future__ import annotations

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.ops import elementwise as E
from texpr_ad.ops import losses as L
from texpr_ad.ops import shape as S
from texpr_ad.ops.registry import REGISTRY, OpEntry, Sample

MODULES = {E.__name__, S.__name__, L.__name__}
CATEGORIES = {"L1", "L3", "L10", "loss"}
ENTRIES = [e for e in REGISTRY.values()
           if e.sample is not None and e.sample.__module__ in MODULES]
IDS = [e.name for e in ENTRIES]

EXPECTED = """
log sqrt rsqrt exp sigmoid tanh erf add subtract multiply divide floor_mod negative abs relu
leaky_relu prelu elu gelu_erf gelu_tanh silu softplus softmax log_softmax concatenate expand_dims
bias_add dropout batch_norm_train batch_norm_infer layer_norm group_norm rms_norm clip power
maximum minimum where
reshape reshape_like copy transpose squeeze floor ceil trunc round sign take gather_elements split
zeros zeros_like ones ones_like full full_like cast_f2f cast_f2i flip tile repeat pixel_shuffle
depth_to_space space_to_depth
broadcast_to_like collapse_sum_like slice_like layout_transform_nchw4c
layout_transform_nchw4c_back device_copy
nll_loss cross_entropy mse_loss scaled_dot_product_attention
""".split()


def _run(entry: OpEntry, dtype: str) -> tuple[Sample, list[np.ndarray], list[np.ndarray]]:
    assert entry.sample is not None and entry.reference is not None
    s = entry.sample(dtype)
    got = te.evaluate(list(s.outputs), dict(zip(s.inputs, s.arrays, strict=True)))
    ref = [np.asarray(r) for r in entry.reference(*s.arrays)]
    assert len(got) == len(ref), f"{entry.name}: {len(got)} outputs, reference gives {len(ref)}"
    return s, got, ref


def test_every_listed_operator_is_registered() -> None:
    names = {e.name for e in ENTRIES}
    missing = [n for n in EXPECTED if n not in names]
    assert not missing, f"not registered: {missing}"
    assert len(EXPECTED) == len(set(EXPECTED))


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_float64_matches_reference(entry: OpEntry) -> None:
    s, got, ref = _run(entry, "float64")
    for k, (g, r, t) in enumerate(zip(got, ref, s.outputs, strict=True)):
        assert g.shape == r.shape == tuple(int(d.value) for d in t.shape), (entry.name, k)
        assert str(g.dtype) == t.dtype, (entry.name, k)
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12, err_msg=f"{entry.name} out {k}")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_float32_builds_and_matches(entry: OpEntry) -> None:
    s, got, ref = _run(entry, "float32")
    for t, a in zip(s.inputs, s.arrays, strict=True):
        if np.issubdtype(a.dtype, np.floating):
            assert t.dtype == "float32", (entry.name, t.name)
    for k, (g, r, t) in enumerate(zip(got, ref, s.outputs, strict=True)):
        assert str(g.dtype) == t.dtype and g.shape == r.shape, (entry.name, k)
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=f"{entry.name} out {k}")


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_entry_metadata(entry: OpEntry) -> None:
    assert entry.category in CATEGORIES
    assert entry.reference is not None and entry.tol > 0
    s = entry.sample("float64")  # type: ignore[misc]
    assert len(s.differentiable) == len(s.inputs) == len(s.arrays)
    assert s.outputs and all(isinstance(t, te.Tensor) for t in s.outputs)
    for t, a, d in zip(s.inputs, s.arrays, s.differentiable, strict=True):
        assert isinstance(t.op, te.PlaceholderOp), (entry.name, t.name)
        assert str(a.dtype) == t.dtype, (entry.name, t.name, a.dtype, t.dtype)
        assert a.shape == tuple(int(x.value) for x in t.shape), (entry.name, t.name)
        if np.issubdtype(a.dtype, np.floating):
            assert t.dtype == "float64", (entry.name, t.name)
        else:
            assert not d, f"{entry.name}: non-float input {t.name!r} marked differentiable"
        assert a.size <= 5000
    assert sum(int(np.prod([int(x.value) for x in t.shape])) for t in s.outputs) <= 5000
    again = entry.sample("float64")  # type: ignore[misc]
    for a, b in zip(s.arrays, again.arrays, strict=True):  # seeded: the same every time
        np.testing.assert_array_equal(a, b)


def test_samples_stay_away_from_kinks() -> None:
    """Spot-check the sampling promises stated in the notes."""
    def arr(name: str, k: int = 0) -> np.ndarray:
        return REGISTRY[name].sample("float64").arrays[k]  # type: ignore[misc]

    for n in ("relu", "abs", "sign", "leaky_relu", "elu"):
        assert np.abs(arr(n)).min() >= 0.1
    for n in ("floor", "ceil", "trunc", "cast_f2i"):
        assert np.abs(arr(n) - np.round(arr(n))).min() >= 0.1
    assert np.abs(arr("round") - np.floor(arr("round")) - 0.5).min() >= 0.1
    assert min(arr("log").min(), arr("sqrt").min(), arr("rsqrt").min()) > 0
    assert np.abs(np.abs(arr("clip")) - 1).min() >= 0.1
    assert np.abs(arr("maximum", 0) - arr("maximum", 1)).min() >= 0.1
    q = arr("floor_mod", 0) / arr("floor_mod", 1)
    assert np.abs(q - np.round(q)).min() >= 0.05
    idx = arr("take", 1)
    assert len(np.unique(idx)) < idx.size  # repeated indices: the adjoint must accumulate


# -- the NumPy references agree with PyTorch's definitions ------------------------------------

def _torch_refs() -> dict[str, object]:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    T = torch.from_numpy
    return {
        "gelu_erf": lambda x: F.gelu(T(x)),
        "gelu_tanh": lambda x: F.gelu(T(x), approximate="tanh"),
        "softplus": lambda x: F.softplus(T(x)),
        "elu": lambda x: F.elu(T(x), 1.5),
        "silu": lambda x: F.silu(T(x)),
        "round": lambda x: torch.round(T(x)),
        "floor_mod": lambda a, b: torch.remainder(T(a), T(b)),
        "softmax": lambda x: torch.softmax(T(x), 1),
        "log_softmax": lambda x: torch.log_softmax(T(x), -1),
        "layer_norm": lambda x, g, b: F.layer_norm(T(x), (6,), T(g), T(b)),
        "group_norm": lambda x, g, b: F.group_norm(T(x), 2, T(g), T(b)),
        "rms_norm": lambda x, g: F.rms_norm(T(x), (6,), T(g), eps=1e-5),
        "batch_norm_train": lambda x, g, b: F.batch_norm(T(x), None, None, T(g), T(b),
                                                         training=True),
        "batch_norm_infer": lambda x, g, b, m, v: F.batch_norm(T(x), T(m), T(v), T(g), T(b)),
        "pixel_shuffle": lambda x: F.pixel_shuffle(T(x), 2),
        "gather_elements": lambda d, i: torch.gather(T(d), 1, T(i)),
        "nll_loss": lambda lp, t: F.nll_loss(T(lp), T(t)),
        "cross_entropy": lambda x, t: F.cross_entropy(T(x), T(t)),
        "mse_loss": lambda p, t: F.mse_loss(T(p), T(t)),
        "scaled_dot_product_attention": lambda q, k, v: F.scaled_dot_product_attention(
            T(q), T(k), T(v)),
        "cast_f2i": lambda x: T(x).to(torch.int32),
        "clip": lambda x: torch.clamp(T(x), -1.0, 1.0),
    }


TORCH_CHECKED = ["gelu_erf", "gelu_tanh", "softplus", "elu", "silu", "round", "floor_mod",
                 "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm",
                 "batch_norm_train", "batch_norm_infer", "pixel_shuffle", "gather_elements",
                 "nll_loss", "cross_entropy", "mse_loss", "scaled_dot_product_attention",
                 "cast_f2i", "clip"]


@pytest.mark.parametrize("name", TORCH_CHECKED)
def test_reference_agrees_with_torch(name: str) -> None:
    fn = _torch_refs()[name]
    entry = REGISTRY[name]
    s = entry.sample("float64")  # type: ignore[misc]
    ref = entry.reference(*s.arrays)  # type: ignore[misc]
    want = fn(*s.arrays)  # type: ignore[operator]
    np.testing.assert_allclose(ref[0], want.numpy(), rtol=1e-10, atol=1e-12)


def test_depth_to_space_inverts_space_to_depth() -> None:
    x = te.placeholder((1, 2, 4, 6), "float64", "x")
    y = S.depth_to_space(S.space_to_depth(x, 2), 2)
    a = np.random.default_rng(0).standard_normal((1, 2, 4, 6))
    np.testing.assert_array_equal(te.evaluate([y], {x: a})[0], a)


def test_layout_transform_round_trip_and_symbolic_reshape() -> None:
    x = te.placeholder((2, 8, 3, 2), "float64", "x")
    y = S.layout_transform(S.layout_transform(x, "NCHW", "NHWC8c"), "NHWC8c", "NCHW")
    a = np.random.default_rng(1).standard_normal((2, 8, 3, 2))
    np.testing.assert_array_equal(te.evaluate([y], {x: a})[0], a)
    n = te.var("n")
    z = te.placeholder((n, 6), "float64", "z")
    r = S.reshape(z, (n, 2, 3))
    b = np.arange(24.0).reshape(4, 6)
    np.testing.assert_array_equal(te.evaluate([r], {z: b})[0], b.reshape(4, 2, 3))


def test_other_modes_and_axes() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 4))
    x = te.placeholder((3, 4), "float64", "x")
    ix = te.placeholder((5,), "int64", "ix")
    iv = np.array([-2, 0, 3, 7, 11])
    got = te.evaluate([S.take(x, ix, axis=1, mode="clip"), S.take(x, ix, axis=1, mode="wrap"),
                       S.take(x, ix, axis=None, mode="clip")], {x: a, ix: iv})
    np.testing.assert_array_equal(got[0], np.take(a, iv, axis=1, mode="clip"))
    np.testing.assert_array_equal(got[1], np.take(a, iv, axis=1, mode="wrap"))
    np.testing.assert_array_equal(got[2], np.take(a, iv, mode="clip"))
    y = te.placeholder((4,), "float64", "y")
    b = rng.standard_normal(4)
    outs = [E.add(x, 2.0), E.multiply(x, y), E.log_softmax(x, axis=0), E.softmax(x, axis=0),
            E.softplus(x, beta=2.0), S.transpose(x), E.expand_dims(x, -1, 2)]
    got = te.evaluate(outs, {x: a, y: b})
    np.testing.assert_allclose(got[0], a + 2)
    np.testing.assert_allclose(got[1], a * b)
    z = a - a.max(0)
    np.testing.assert_allclose(got[2], z - np.log(np.exp(z).sum(0)))
    np.testing.assert_allclose(got[3], np.exp(z) / np.exp(z).sum(0))
    np.testing.assert_allclose(got[4], np.logaddexp(0, 2 * a) / 2)
    np.testing.assert_array_equal(got[5], a.T)
    assert got[6].shape == (3, 4, 1, 1)


# -- errors name the tensor and the fix --------------------------------------------------------

def test_concatenate_mismatch_names_tensor() -> None:
    a = te.placeholder((2, 3), "float32", "a")
    b = te.placeholder((4, 2), "float32", "bad_b")
    with pytest.raises(te.TensorError, match="'bad_b'.*all dims but 1 must match"):
        E.concatenate([a, b], axis=1)
    c = te.placeholder((2, 2), "float64", "c64")
    with pytest.raises(te.TensorError, match="'c64' is float64"):
        E.concatenate([a, c], axis=1)


def test_shape_errors() -> None:
    x = te.placeholder((2, 3), "float32", "x")
    y = te.placeholder((4,), "float32", "y")
    with pytest.raises(te.TensorError, match="cannot broadcast tensor 'y' against 'x'"):
        E.add(x, y)
    with pytest.raises(te.TensorError, match="reshape of 'x'.*6 elements"):
        S.reshape(x, (4, 2))
    with pytest.raises(te.TensorError, match="axis=2 is out of range for tensor 'x'"):
        E.softmax(x, axis=2)
    with pytest.raises(te.TensorError, match="transpose of 'x'"):
        S.transpose(x, (0, 0))
    with pytest.raises(te.TensorError, match="squeeze of 'x': dim 1 has size 3"):
        S.squeeze(x, 1)
    with pytest.raises(te.TensorError, match="indices 'fi' have dtype float32"):
        S.take(x, te.placeholder((2,), "float32", "fi"))
    with pytest.raises(te.TensorError, match="'x' .* to \\(5, 3\\)"):
        S.broadcast_to(x, (5, 3))
    with pytest.raises(te.TensorError, match="split of 'x'"):
        S.split(x, 4, axis=1)
    with pytest.raises(te.TensorError, match="condition 'x' has dtype float32"):
        E.where(x, x, x)
    with pytest.raises(te.TensorError, match="group_norm: 3 channels of 'x'"):
        E.group_norm(x, te.placeholder((3,), "float32", "g"), te.placeholder((3,), "float32", "b"),
                     num_groups=2)
    with pytest.raises(te.TensorError, match="parameter 'y' has shape"):
        E.layer_norm(x, y, y)
    with pytest.raises(te.TensorError, match="pixel_shuffle: 'x' must be NCHW"):
        S.pixel_shuffle(x, 2)
    with pytest.raises(te.TensorError, match="layout_transform: axis C of 'v' has extent 6"):
        S.layout_transform(te.placeholder((1, 6, 2, 2), "float32", "v"), "NCHW", "NCHW4c")
    with pytest.raises(te.TensorError, match="mse_loss: 'y'"):
        L.mse_loss(x, y)
    with pytest.raises(te.TensorError, match="target 'ft' has dtype float32"):
        L.nll_loss(x, te.placeholder((2,), "float32", "ft"))
    with pytest.raises(ValueError, match="reduction='avg'"):
        L.mse_loss(x, x, reduction="avg")

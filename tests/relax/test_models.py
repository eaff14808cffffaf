"""Small models built only from texpr_ad operators, trained-style through TVM Relax.

A two-layer MLP (dense, bias_add, gelu, log_softmax, nll_loss) and a small CNN
(conv2d, batch_norm with batch statistics, relu, max_pool2d, flatten, dense,
cross_entropy), every operator emitted with `call_te_with_auto_grad`, go
through `relax.transform.Gradient`, `tvm.compile(llvm)` and the Relax VM.

References, both independent of the bridge: float64 central differences of a
NumPy forward written out here, and texpr_ad's own CPU kernels
(`texpr_ad.kernels.build` of `texpr_ad.deriv.grad` of the same operators
composed as one te graph).
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from tvm import relax  # noqa: E402

from texpr_ad import te  # noqa: E402
from texpr_ad.deriv import grad  # noqa: E402
from texpr_ad.kernels import build  # noqa: E402
from texpr_ad.ops import elementwise as ew  # noqa: E402
from texpr_ad.ops import losses, nn  # noqa: E402
from texpr_ad.relax_bridge import BridgeError, call_te_with_auto_grad, prepare_for_build  # noqa: E402
from texpr_ad.testing import numerical_grad as numgrad  # noqa: E402

SEED = 90210
print("seed", SEED)
RNG = np.random.default_rng(SEED)
cte = call_te_with_auto_grad

# -- the models' shapes ------------------------------------------------------------------------

MLP = {"x": (4, 5), "w1": (6, 5), "b1": (6,), "w2": (3, 6), "b2": (3,)}
CNN = {"x": (2, 2, 6, 6), "w": (3, 2, 3, 3), "gamma": (3,), "beta": (3,), "wd": (4, 27), "bd": (4,)}


def arrays_for(shapes: dict[str, tuple[int, ...]], n_target: int, classes: int) -> list[np.ndarray]:
    arrs = [RNG.normal(size=s) * (0.5 if k.startswith("w") else 1.0) for k, s in shapes.items()]
    return arrs + [RNG.integers(0, classes, n_target).astype("int64")]


def rvar(name: str, shape: tuple, dtype: str = "float64") -> relax.Var:
    return relax.Var(name, relax.TensorType(shape, dtype))


def params_for(shapes: dict[str, tuple[int, ...]], n_target: int) -> list[relax.Var]:
    return [rvar(k, s) for k, s in shapes.items()] + [rvar("target", (n_target,), "int64")]


# -- NumPy references (written independently of texpr_ad) ------------------------------------

_erf = np.vectorize(math.erf)


def np_log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(1, keepdims=True))


def np_mlp(x, w1, b1, w2, b2, t) -> tuple[np.ndarray, float]:
    h = x @ w1.T + b1
    a = 0.5 * h * (1 + _erf(h / math.sqrt(2)))
    lp = np_log_softmax(a @ w2.T + b2)
    return lp, float(-lp[np.arange(len(t)), t].mean())


def np_cnn(x, w, gamma, beta, wd, bd, t) -> float:
    n, _, hh, ww = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], hh, ww))
    for i in range(hh):
        for j in range(ww):
            y[:, :, i, j] = np.einsum("bcyx,fcyx->bf", xp[:, :, i:i + 3, j:j + 3], w)
    mu = y.mean((0, 2, 3), keepdims=True)
    var = ((y - mu) ** 2).mean((0, 2, 3), keepdims=True)
    y = (y - mu) / np.sqrt(var + 1e-5) * gamma[None, :, None, None] + beta[None, :, None, None]
    y = np.maximum(y, 0.0)
    y = y.reshape(n, -1, hh // 2, 2, ww // 2, 2).max((3, 5))
    logits = y.reshape(n, -1) @ wd.T + bd
    return float(-np_log_softmax(logits)[np.arange(n), t].mean())


def mlp_loss(*a) -> float:
    return np_mlp(*a)[1]


# -- Relax models (texpr_ad operators only) --------------------------------------------------

def emit_mlp(bb: relax.BlockBuilder, x, w1, b1, w2, b2, target, checkpoint: bool = False):
    """(log_probs, loss) Relax vars of the MLP; the first layer optionally checkpointed."""
    xin = bb.emit(relax.op.grad.start_checkpoint(x)) if checkpoint else x
    h = bb.emit(cte(bb, nn.dense, xin, w1))
    h = bb.emit(cte(bb, ew.bias_add, h, b1, axis=1))
    a = bb.emit(cte(bb, ew.gelu, h, approximate="none"))
    if checkpoint:
        a = bb.emit(relax.op.grad.end_checkpoint(a))
    z = bb.emit(cte(bb, nn.dense, a, w2))
    z = bb.emit(cte(bb, ew.bias_add, z, b2, axis=1))
    lp = bb.emit(cte(bb, ew.log_softmax, z, axis=1))
    return lp, bb.emit(cte(bb, losses.nll_loss, lp, target, reduction="mean"))


def mlp_module(returns: str = "loss", checkpoint: bool = False) -> tvm.IRModule:
    """`returns`: "loss", "tuple" (log_probs, loss) or "log_probs" (not a scalar)."""
    bb = relax.BlockBuilder()
    ps = params_for(MLP, 4)
    with bb.function("main", ps):
        with bb.dataflow():
            lp, loss = emit_mlp(bb, *ps, checkpoint=checkpoint)
            if returns == "tuple":
                out = relax.Tuple([bb.emit_output(lp), bb.emit_output(loss)])
            else:
                out = bb.emit_output(lp if returns == "log_probs" else loss)
        bb.emit_func_output(out)
    return bb.get()


def cnn_module() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x, w, gamma, beta, wd, bd, target = ps = params_for(CNN, 2)
    with bb.function("main", ps):
        with bb.dataflow():
            y = bb.emit(cte(bb, nn.conv2d, x, w, stride=1, padding=1))
            y = bb.emit(cte(bb, ew.batch_norm_train, y, gamma, beta, axis=1, epsilon=1e-5))
            y = bb.emit(cte(bb, ew.relu, y))
            y = bb.emit(cte(bb, nn.max_pool2d, y, kernel=2, stride=2))
            f = bb.emit(cte(bb, nn.flatten, y))
            logits = bb.emit(cte(bb, nn.dense, f, wd, bd))
            loss = bb.emit_output(cte(bb, losses.cross_entropy, logits, target))
        bb.emit_func_output(loss)
    return bb.get()


def gradient(mod: tvm.IRModule, require: list[int] | None, **kw) -> tvm.IRModule:
    ps = mod["main"].params
    req = None if require is None else [ps[k] for k in require]
    return relax.transform.Gradient("main", require_grads=req, **kw)(mod)


def run(mod: tvm.IRModule, arrays: list[np.ndarray], fn: str = "main_adjoint"):
    ex = tvm.compile(prepare_for_build(mod), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    return vm[fn](*[tvm.runtime.tensor(a) for a in arrays])


# -- texpr_ad's own kernels of the same models --------------------------------------------------

def te_inputs(shapes: dict[str, tuple[int, ...]], n_target: int) -> list[te.Tensor]:
    return [te.placeholder(s, "float64", k) for k, s in shapes.items()] + [
        te.placeholder((n_target,), "int64", "target")]


def texpr_ad_grads(model: str, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Loss gradients w.r.t. every float input from texpr_ad.kernels (CPU, Numba)."""
    if model == "mlp":
        x, w1, b1, w2, b2, t = ins = te_inputs(MLP, 4)
        h = ew.gelu(ew.bias_add(nn.dense(x, w1), b1, axis=1))
        loss = losses.nll_loss(ew.log_softmax(ew.bias_add(nn.dense(h, w2), b2, axis=1), axis=1), t)
    else:
        x, w, gamma, beta, wd, bd, t = ins = te_inputs(CNN, 2)
        y = ew.relu(ew.batch_norm_train(nn.conv2d(x, w, stride=1, padding=1), gamma, beta))
        loss = losses.cross_entropy(nn.dense(nn.flatten(nn.max_pool2d(y, 2, 2)), wd, bd), t)
    gs = [g for g in grad(loss, ins) if g is not None]
    return list(build(gs, ins, target="cpu")(*arrays))


# -- fixtures: one compile per model ------------------------------------------------------------

@pytest.fixture(scope="module")
def mlp_data():
    arrays = arrays_for(MLP, 4, 3)
    fd = [numgrad(mlp_loss, arrays, k) for k in range(5)]
    return arrays, fd


@pytest.fixture(scope="module")
def mlp_own(mlp_data):
    return texpr_ad_grads("mlp", mlp_data[0])


def assert_grads(got, fd, own=None, names=()) -> None:
    for k, (g, f) in enumerate(zip(got, fd, strict=True)):
        name = names[k] if names else str(k)
        np.testing.assert_allclose(g, f, rtol=1e-6, atol=1e-8, err_msg=f"{name} vs central diff")
        if own is not None:
            np.testing.assert_allclose(g, own[k], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} vs texpr_ad kernels")


# -- tests -------------------------------------------------------------------------------------

def test_mlp_gradients(mlp_data, mlp_own) -> None:
    arrays, fd = mlp_data
    val, grads = run(gradient(mlp_module(), list(range(5))), arrays)
    assert abs(float(val.numpy()) - mlp_loss(*arrays)) < 1e-12
    assert len(grads) == 5
    assert_grads([g.numpy() for g in grads], fd, mlp_own, list(MLP))


def test_cnn_gradients() -> None:
    arrays = arrays_for(CNN, 2, 4)
    mod = gradient(cnn_module(), list(range(6)))
    text = mod["main_adjoint"].script()
    for op in ("conv2d", "batch_norm_train", "relu", "max_pool2d", "flatten", "dense",
               "cross_entropy"):
        assert re.search(rf"texpr_ad_\w*{op}\w*_grad", text), op
    val, grads = run(mod, arrays)
    assert abs(float(val.numpy()) - np_cnn(*arrays)) < 1e-12
    fd = [numgrad(np_cnn, arrays, k) for k in range(6)]
    own = texpr_ad_grads("cnn", arrays)
    assert_grads([g.numpy() for g in grads], fd, own, list(CNN))


def test_require_grads_subset_in_the_given_order(mlp_data) -> None:
    arrays, fd = mlp_data
    mod = gradient(mlp_module(), [3, 2])  # w2, b1
    ret = mod["main_adjoint"].ret_ty.fields[1]
    assert [tuple(int(d) for d in f.shape.values) for f in ret.fields] == [MLP["w2"], MLP["b1"]]
    _, grads = run(mod, arrays)
    assert_grads([g.numpy() for g in grads], [fd[3], fd[2]], names=["w2", "b1"])


def test_tuple_return_with_target_index(mlp_data, mlp_own) -> None:
    arrays, fd = mlp_data
    (lp, loss), grads = run(gradient(mlp_module("tuple"), list(range(5)), target_index=1), arrays)
    want_lp, want_loss = np_mlp(*arrays)
    np.testing.assert_allclose(lp.numpy(), want_lp, rtol=1e-12, atol=1e-14)
    assert abs(float(loss.numpy()) - want_loss) < 1e-12
    assert_grads([g.numpy() for g in grads], fd, mlp_own, list(MLP))


def test_checkpointing_recomputes_the_first_layer(mlp_data, mlp_own) -> None:
    arrays, fd = mlp_data
    mod = gradient(mlp_module(checkpoint=True), list(range(5)))
    text = mod["main_adjoint"].script()
    # the checkpointed forward (dense, bias_add, gelu) is recomputed in the adjoint as *_cp
    recomputed = re.findall(r"(\w+_cp)\s*=\s*R\.call_tir\((?:cls\.)?(\w+),", text)
    # (a PrimFunc name gets a _N suffix when an earlier test in the process registered it)
    assert {"texpr_ad_dense", "texpr_ad_bias_add", "texpr_ad_gelu"} <= {
        re.sub(r"_\d+$", "", f) for _, f in recomputed}, \
        text
    plain = gradient(mlp_module(), list(range(5)))["main_adjoint"].script()
    assert "_cp" not in plain
    _, grads = run(mod, arrays)
    assert_grads([g.numpy() for g in grads], fd, mlp_own, list(MLP))


def test_default_require_grads_gives_integer_target_zero_adjoint(mlp_data) -> None:
    arrays, fd = mlp_data
    _, grads = run(gradient(mlp_module(), None), arrays)
    assert len(grads) == 6
    assert grads[5].numpy().dtype == np.int64 and not grads[5].numpy().any()
    assert_grads([g.numpy() for g in list(grads)[:5]], fd, names=list(MLP))


def test_tvm_misuse_errors_surface_unchanged() -> None:
    with pytest.raises(Exception, match="The differentiation target must be a float scalar") as e1:
        gradient(mlp_module("log_probs"), list(range(5)))
    with pytest.raises(Exception, match="Only Tensors of floating point dtype or Tuples of float "
                       "Tensors can require gradients.*target") as e2:
        gradient(mlp_module(), [1, 5])
    for e in (e1, e2):
        assert not isinstance(e.value, BridgeError)
        assert type(e.value).__module__.split(".")[0] in ("tvm", "tvm_ffi"), type(e.value)

"""Train a small CNN of stock Relax ops with gradients TVM 0.27 lacks, derived by texpr_ad.

    conv2d -> group_norm -> gelu -> resize2d -> adaptive_avg_pool2d -> reshape -> matmul
           -> log_softmax -> nll_loss

In stock TVM 0.27 `relax.transform.Gradient` aborts on this graph (group_norm, gelu,
resize2d and adaptive_avg_pool2d have no `FPrimalGradient`).  After
`register_missing_gradients()` the real pass differentiates it, `tvm.compile` builds it and
the Relax VM runs a few SGD steps; the loss goes down.

    python examples/relax_cnn.py [--steps 8] [--lr 0.5]
"""
from __future__ import annotations

import argparse

import numpy as np
import tvm
from tvm import relax

N, C, H, W, K, CLASSES, GROUPS = 8, 3, 8, 8, 4, 3, 2
R = relax.op


def build_model() -> tvm.IRModule:
    """`main(x, labels, w1, gamma, beta, w2) -> loss` (float32; group_norm rejects float64)."""
    def t(*shape: int, dtype: str = "float32") -> relax.TensorType:
        return relax.TensorType(shape, dtype)

    x, labels = relax.Var("x", t(N, C, H, W)), relax.Var("labels", t(N, dtype="int64"))
    w1, w2 = relax.Var("w1", t(K, C, 3, 3)), relax.Var("w2", t(K * 4, CLASSES))
    gamma, beta = relax.Var("gamma", t(K)), relax.Var("beta", t(K))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, labels, w1, gamma, beta, w2]):
        with bb.dataflow():
            h = bb.emit(R.nn.conv2d(x, w1, padding=1))
            h = bb.emit(R.nn.group_norm(h, gamma, beta, num_groups=GROUPS, channel_axis=1,
                                        axes=[2, 3]))
            h = bb.emit(R.nn.gelu(h))
            h = bb.emit(R.image.resize2d(h, (12, 12)))
            h = bb.emit(R.nn.adaptive_avg_pool2d(h, (2, 2)))
            h = bb.emit(R.reshape(h, (N, K * 4)))
            logits = bb.emit(R.matmul(h, w2))
            logp = bb.emit(R.nn.log_softmax(logits))
            loss = bb.emit_output(R.nn.nll_loss(logp, labels))
        bb.emit_func_output(loss)
    return bb.get()


def differentiate(mod: tvm.IRModule) -> tvm.IRModule:
    """`main_adjoint` with respect to the four parameters (not the data or the labels)."""
    params = mod["main"].params
    return relax.transform.Gradient("main", require_grads=list(params[2:]))(mod)


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Images whose class is the quadrant holding a bright blob, and initial parameters."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, N)
    x = rng.normal(0, 0.3, (N, C, H, W)).astype("float32")
    for n, c in enumerate(labels):
        r, s = divmod(int(c), 2)
        x[n, :, 4 * r:4 * r + 4, 4 * s:4 * s + 4] += 1.5
    params = [rng.normal(0, 0.3, (K, C, 3, 3)), np.ones(K), np.zeros(K),
              rng.normal(0, 0.3, (K * 4, CLASSES))]
    return x, labels.astype("int64"), [p.astype("float32") for p in params]


def train(steps: int = 8, lr: float = 0.5, seed: int = 0) -> list[float]:
    """Register the derived gradients, compile, and run `steps` SGD steps; the losses."""
    from texpr_ad.relax_bridge import register_missing_gradients
    register_missing_gradients()
    ex = tvm.compile(differentiate(build_model()), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x, labels, params = data(seed)
    losses = []
    for _ in range(steps):
        args = [tvm.runtime.tensor(a) for a in (x, labels, *params)]
        loss, grads = vm["main_adjoint"](*args)
        losses.append(float(loss.numpy()))
        params = [p - lr * g.numpy() for p, g in zip(params, grads, strict=True)]
    return losses


def stock_error() -> str | None:
    """The stock pass's error on this model, or None if it has gradients for every op."""
    try:
        differentiate(build_model())
    except Exception as e:  # noqa: BLE001 - TVM's InternalError
        line = next((ln for ln in str(e).splitlines() if "FPrimalGradient" in ln),
                    str(e).strip().splitlines()[-1])
        return line[line.find("Attribute"):].strip() if "Attribute" in line else line.strip()
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.5)
    a = p.parse_args()
    print(f"stock TVM {tvm.__version__}: {stock_error() or 'differentiates the model'}")
    losses = train(a.steps, a.lr)
    for k, v in enumerate(losses):
        print(f"step {k}: loss {v:.4f}")
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")


if __name__ == "__main__":
    main()

"""The (forward with residuals, backward) pair the bench times: `texpr_ad.vjp` when the library
has it, else a stand-in with the same interface built from `ta.build` and `ta.grad`.

    fwd, bwd = vjp(outputs, inputs, target)
    outs, res = fwd(*arrays)      # outs: tuple of output arrays; res: opaque residuals
    grads = bwd(res, *heads)      # one gradient per input, None for integer inputs

The stand-in's residuals are the input arrays themselves: its backward kernel recomputes from
them whatever it needs of the forward (what `ta.build` of `ta.grad` did before residuals).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

Fwd = Callable[..., tuple[tuple[np.ndarray, ...], Any]]
Bwd = Callable[..., tuple[np.ndarray | None, ...]]


def library_has_vjp() -> bool:
    import texpr_ad
    return hasattr(texpr_ad, "vjp")


def fallback_vjp(outputs: Sequence[Any], inputs: Sequence[Any], target: str = "cpu"
                 ) -> tuple[Fwd, Bwd]:
    """The stand-in: a forward kernel, and a backward kernel of (inputs, heads)."""
    import texpr_ad as ta
    from texpr_ad import te
    outs, ins = list(outputs), list(inputs)
    fwd_k = ta.build(outs, ins, target=target)
    heads = [te.placeholder(o.shape, o.dtype, name=f"head{k}") for k, o in enumerate(outs)]
    diff = [k for k, t in enumerate(ins) if t.dtype.startswith("float")]
    grads = ta.grad(outs, [ins[k] for k in diff], head=heads)
    bwd_k = ta.build(grads, [*ins, *heads], target=target)

    def fwd(*arrays: np.ndarray) -> tuple[tuple[np.ndarray, ...], Any]:
        return tuple(fwd_k(*arrays)), arrays

    def bwd(res: Any, *hs: np.ndarray) -> tuple[np.ndarray | None, ...]:
        got = iter(bwd_k(*res, *hs))
        return tuple(next(got) if k in diff else None for k in range(len(ins)))

    return fwd, bwd


def vjp(outputs: Sequence[Any], inputs: Sequence[Any], target: str = "cpu") -> tuple[Fwd, Bwd]:
    """`texpr_ad.vjp` if present, else `fallback_vjp`."""
    import texpr_ad
    if library_has_vjp():
        return texpr_ad.vjp(list(outputs), list(inputs), target=target)
    return fallback_vjp(outputs, inputs, target)

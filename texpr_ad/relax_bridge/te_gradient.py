"""`te_gradient`: TVM's removed `tvm.te.gradient`, derived by texpr_ad.

    dA, dW = te_gradient(Y, [A, W], head=H)      # tvm.te tensors in, tvm.te tensors out
    J, = te_gradient(Y, [A])                     # head=None: the Jacobian, Y.shape + A.shape

The tvm.te DAG is translated to texpr_ad (`from_tvm`, TVM semantics kept), differentiated by
`texpr_ad.grad` (gathers where the index maps invert, scatter-adds otherwise, never a Jacobian
unless head=None asks for one) and translated back (`to_tvm.translate`) onto the caller's own
placeholders and shape variables, so the result composes with the rest of the caller's tvm.te.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..deriv.adjoint import grad
from ..te.expr import const
from ..te.tensor import Tensor, compute
from .args import BridgeArgumentError, as_list, is_tvm_tensor
from .from_tvm import from_tvm
from .to_tvm import TranslationError, translate


def te_gradient(output: Any, inputs: Sequence[Any], head: Any = None) -> list[Any]:
    """The adjoints of tvm.te tensor `output` w.r.t. each of `inputs` (tvm.te tensors).

    Same signature and semantics as TVM's old `te.gradient`: `head` has the shape of `output`
    (optionally with leading extra dims P: each result then has shape P + input.shape), and
    `head=None` gives the full Jacobian, shape `output.shape + input.shape`.  An integer input,
    or one `output` does not depend on, gets an exact-zero tensor of that shape.
    """
    for what, t in (("output", output), ("head", head)):
        if t is not None and not is_tvm_tensor(t):
            raise BridgeArgumentError(f"te_gradient: {what} must be a tvm.te tensor, got "
                                      f"{type(t).__name__}")
    inputs = as_list(inputs, "te_gradient: inputs", is_tvm_tensor, "tvm.te tensors", single=False)
    roots = [output] if head is None else [output, head]
    res = from_tvm(roots)
    out = res[0]
    ins = []
    for k, x in enumerate(inputs):
        try:
            ins.append(res.tensor(x))
        except KeyError:
            raise TranslationError(f"te_gradient: input {k} ({x.op.name!r}) is not in the DAG of "
                                   f"the output {output.op.name!r}") from None
    adjs = grad(out, ins, head=None if head is None else res[1])
    prefix = tuple(out.shape) if head is None else tuple(res[1].shape)[:len(res[1].shape) - len(out.shape)]
    filled = [a if a is not None else _zeros((*prefix, *x.shape), out.dtype, x.name)
              for a, x in zip(adjs, ins, strict=True)]
    bind = {t: res.sources[t] for t in res.inputs}
    return translate(filled, bind=bind, var_map=res.var_map)


def _zeros(shape: tuple, dtype: str, name: str) -> Tensor:
    return compute(shape, lambda *i: const(0.0, dtype), name=f"d_{name}_zero")

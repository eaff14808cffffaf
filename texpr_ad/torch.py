"""PyTorch operators from te functions (optional extra `torch`).

    import texpr_ad.torch as tt
    gelu_mm = tt.custom_op(lambda X, W: ..., name="gelu_mm")   # a te function, as ta.custom_op
    y = gelu_mm(x, w); y.sum().backward()                      # torch tensors in and out

Route: `torch.library.custom_op` (schema `(Tensor[] xs) -> Tensor[]`) with `register_autograd`
and a fake implementation, so the op dispatches like a built-in, is opaque to `torch.compile`
and traces under FakeTensors.  The backward is a second custom op (`<name>_vjp`), so it is
opaque to `torch.compile` too.  Residuals (`ta.vjp`): the forward op also returns the
intermediates its backward reads (a row max, a normalizer; see `Pullback.explain()`), marked
non-differentiable and saved by autograd with the inputs and outputs; the `_vjp` op reads them
instead of recomputing.

Arrays: CPU tensors reach the Numba kernels as `.numpy()` views (no copy) when C-contiguous;
a non-contiguous tensor (a transpose, an expanded gradient) is copied once with `.contiguous()`.
Outputs are the kernels' fresh NumPy arrays wrapped by `torch.from_numpy` (no copy).  Kernels
are built and cached per shape/dtype signature by the core `ta.custom_op`, which also does the
dtype and shape checks.  CUDA tensors go to the CUDA kernels through `__cuda_array_interface__`
(no copies; launched on Numba's default stream after synchronizing PyTorch's current stream);
without a usable GPU they are a TorchOpError.  Integer inputs get no gradient (None).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from texpr_ad.api import CustomOp, build
from texpr_ad.errors import TexprError
from texpr_ad.kernels import numba_cuda
from texpr_ad.te.tensor import Tensor

_NP = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
       torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
       torch.uint8: np.uint8, torch.bool: np.bool_}
_TORCH = {np.dtype(v).str: k for k, v in _NP.items()}
_REGISTERED: set[str] = set()  # qualified names registered by this module


class TorchOpError(TexprError, ValueError):
    """A texpr_ad torch op got a tensor it cannot take (dtype, device), or its name is taken."""


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point


class TorchOp:
    """A te function as a PyTorch operator with autograd; call it on tensors.

    `op(*tensors)` returns a tensor, or a tuple for several outputs.  `op.core` is the NumPy
    `ta.CustomOp` doing the work on the CPU; `op.forward_op`/`op.vjp_op` are the registered
    `torch.library` ops (`texpr_ad::<name>`, `texpr_ad::<name>_vjp`).
    """

    def __init__(self, fn: Callable[..., Any], name: str):
        ns, _, base = name.rpartition("::")
        self.qualname = f"{ns or 'texpr_ad'}::{base}"
        self.name = base
        self.core = CustomOp(fn, base)
        self._cuda: dict[tuple, list] = {}
        self.forward_op = self._register(self.qualname, "(Tensor[] xs) -> Tensor[]",
                                         self._forward, self._forward_fake)
        self.vjp_op = self._register(self.qualname + "_vjp",
                                     "(Tensor[] gs, Tensor[] xs, Tensor[] ys) -> Tensor[]",
                                     self._vjp, self._vjp_fake)
        self.forward_op.register_autograd(self._backward, setup_context=self._setup_context)

    def __call__(self, *xs: torch.Tensor) -> Any:
        outs = self.forward_op(list(xs))[: len(self._pullback(xs).outputs)]  # then residuals
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _pullback(self, xs: Sequence[torch.Tensor]) -> Any:
        return self.core.pullback(self._specs(xs))

    # -- registration and autograd ---------------------------------------------------------

    def _register(self, qualname: str, schema: str, impl: Callable, fake: Callable) -> Any:
        # torch.library silently re-points an existing name at the new implementation, which
        # would change what earlier handles of the op compute: refuse instead
        if qualname in _REGISTERED:
            raise TorchOpError(f"texpr_ad.torch.custom_op: {qualname!r} is already registered in "
                               f"this process, and torch.library ops cannot be redefined without "
                               f"changing the earlier op: pass a new name=")
        try:
            op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=schema)
        except RuntimeError as e:
            raise TorchOpError(f"texpr_ad.torch.custom_op: cannot register {qualname!r} ({e}); "
                               f"pass a new name=") from None
        _REGISTERED.add(qualname)
        op.register_fake(fake)
        return op

    def _setup_context(self, ctx: Any, inputs: tuple, output: Any) -> None:
        xs, ys = list(inputs[0]), list(output)
        ctx.n_in, ctx.n_out = len(xs), len(self._pullback(xs).outputs)
        ctx.mark_non_differentiable(*ys[ctx.n_out:])
        ctx.save_for_backward(*xs, *ys)

    def _backward(self, ctx: Any, gs: Sequence[torch.Tensor | None]) -> tuple[list[torch.Tensor | None]]:
        saved = ctx.saved_tensors
        xs, ys = saved[: ctx.n_in], saved[ctx.n_in:]
        heads = [torch.zeros_like(y) if g is None else g for g, y in zip(gs, ys[: ctx.n_out])]
        gfloat = iter(self.vjp_op(heads, list(xs), list(ys)))
        return ([next(gfloat) if _is_float(x) else None for x in xs],)

    # -- implementations (real and fake) ---------------------------------------------------

    def _specs(self, xs: Sequence[torch.Tensor]) -> list[tuple[tuple[int, ...], Any]]:
        return [(tuple(x.shape), _np_dtype(x, k, self.name)) for k, x in enumerate(xs)]

    def _forward_fake(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        p = self._pullback(xs)
        dev = xs[0].device if xs else torch.device("cpu")
        return [torch.empty([int(s) for s in _static(o)], dtype=_torch_dtype(o.dtype), device=dev)
                for o in p.outputs + p.extra]

    def _vjp_fake(self, gs: list[torch.Tensor], xs: list[torch.Tensor],
                  ys: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.empty_like(x) for x in xs if _is_float(x)]

    def _forward(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The outputs, then the saved intermediates (the pullback's `extra`)."""
        if _on_cuda(xs, self.name):
            return self._cuda_call(xs, None, None)
        arrays = [_host(x, k, self.name) for k, x in enumerate(xs)]
        return [torch.from_numpy(r) for r in self._pullback(xs).forward_kernel(*arrays)]

    def _vjp(self, gs: list[torch.Tensor], xs: list[torch.Tensor],
             ys: list[torch.Tensor]) -> list[torch.Tensor]:
        if _on_cuda([*gs, *xs], self.name):
            return self._cuda_call(xs, gs, ys)
        p = self._pullback(xs)
        arrays = [_host(x, k, self.name) for k, x in enumerate(xs)]
        saved = [_host(y, k, f"{self.name} residual") for k, y in enumerate(ys)]
        n = len(p.outputs)
        heads = self.core._heads([_host(g, k, f"{self.name} cotangent") for k, g in enumerate(gs)],
                                 p.outputs)
        res = p.backward(p.residuals(arrays, saved[:n], saved[n:]), *heads)
        return [torch.zeros_like(x) if r is None else torch.from_numpy(r)  # None: not reached
                for r, x in zip(res, xs, strict=True) if _is_float(x)]

    # -- CUDA (untested without a GPU) ------------------------------------------------------

    def _cuda_call(self, xs: list[torch.Tensor], gs: list[torch.Tensor] | None,
                   ys: list[torch.Tensor] | None) -> list[torch.Tensor]:
        """Forward with residuals (gs None) or float-input gradients on the GPU: the CPU
        pullback's graphs (outputs + extra; gradients over saved slots) built for CUDA."""
        p = self._pullback(xs)
        key = tuple(self._specs(xs))
        inst = self._cuda.get(key)
        if inst is None:
            inst = self._cuda[key] = [build(p.outputs + p.extra, p.inputs, "cuda"), None]
        if gs is not None and inst[1] is None and p.grads:
            params = [p.inputs[k] for k in p.input_positions] + p.slots + p.heads
            inst[1] = build(p.grads, params, "cuda")
        torch.cuda.current_stream(xs[0].device).synchronize()  # Numba launches on its default stream
        if gs is None:
            args = [x.detach().contiguous() for x in xs]
            res = inst[0](*args)
        else:
            by_id = {id(t): y for t, y in zip(p.outputs + p.extra, ys or (), strict=True)}
            args = [xs[k] for k in p.input_positions] + [by_id[id(t)] for t in p.saved] + list(gs)
            res = inst[1](*[a.detach().contiguous() for a in args]) if inst[1] is not None else ()
            live = iter(res)
            res = [next(live) if a is not None else torch.zeros_like(x)
                   for a, x in zip(p.adjoints, xs, strict=True) if _is_float(x)]
        numba_cuda.synchronize()
        return [torch.as_tensor(r, device=xs[0].device) for r in res]


def custom_op(fn: Callable[..., Any], name: str) -> TorchOp:
    """Turn a te function (placeholders in, te tensor or list of them out; see `ta.custom_op`)
    into a PyTorch operator with a derived backward, registered as `texpr_ad::<name>` (or
    `ns::name` when `name` has a namespace)."""
    return TorchOp(fn, name)


# -- helpers ---------------------------------------------------------------------------------

def _np_dtype(x: torch.Tensor, k: int, op: str) -> Any:
    d = _NP.get(x.dtype)
    if d is None:
        raise TorchOpError(f"{op}: tensor {k} has dtype {x.dtype}, which texpr_ad kernels do not "
                           f"take; convert it, e.g. x.float() or x.double()")
    return d


def _host(x: torch.Tensor, k: int, op: str) -> np.ndarray:
    """A NumPy view of a CPU tensor (a contiguous copy first when it is not contiguous)."""
    _np_dtype(x, k, op)
    x = x.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    return x.resolve_conj().resolve_neg().numpy()


def _on_cuda(xs: Sequence[torch.Tensor], op: str) -> bool:
    devs = {x.device.type for x in xs}
    if devs <= {"cpu"}:
        return False
    if devs != {"cuda"}:
        raise TorchOpError(f"{op}: tensors on devices {sorted(devs)}; texpr_ad ops take all-CPU or "
                           f"all-CUDA tensors: move them with .cpu() or .cuda()")
    if not numba_cuda.gpu_available():
        raise TorchOpError(f"{op}: got CUDA tensors, but Numba finds no usable GPU; move them to "
                           f"the CPU with .cpu(), or install the `cuda` extra (numba-cuda)")
    return True


def _static(t: Tensor) -> tuple[Any, ...]:
    from texpr_ad.arrays import static_shape
    s = static_shape(t)
    if s is None:
        raise TorchOpError(f"output {t.name!r} has a symbolic shape; texpr_ad.torch needs the te "
                           f"function to give outputs with shapes fixed by the inputs' shapes")
    return s


def _torch_dtype(d: str) -> torch.dtype:
    return _TORCH[np.dtype(d if d != "bool" else np.bool_).str]


__all__ = ["TorchOp", "TorchOpError", "custom_op"]

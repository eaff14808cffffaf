"""The convenience path: `custom_op` builds and caches forward and backward kernels per signature."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np

from . import te
from .arrays import ArrayArgumentError, as_array, static_shape
from .errors import TexprError
from .te import dtype as dt
from .te.tensor import Tensor


def build(outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu", **kw: Any) -> Any:
    """Compile `outputs` as a function of the placeholders `inputs` (see texpr_ad.kernels.build)."""
    from .kernels import build as _build
    return _build(list(outputs), list(inputs), target=target, **kw)


class CustomOpError(TexprError, TypeError):
    """A custom_op called with the wrong number of arrays or cotangents, or a definition that
    does not return te tensors."""


def _param_names(fn: Callable[..., Any], n: int, op: str) -> list[str]:
    """One placeholder name per array, from `fn`'s positional parameters (`*xs` gives xs0, xs1,
    ...); raises CustomOpError when `n` arrays cannot be passed to `fn`."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins, some callables: no signature to check
        return [f"x{k}" for k in range(n)]
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    required = [p.name for p in pos if p.default is p.empty]
    if n < len(required) or (star is None and n > len(pos)):
        want = f"{len(required)}" + ("" if star is None and len(pos) == len(required) else
                                     " or more" if star else f" to {len(pos)}")
        raise CustomOpError(
            f"{op} takes {want} arrays ({', '.join(p.name for p in pos) or '*' + str(star)}), "
            f"got {n}; pass one array per parameter of its te function")
    names = [p.name for p in pos[:n]]
    return names + [f"{star}{k}" for k in range(n - len(names))]


class CustomOp:
    """An operator defined by a te function; call it on arrays, `.vjp(g, *arrays)` for gradients.

    The te function gets one placeholder per array (named after its parameters, shaped and
    typed like the array) and returns a te tensor or a list of them.  Kernels are built once per
    signature (shapes and dtypes).  Reads the definition makes outside an array's shape (`A[i, k]`
    with `k` over 64 columns on an array with 10) are an ArrayArgumentError at the call.
    """

    def __init__(self, fn: Callable[..., Any], name: str, target: str = "cpu"):
        if not callable(fn):
            raise CustomOpError(f"custom_op {name!r}: expected a te function, got {type(fn).__name__}")
        self.fn, self.name, self.target = fn, name, target
        self._cache: dict[tuple, list] = {}
        self._defs: dict[tuple, tuple[list[Tensor], list[Tensor]]] = {}
        self._pullbacks: dict[tuple, Any] = {}

    def _arrays(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        return [as_array(a, f"{self.name}: array {k}") for k, a in enumerate(arrays)]

    def define(self, specs: Sequence[tuple[tuple[int, ...], Any]]) -> tuple[list[Tensor], list[Tensor]]:
        """The placeholders and te outputs for arrays of these (shape, dtype)s, without building
        kernels (cached per signature): what frontends use to infer output shapes and dtypes."""
        key = tuple((tuple(int(n) for n in s), np.dtype(d).str) for s, d in specs)
        hit = self._defs.get(key)
        if hit is not None:
            return hit
        names = _param_names(self.fn, len(key), self.name)
        ins = []
        for (shape, d), n in zip(key, names, strict=True):
            try:
                ins.append(te.placeholder(shape, dt.check(np.dtype(d)), name=n))
            except TypeError as e:
                raise ArrayArgumentError(f"{self.name}: array {n!r} has dtype {np.dtype(d)}: {e}; "
                                         f"convert it with .astype(...)") from None
        try:
            out = self.fn(*ins)
        except Exception as e:  # the definition rejects these shapes (a TexprError) or fails on
            # them (`A.shape[1]` of a 1-d array): say which call it was
            shapes = ", ".join(f"{n} {s}:{np.dtype(d)}" for n, (s, d) in zip(names, key, strict=True))
            why = e if isinstance(e, TexprError) else f"its te function raised {type(e).__name__}: {e}"
            raise ArrayArgumentError(f"{self.name} called with {shapes}: {why}") from e
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        bad = [type(o).__name__ for o in outs if not isinstance(o, Tensor)]
        if bad or not outs:
            raise CustomOpError(f"{self.name}: its te function must return a te tensor or a list "
                                f"of them, got {bad or 'an empty list'}")
        self._defs[key] = (ins, outs)
        return ins, outs

    def _instance(self, arrays: Sequence[np.ndarray]) -> list:
        """[placeholders, outputs, forward kernel]."""
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        ins, outs = self.define([(a.shape, a.dtype) for a in arrays])
        self._cache[key] = [ins, outs, build(outs, ins, self.target)]
        return self._cache[key]

    def __call__(self, *arrays: Any) -> Any:
        arrs = self._arrays(arrays)
        ins, outs, fwd = self._instance(arrs)
        res = fwd(*arrs)
        return res[0] if len(outs) == 1 else tuple(res)

    def pullback(self, specs: Sequence[tuple[tuple[int, ...], Any]], save: str = "auto",
                 wrt: Sequence[int] | None = None) -> Any:
        """The `Pullback` (derivation, residual decisions, lazily built kernels) for arrays of
        these (shape, dtype)s; `save="none"` recomputes everything from the inputs; `wrt` (array
        positions, default all) derives only those gradients (cached per subset)."""
        from .pullback import Pullback
        key = (tuple((tuple(s), np.dtype(d).str) for s, d in specs), save,
               None if wrt is None else tuple(sorted(set(wrt))))
        hit = self._pullbacks.get(key)
        if hit is None:
            ins, outs = self.define(specs)
            hit = self._pullbacks[key] = Pullback(outs, ins, self.target, save, key[2])
        return hit

    def forward(self, *arrays: Any) -> tuple[tuple[np.ndarray, ...], Any]:
        """`(outputs, residuals)`: the forward that also saves what `backward` needs."""
        arrs = self._arrays(arrays)
        return self.pullback([(a.shape, a.dtype) for a in arrs]).forward(*arrs)

    def backward(self, res: Any, *g: Any) -> tuple[np.ndarray | None, ...]:
        """Gradients from the residuals of a `forward` call and one cotangent per output."""
        from .pullback import Residuals
        p = next((p for p in self._pullbacks.values() if isinstance(res, Residuals)
                  and res.owner == id(p)), None)
        if p is None:
            raise CustomOpError(f"{self.name}.backward takes the residuals returned by "
                                f"{self.name}.forward(...), got {type(res).__name__}")
        return p.backward(res, *self._heads(list(g), p.outputs))

    def vjp(self, g: Any, *arrays: Any, wrt: Sequence[int] | None = None
            ) -> tuple[np.ndarray | None, ...]:
        """Gradients of <g, op(*arrays)> w.r.t. each array (None for integer inputs, and for
        those not in `wrt`, the positions wanted: only their adjoints are derived and built);
        `g` is one cotangent per output (a list for several outputs), each shaped like its
        output.  The backward recomputes what it needs from the arrays (see
        `forward`/`backward` to save it)."""
        arrs = self._arrays(arrays)
        _, outs = self.define([(a.shape, a.dtype) for a in arrs])
        several = isinstance(g, (list, tuple)) and (len(outs) > 1 or all(isinstance(x, np.ndarray) for x in g))
        heads = self._heads(list(g) if several else [g], outs)
        p = self.pullback([(a.shape, a.dtype) for a in arrs], save="none", wrt=wrt)
        return p.backward(p.residuals(arrs, (), ()), *heads)

    def _heads(self, gs: list[Any], outs: Sequence[Tensor]) -> list[np.ndarray]:
        """The cotangents as arrays of their outputs' shapes and dtypes (or a clear error)."""
        if len(gs) != len(outs):
            raise CustomOpError(f"{self.name}.vjp: got {len(gs)} cotangent(s) for {len(outs)} "
                                f"output(s) ({', '.join(o.name for o in outs)}); pass one per output")
        heads = []
        for k, (x, o) in enumerate(zip(gs, outs, strict=True)):
            h = as_array(x, f"{self.name}.vjp: cotangent {k} (for output {o.name!r})")
            want = static_shape(o)
            if h.shape != want:
                raise ArrayArgumentError(f"{self.name}.vjp: cotangent {k} has shape {h.shape}; "
                                         f"output {o.name!r} has shape {want}")
            try:
                heads.append(h.astype(o.dtype, casting="same_kind", copy=False))
            except TypeError:
                raise ArrayArgumentError(f"{self.name}.vjp: cotangent {k} has dtype {h.dtype}, "
                                         f"output {o.name!r} is {o.dtype}; convert it with "
                                         f".astype('{o.dtype}')") from None
        return heads


def custom_op(fn: Callable[..., Any], name: str = "custom_op", target: str = "cpu") -> CustomOp:
    """Wrap a te function of placeholders as an operator on NumPy arrays with a derived vjp."""
    return CustomOp(fn, name, target)

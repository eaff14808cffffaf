"""The convenience path: `custom_op` builds and caches forward and backward kernels per signature."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import te
from .arrays import ArrayArgumentError, as_array, eval_shape, op_arguments, shape_env
from .errors import TexprError, TexprWarning
from .te import dtype as dt
from .te.tensor import Tensor

# A kernel signature: per array, its dims (an int: static; a str: the te.var it gets, shared by
# dims of equal size) and its dtype
Signature = tuple[tuple[tuple[int | str, ...], str], ...]


def build(outputs: Sequence[Tensor] | Tensor, inputs: Sequence[Tensor] | Tensor, target: str = "cpu",
          **kw: Any) -> Any:
    """Compile `outputs` as a function of the placeholders `inputs` (see texpr_ad.kernels.build);
    a single tensor on either side is a list of one."""
    from .kernels import build as _build
    return _build(_as_list(outputs), _as_list(inputs), target=target, **kw)


def _as_list(ts: Sequence[Tensor] | Tensor) -> list[Tensor]:
    return [ts] if isinstance(ts, Tensor) else list(ts)


class CustomOpError(TexprError, TypeError):
    """A custom_op called with the wrong number of arrays or cotangents, or a definition that
    does not return te tensors."""


def param_names(fn: Callable[..., Any], n: int, op: str) -> list[str]:
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
    signature: with `dynamic=False` (the default) per shape and dtype; with `dynamic=True` per
    rank and dtype, each dim a `te.var` bound from the arrays at the call (dims of equal size
    share one var, as PyTorch's duck shaping; `static_dims={"w": (0, 1)}` keeps dims static), so
    the te function may use the sizes symbolically (`A.shape[0]` is a Var).  Static kernels are
    faster (BLAS dispatch, SIMD lanes and float32 sum chains need static extents).  A front end
    passing symbolic sizes (torch.compile's SymInts) makes those dims symbolic from then on.
    Reads the definition makes outside an array's shape (`A[i, k]` with `k` over 64 columns on an
    array with 10) are an ArrayArgumentError at the call (with symbolic dims: a KernelIndexError).
    """

    def __init__(self, fn: Callable[..., Any], name: str, target: str = "cpu",
                 dynamic: bool = False, static_dims: Mapping[str, int | Sequence[int]] | None = None):
        if not callable(fn):
            raise CustomOpError(f"custom_op {name!r}: expected a te function, got {type(fn).__name__}")
        self.fn, self.name, self.target, self.dynamic = fn, name, target, bool(dynamic)
        self.static_dims = _static_dims(static_dims, name, fn)
        self.builds = 0  # kernels built (forward and backward) by this op: new shapes, new kernels
        self._static_only = False  # the te function needs concrete sizes (int(A.shape[0]))
        self._symbolic: dict[tuple, set[tuple[int, int]]] = {}  # rank/dtype -> symbolic (arg, dim)
        self._memo: dict[tuple, Signature] = {}  # concrete (shape, dtype)s -> their signature
        self._cache: dict[Signature, list] = {}
        self._defs: dict[Signature, tuple[list[Tensor], list[Tensor]]] = {}
        self._pullbacks: dict[tuple, Any] = {}

    def _arrays(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        return [as_array(a, f"{self.name}: array {k}") for k, a in enumerate(arrays)]

    def signature(self, specs: Sequence[tuple[Sequence[Any], Any]]) -> Signature:
        """The kernel signature of arrays of these (shape, dtype)s.  A dim that is not an int (a
        torch SymInt, a JAX dim expression) is symbolic, and stays so for later calls of this
        rank and dtype (unless `static_dims` pins it: then `int()` of it, which torch guards on)."""
        exact = tuple((tuple(s), np.dtype(d).str) for s, d in specs)
        concrete = all(type(n) is int for s, _ in exact for n in s)
        hit = self._memo.get(exact) if concrete else None  # a SymInt is unhashable
        if hit is not None:
            return hit
        names = param_names(self.fn, len(exact), self.name)
        pinned = {(k, j % len(exact[k][0])) for k, n in enumerate(names)
                  for j in self.static_dims.get(n, ()) if exact[k][0]}
        ranks = tuple((len(s), d) for s, d in exact)
        sym = self._symbolic.setdefault(ranks, {(k, j) for k, (s, _) in enumerate(exact)
                                                for j in range(len(s))} - pinned
                                        if self.dynamic else set())
        given = {(k, j) for k, (s, _) in enumerate(exact) for j, n in enumerate(s)
                 if not isinstance(n, (int, np.integer))} - pinned
        if not given <= sym and not self._static_only:
            sym |= given
            self._memo.clear()
        groups: dict[Any, str] = {}
        sig = tuple((tuple(groups.setdefault(n if isinstance(n, (int, np.integer)) else
                                             ("sym", str(n)), f"{names[k]}_dim{j}")
                           if (k, j) in sym and not self._static_only else int(n)
                           for j, n in enumerate(s)), d) for k, (s, d) in enumerate(exact))
        if concrete:
            self._memo[exact] = sig = self._covering(sig, exact)
        return sig

    def _covering(self, sig: Signature, exact: tuple) -> Signature:
        """A signature already defined that these concrete shapes fit (its static sizes and equal
        dims hold), else `sig`: a call whose sizes happen to be equal reuses the kernels."""
        if sig in self._defs or not any(isinstance(n, str) for s, _ in sig for n in s):
            return sig
        for old in self._defs:
            if len(old) != len(sig) or any(len(a[0]) != len(b[0]) or a[1] != b[1]
                                           for a, b in zip(old, sig)):
                continue
            seen: dict[str, int] = {}
            if all((n == m) if isinstance(n, int) else seen.setdefault(n, m) == m
                   for (s, _), (t, _) in zip(old, exact) for n, m in zip(s, t)):
                return old
        return sig

    def define(self, specs: Sequence[tuple[Sequence[Any], Any]]) -> tuple[list[Tensor], list[Tensor]]:
        """The placeholders and te outputs for arrays of these (shape, dtype)s, without building
        kernels (cached per signature): what frontends use to infer output shapes (`out_shapes`)
        and dtypes."""
        sig = self.signature(specs)
        hit = self._defs.get(sig)
        if hit is not None:
            return hit
        names = param_names(self.fn, len(sig), self.name)
        dims: dict[str, Any] = {}
        ins = []
        for (shape, d), n in zip(sig, names, strict=True):
            try:
                ins.append(te.placeholder(tuple(dims.setdefault(x, te.var(x)) if isinstance(x, str)
                                                else x for x in shape),
                                          dt.check(np.dtype(d)), name=n))
            except TypeError as e:
                raise ArrayArgumentError(f"{self.name}: array {n!r} has dtype {np.dtype(d)}: {e}; "
                                         f"convert it with .astype(...)") from None
        try:
            out = self.fn(*ins)
        except Exception as e:  # the definition rejects these shapes (a TexprError) or fails on
            # them (`A.shape[1]` of a 1-d array): say which call it was; or it needs concrete
            # sizes (`int(A.shape[0])`, `A.shape[0].value`): define it per shape
            if dims:
                self._needs_concrete(e)
                return self.define(specs)
            shapes = ", ".join(f"{n} {tuple(s)}:{np.dtype(d)}"
                               for n, (s, d) in zip(names, sig, strict=True))
            why = e if isinstance(e, TexprError) else f"its te function raised {type(e).__name__}: {e}"
            raise ArrayArgumentError(f"{self.name} called with {shapes}: {why}") from e
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        bad = [type(o).__name__ for o in outs if not isinstance(o, Tensor)]
        if bad or not outs:
            raise CustomOpError(f"{self.name}: its te function must return a te tensor or a list "
                                f"of them, got {bad or 'an empty list'}")
        self._defs[sig] = (ins, outs)
        return ins, outs

    def _needs_concrete(self, e: Exception) -> None:
        """The te function needs concrete sizes: define and build this op per shape from now on."""
        import warnings
        warnings.warn(f"{self.name}: its te function failed on symbolic sizes ({type(e).__name__}: "
                      f"{e}), so its kernels are built per shape; to share them across sizes, "
                      f"use the dims as expressions (`d.astype('float32')`, not `float(d.value)`)",
                      TexprWarning, stacklevel=4)
        self._static_only = True
        self._memo.clear()

    def out_shapes(self, specs: Sequence[tuple[Sequence[Any], Any]], tensors: Sequence[Tensor]
                   ) -> list[tuple[Any, ...]]:
        """The shapes of `tensors` (outputs of `define(specs)`, their saved intermediates) for
        arrays of these shapes: ints, or symbolic sizes (SymInts) computed from the inputs'."""
        ins, _ = self.define(specs)
        env = shape_env(ins, [s for s, _ in specs])
        return [eval_shape(t.shape, env) for t in tensors]

    def _instance(self, arrays: Sequence[np.ndarray]) -> list:
        """[placeholders, outputs, forward kernel]."""
        specs = [(a.shape, a.dtype) for a in arrays]
        sig = self.signature(specs)
        hit = self._cache.get(sig)
        if hit is not None:
            return hit
        ins, outs = self.define(specs)
        sig = self.signature(specs)  # a te function needing concrete sizes changed it
        self.builds += 1
        self._cache[sig] = [ins, outs, build(outs, ins, self.target)]
        return self._cache[sig]

    def __call__(self, *arrays: Any, **kwargs: Any) -> Any:
        if kwargs:  # (refused, naming them, as the torch and jax ops do)
            op_arguments(self.name, arrays, kwargs, lambda n: [], bool, "", "")
        arrs = self._arrays(arrays)
        ins, outs, fwd = self._instance(arrs)
        res = fwd(*arrs)
        return res[0] if len(outs) == 1 else tuple(res)

    def pullback(self, specs: Sequence[tuple[Sequence[Any], Any]], save: str = "auto",
                 wrt: Sequence[int] | None = None) -> Any:
        """The `Pullback` (derivation, residual decisions, lazily built kernels) for arrays of
        these (shape, dtype)s; `save="none"` recomputes everything from the inputs; `wrt` (array
        positions, default all) derives only those gradients (cached per subset)."""
        from .pullback import Pullback
        w = None if wrt is None else tuple(sorted(set(wrt)))
        hit = self._pullbacks.get((self.signature(specs), save, w))
        if hit is None:
            ins, outs = self.define(specs)
            key = (self.signature(specs), save, w)  # a te function needing concrete sizes changed it
            hit = self._pullbacks[key] = Pullback(outs, ins, self.target, save, w,
                                                  on_build=self._count)
        return hit

    def _count(self) -> None:
        self.builds += 1

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
        env = shape_env([p.inputs[k] for k in p.input_positions] + p.slots,
                        [a.shape for a in res.arrays])
        return p.backward(res, *self._heads(list(g), p.outputs, env))

    def vjp(self, g: Any, *arrays: Any, wrt: Sequence[int] | None = None
            ) -> tuple[np.ndarray | None, ...]:
        """Gradients of <g, op(*arrays)> w.r.t. each array (None for integer inputs, and for
        those not in `wrt`, the positions wanted: only their adjoints are derived and built);
        `g` is one cotangent per output (a list for several outputs), each shaped like its
        output.  The backward recomputes what it needs from the arrays (see
        `forward`/`backward` to save it)."""
        arrs = self._arrays(arrays)
        specs = [(a.shape, a.dtype) for a in arrs]
        ins, outs = self.define(specs)
        several = isinstance(g, (list, tuple)) and (len(outs) > 1 or all(isinstance(x, np.ndarray) for x in g))
        heads = self._heads(list(g) if several else [g], outs,
                            shape_env(ins, [a.shape for a in arrs]))
        p = self.pullback(specs, save="none", wrt=wrt)
        return p.backward(p.residuals(arrs, (), ()), *heads)

    def _heads(self, gs: list[Any], outs: Sequence[Tensor], env: Mapping[Any, int] | None = None
               ) -> list[np.ndarray]:
        """The cotangents as arrays of their outputs' shapes (the te shapes with the symbolic
        dims bound in `env`) and dtypes (or a clear error)."""
        if len(gs) != len(outs):
            raise CustomOpError(f"{self.name}.vjp: got {len(gs)} cotangent(s) for {len(outs)} "
                                f"output(s) ({', '.join(o.name for o in outs)}); pass one per output")
        heads = []
        for k, (x, o) in enumerate(zip(gs, outs, strict=True)):
            h = as_array(x, f"{self.name}.vjp: cotangent {k} (for output {o.name!r})")
            want = eval_shape(o.shape, env or {})
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


def custom_op(fn: Callable[..., Any], name: str = "custom_op", target: str = "cpu",
              dynamic: bool = False,
              static_dims: Mapping[str, int | Sequence[int]] | None = None) -> CustomOp:
    """Wrap a te function of placeholders as an operator on NumPy arrays with a derived vjp;
    `dynamic=True` builds its kernels per rank and dtype, sizes bound at the call (see CustomOp)."""
    return CustomOp(fn, name, target, dynamic, static_dims)


def _static_dims(spec: Mapping[str, int | Sequence[int]] | None, op: str,
                 fn: Callable[..., Any]) -> dict[str, tuple[int, ...]]:
    """`static_dims` as {parameter name: dims}, or a CustomOpError saying what it takes (a name
    that is not one of `fn`'s parameters too: a typo would leave the dims symbolic)."""
    out: dict[str, tuple[int, ...]] = {}
    for n, d in (spec.items() if isinstance(spec, Mapping) else [(spec, None)] if spec is not None else []):
        dims = (d,) if isinstance(d, int) else tuple(d) if isinstance(d, (list, tuple)) else None
        if not isinstance(n, str) or dims is None or not all(isinstance(x, int) for x in dims):
            raise CustomOpError(f"custom_op {op!r}: static_dims maps parameter names to dims (an "
                                f"int or a tuple of ints), e.g. static_dims={{'w': (0, 1)}}; got "
                                + (f"{n!r}: {d!r}" if isinstance(spec, Mapping) else repr(spec)))
        if (have := _other_params(fn, n)) is not None:
            raise CustomOpError(f"custom_op {op!r}: static_dims names {n!r}, not a parameter of "
                                f"its te function ({have})")
        out[n] = dims
    return out


def _other_params(fn: Callable[..., Any], name: str) -> str | None:
    """None where `name` is a placeholder name of `fn` (`xs3` for `*xs`), else its parameters."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature to check
        return None
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), None)
    if name in pos or (star and name.startswith(star) and name[len(star):].isdigit()):
        return None
    return ", ".join(pos + [f"*{star}"] * bool(star))

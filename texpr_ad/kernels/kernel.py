"""`Kernel`: the base of the compiled kernels, called with one array per input (checked
against the plan).

The targets' kernel classes are siblings over it: `cpu_kernel.CpuKernel` (Numba CPU source
compiled through the on-disk cache) and `cuda_kernel.CudaKernel` (a module of `@cuda.jit`
kernels and their launcher).  The base renders the source, prints the plan and the source at
`TEXPR_DEBUG` levels 2 and 3, checks the arrays passed against the plan's inputs (dtypes,
ranks, shapes, symbolic dims, symbolic divisors) and turns the generated code's errors into
the project's.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..arrays import as_array
from ..errors import TexprError
from .._env import debug_level
from ..schedule.plan import Plan
from ..schedule.plan import ComputeStage
from ..te import dtype as dt
from ..te.expr import Call, Const, Expr, Var
from ..te.ops import Op
from ..te.interp import NUMPY_IMPL
from ..te.tensor import Tensor, shape_str
from ..te.visit import walk
from .render import Renderer


class KernelArgumentError(TexprError, ValueError):
    """An array passed to a kernel does not match its input (names the input and the fix)."""


def no_keywords(keywords: dict[str, Any], inputs: Sequence[Tensor], what: str = "kernel",
                order: str = "its inputs") -> None:
    """Refuse arrays passed by keyword (`kernel(X=x)`), naming the positional order."""
    raise KernelArgumentError(f"{what} got keyword argument(s) {', '.join(map(repr, keywords))}; "
                              f"pass the arrays positionally, in the order of {order}: "
                              f"({', '.join(t.name for t in inputs)})")


class KernelIndexError(KernelArgumentError, IndexError):
    """A read or scatter index fell outside its tensor when the kernel ran (an index computed
    from tensor values, a reduce range read from data, or symbolic dims that do not fit)."""


def index_error(e: IndexError) -> Exception:
    """The generated kernel's `IndexError(site, index, extent)` as a KernelIndexError."""
    if len(e.args) != 3:
        return e
    site, i, n = e.args
    return KernelIndexError(
        f"{site} = {int(i)}, outside [0, {int(n)}) (extent {int(n)} of that dim); the arrays "
        "passed (index values, data-dependent ranges or symbolic dims) make this read fall "
        "outside the tensor: pass values in range or guard the read with te.if_then_else")


class Kernel(ABC):
    """A compiled kernel: call it with one array per input, in the order of `inputs`; it
    returns a tuple with one array per output.  `plan` is what the scheduler decided (print
    it), `source` the generated code.  `build` returns the target's subclass
    (`backends.BACKENDS[target].kernel_class`)."""

    _fn: Callable[..., Any]  # the generated entry point, set by each target's __init__

    def __init__(self, plan: Plan, renderer: Renderer) -> None:
        self.plan = plan
        self.source = renderer.render(plan)
        self._checked: dict[tuple, list[int]] = {}  # `_prepare`'s memo
        self._divs: dict[Expr, tuple[Expr, str]] | None = None  # found on the first check
        self._sized: list[tuple[str, tuple[Expr, ...]]] = []  # ... as are the symbolic shapes
        level = debug_level()
        if level >= 2:
            print(plan)
        if level >= 3:
            print(self.source)

    @abstractmethod
    def __call__(self, *arrays: Any, **keywords: Any) -> tuple[Any, ...]:
        """The outputs, for one array per input (positional: a keyword is refused)."""

    @abstractmethod
    def _internal_error(self, e: Exception) -> str:
        """The message when Numba fails on the generated code (a bug of ours, not the user's):
        what failed and where the source is."""

    def _run(self, *args: Any) -> Any:
        """The generated entry point on `args`: an index out of range as a KernelIndexError,
        Numba's own failures as a RuntimeError naming the source."""
        try:
            return self._fn(*args)
        except IndexError as e:
            raise index_error(e) from None
        except Exception as e:
            if type(e).__module__.startswith("numba"):
                raise RuntimeError(self._internal_error(e)) from e
            raise

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self.plan.inputs

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self.plan.outputs

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}{shape_str(t.shape)}:{t.dtype}" for t in self.inputs)
        return f"Kernel({ins} -> {', '.join(t.name for t in self.outputs)}, target={self.plan.target})"

    def _prepare(self, arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
        """The arrays as the compiled function takes them, and the symbolic dims' values; NumPy
        arrays of shapes and dtypes that passed the checks before skip them (a memo)."""
        if all(type(a) is np.ndarray for a in arrays):
            key = tuple([(a.shape, a.dtype) for a in arrays])
            params = self._checked.get(key)
            if params is None:
                args, params = self._check(arrays)
                if len(self._checked) < 64:
                    self._checked[key] = params
                return args, params
            return [np.ascontiguousarray(a) if a.ndim else a.reshape(1) for a in arrays], params
        return self._check(arrays)

    def _check(self, arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
        """`_validate`, then the arrays C-contiguous (0-d ones as one element)."""
        xs, params = self._validate(arrays)
        return [np.ascontiguousarray(a) if a.ndim else a.reshape(1) for a in xs], params

    def _validate(self, arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
        """The arrays as NumPy arrays (as given: host stand-ins of device arrays are never
        copied) and the symbolic dims' values, after checking them against the plan's inputs."""
        ins = self.plan.inputs
        if len(arrays) != len(ins):
            raise KernelArgumentError(
                f"kernel expects {len(ins)} arrays ({', '.join(t.name for t in ins)}), "
                f"got {len(arrays)}")
        xs = [as_array(a, f"input {t.name!r}") for a, t in zip(arrays, ins)]
        env: dict[Var, int] = {}
        for t, a in zip(ins, xs, strict=True):
            if a.dtype != t.dtype:  # a NumPy dtype against its name (str(dtype) costs 2 us)
                raise KernelArgumentError(
                    f"input {t.name!r} must have dtype {t.dtype}, got {a.dtype}; "
                    f"convert it with .astype('{t.dtype}')")
            if a.ndim != t.ndim:
                raise KernelArgumentError(
                    f"input {t.name!r} must have {t.ndim} dims, shape {shape_str(t.shape)}, "
                    f"got an array of shape {a.shape}")
            for s, n in zip(t.shape, a.shape, strict=True):
                if isinstance(s, Var):
                    env.setdefault(s, n)
        for t, a in zip(ins, xs, strict=True):
            want = tuple(_index_value(s, env) for s in t.shape)
            if want != a.shape:
                binding = _binding(t.shape, env)
                sym = f" = {want} (with {binding})" if binding else ""
                raise KernelArgumentError(
                    f"input {t.name!r} must have shape {shape_str(t.shape)}{sym}, got {a.shape}")
        if self._divs is None:
            self._divs, self._sized = symbolic_divisors(self.plan), symbolic_shapes(self.plan)
        for b, (x, stage) in self._divs.items():
            if _index_value(b, env) == 0:
                raise KernelArgumentError(
                    f"stage {stage}: `{x}` divides by `{b}` = 0 (with {_binding((b,), env)}); "
                    f"pass arrays whose shapes make the divisor nonzero")
        for what, shape in self._sized:
            got = tuple(_index_value(s, env) for s in shape)
            if min(got) < 0:
                raise KernelArgumentError(
                    f"{what} would have shape {shape_str(shape)} = {got} (with "
                    f"{_binding(shape, env)}); pass arrays whose shapes make every dim >= 0")
        return xs, [env[v] for v in self.plan.params]


_DIVISIONS = (Op.FLOORDIV, Op.FLOORMOD, Op.DIV)


def symbolic_divisors(plan: Plan) -> dict[Expr, tuple[Expr, str]]:
    """Integer divisors made of symbolic dims only (`i // n`), with a division using each and its
    stage: checked nonzero once per call (a constant 0 is a TensorError at definition)."""
    found: dict[Expr, tuple[Expr, str]] = {}
    for st in plan.stages:
        exprs = st.bodies if isinstance(st, ComputeStage) else [e for u in st.updates for e in u.exprs]
        for e in exprs:
            for x in walk(e):
                if isinstance(x, Call) and x.op in _DIVISIONS and dt.is_int(x.dtype):
                    b = x.args[1]
                    if not isinstance(b, Const) and all(isinstance(y, (Var, Const, Call))
                                                        for y in walk(b)):
                        found.setdefault(b, (x, st.name))
    return found


def symbolic_shapes(plan: Plan) -> list[tuple[str, tuple[Expr, ...]]]:
    """The shapes of the plan's arrays that depend on symbolic dims (checked >= 0 per call)."""
    outs = {id(t) for t in plan.outputs}
    arrays = [(t, tuple(a.extent for a in st.axes)) for st in plan.stages
              if isinstance(st, ComputeStage) for t in st.tensors if t is not None]
    arrays += [(st.tensor, st.shape) for st in plan.stages if not isinstance(st, ComputeStage)]
    return [(f"{'output' if id(t) in outs else 'intermediate'} {t.name!r}", shape)
            for t, shape in arrays if not all(isinstance(s, Const) for s in shape)]


def _binding(exprs: Sequence[Expr], env: Mapping[Var, int]) -> str:
    """`n=5, m=0`: the values of the symbolic dims that `exprs` use."""
    return ", ".join(f"{v.name}={env[v]}" for v in env if any(
        x.same_as(v) for e in exprs for x in walk(e)))


def _index_value(e: Expr, env: Mapping[Var, int]) -> int:
    """Evaluate a shape expression over the bound symbolic dims."""
    match e:
        case Const(value=v):
            return int(v)
        case Var():
            return int(env[e])
        case Call(op=Op.CAST, args=(a,)):  # an index dtype's cast (`i % n` of an int64 read)
            return int(np.array(_index_value(a, env)).astype(e.dtype))
        case Call(op=op, args=args):
            return int(NUMPY_IMPL[op](*[np.int64(_index_value(a, env)) for a in args]))
    raise TypeError(f"cannot evaluate shape expression `{e}`")

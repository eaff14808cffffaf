"""`Kernel`: a compiled kernel, called with one array per input (checked against the plan).

The CPU kernel is this class itself (Numba source compiled through the on-disk cache);
other targets subclass it (`numba_cuda.CudaKernel`) and reuse the argument checks.
"""
from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

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
from .numba_cpu import CPURenderer, compile_source
from .render import Renderer


class KernelArgumentError(TexprError, ValueError):
    """An array passed to a kernel does not match its input (names the input and the fix)."""


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


class Kernel:
    """A compiled kernel: call it with one array per input, in the order of `inputs`.

    Large intermediates (the renderer's `workspace`: im2col buffers, materialized
    stages of 1 MiB or more) are allocated on a thread's first call and reused by its
    later calls, as long as the kernel lives: fresh allocations that size come from
    `mmap`, and faulting their pages in again on every call cost more than the stage
    that fills them.  Outputs are always new arrays.
    """

    def __init__(self, plan: Plan, renderer: Renderer | None = None) -> None:
        self.plan = plan
        renderer = renderer or CPURenderer()
        self.source = renderer.render(plan)
        self._ws_spec = [(tuple(int(s.value) for s in t.shape), t.dtype)  # type: ignore[attr-defined]
                         for t in renderer.workspace(plan)]
        self._ws = threading.local()
        level = debug_level()
        if level >= 2:
            print(plan)
        if level >= 3:
            print(self.source)
        self._fn = compile_source(self.source)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return self.plan.inputs

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return self.plan.outputs

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        args, params = self._prepare(arrays)
        ws = getattr(self._ws, "arrays", None)
        if ws is None:
            ws = self._ws.arrays = [np.empty(s, dtype=d if d != "bool" else np.bool_)
                                    for s, d in self._ws_spec]
        try:
            res = self._fn(*args, *params, *ws)
        except IndexError as e:
            raise index_error(e) from None
        except Exception as e:
            if type(e).__module__.startswith("numba"):  # a bug of ours, not the user's: say where
                raise RuntimeError(
                    f"internal error: the generated kernel failed to compile ({type(e).__name__}); "
                    f"its source is {self._fn.py_func.__code__.co_filename} (kernel.source); "
                    f"please report it with print(kernel.plan)") from e
            raise
        out: list[np.ndarray] = []
        for r, t in zip(res, self.plan.outputs, strict=True):
            r = r.reshape(()) if t.ndim == 0 else r
            out.append(r.copy() if any(np.may_share_memory(r, x) for x in out) else r)  # listed twice
        return tuple(out)

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}{shape_str(t.shape)}:{t.dtype}" for t in self.inputs)
        return f"Kernel({ins} -> {', '.join(t.name for t in self.outputs)}, target={self.plan.target})"

    def _prepare(self, arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
        """The arrays as the compiled function takes them, and the symbolic dims' values; NumPy
        arrays of shapes and dtypes that passed the checks before skip them (a memo)."""
        if all(type(a) is np.ndarray for a in arrays):
            key = tuple((a.shape, a.dtype) for a in arrays)
            memo = self.__dict__.setdefault("_checked", {})
            params = memo.get(key)
            if params is None:
                args, params = self._check(arrays)
                if len(memo) < 64:
                    memo[key] = params
                return args, params
            return [np.ascontiguousarray(a) if a.ndim else a.reshape(1) for a in arrays], params
        return self._check(arrays)

    def _check(self, arrays: Sequence[Any]) -> tuple[list[np.ndarray], list[int]]:
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
                used = [v for v in env if any(x.same_as(v) for s in t.shape for x in walk(s))]
                binding = ", ".join(f"{v.name}={env[v]}" for v in used)
                sym = f" = {want} (with {binding})" if used else ""
                raise KernelArgumentError(
                    f"input {t.name!r} must have shape {shape_str(t.shape)}{sym}, got {a.shape}")
        if "_divs" not in self.__dict__:
            self._divs = symbolic_divisors(self.plan)
        for b, (x, stage) in self._divs.items():
            if _index_value(b, env) == 0:
                binding = ", ".join(f"{v.name}={env[v]}" for v in env if any(
                    y.same_as(v) for y in walk(b)))
                raise KernelArgumentError(
                    f"stage {stage}: `{x}` divides by `{b}` = 0 (with {binding}); pass arrays "
                    f"whose shapes make the divisor nonzero")
        args = [np.ascontiguousarray(a) if a.ndim else a.reshape(1) for a in xs]
        return args, [env[v] for v in self.plan.params]


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


def _index_value(e: Expr, env: Mapping[Var, int]) -> int:
    """Evaluate a shape expression over the bound symbolic dims."""
    match e:
        case Const(value=v):
            return int(v)
        case Var():
            return int(env[e])
        case Call(op=op, args=args):
            return int(NUMPY_IMPL[op](*[np.int64(_index_value(a, env)) for a in args]))
    raise TypeError(f"cannot evaluate shape expression `{e}`")

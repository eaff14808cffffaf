"""PyTorch operators from te functions (optional extra `torch`).

    import texpr_ad.torch as tt
    gelu_mm = tt.custom_op(lambda X, W: ..., name="gelu_mm")   # a te function, as ta.custom_op
    y = gelu_mm(x, w); y.sum().backward()                      # torch tensors in and out

Route: `torch.library.custom_op` (schema `(Tensor x, Tensor g, bool[] wrt) -> Tensor[]`: one
named Tensor per parameter of the te function, `Tensor[] xs` for `*xs` or defaults; `wrt` says
which inputs' gradients autograd will ask for) with `register_autograd`, `register_vmap` and
a fake implementation, so the op dispatches like a built-in, is opaque to `torch.compile` and
traces under FakeTensors.  The backward is a second custom op (`<name>_vjp`), so it is
opaque to `torch.compile` too.  Residuals (`ta.vjp`): the forward op also returns the
intermediates its backward reads (a row max, a normalizer; see `Pullback.explain()`), marked
non-differentiable and saved by autograd with the inputs and outputs; the `_vjp` op reads them
instead of recomputing.

Higher order, derived: the `_vjp` op's own autograd is texpr_ad's vjp of the vjp graph (the op
`<name>_grad`: inputs and cotangents -> adjoints; recursively), so double backward works; the
vmap rules run the te function mapped over a batch axis (`te.dag.add_batch_axis`) as the op
`<name>_vmap_<mask>`: one batched kernel.  Per-call fast path: pullbacks memoized per (shapes,
dtypes, wrt), their kernels bound (checked once); an eager call on plain CPU tensors that nothing
else observes (`_plain_eager`) skips the dispatcher (the kernels directly, or an autograd.Function
that keeps the forward's arrays for its backward, when a gradient is recorded).

Arrays: CPU tensors reach the Numba kernels as `.numpy()` views (no copy) when C-contiguous;
a non-contiguous tensor (a transpose, an expanded gradient) is copied once (np.ascontiguousarray).
Outputs are the kernels' fresh NumPy arrays wrapped by `torch.from_numpy` (no copy).  Kernels
are built and cached per shape/dtype signature by the core `ta.custom_op`, which also does the
dtype and shape checks.  CUDA tensors go to the CUDA kernels through `__cuda_array_interface__`
(no copies; launched on Numba's default stream after synchronizing PyTorch's current stream);
without a usable GPU they are a TorchDeviceError, as are tensors on different devices (a CPU
tensor next to a meta one included: only all-meta inputs take the fake implementation).
Integer inputs get no gradient (None); integer outputs are not differentiated.

Only the gradients asked for: the call passes which inputs require grad (under grad mode), and
the forward and backward are derived, built and cached per subset (`CustomOp.pullback(wrt=)`):
no residuals under `torch.no_grad()`, no dw when w does not require grad.

Arguments: tensors and Python numbers, positionally (`arrays.op_arguments`), in a dtype the
kernels compute in (`arrays.op_dtype`; float16/bfloat16: compute in float32), else an
OpArgumentError.  A Python number is a 0-dim tensor (a float one in the dtype of the first float
tensor argument): a runtime value read as `s[()]` or `s` in te, one kernel for every value, no
gradient; a 0-dim float tensor that requires grad gets one.  Under
`torch.compile` with dynamic shapes, the fake implementation shapes the outputs by the te
shapes over the SymInts, and those dims become te.vars: one kernel for all sizes
(`custom_op(..., dynamic=True)` does so in eager calls too; docs/frameworks.md).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from texpr_ad.api import CustomOp, build, param_names
from texpr_ad import te
from texpr_ad.deriv import grad
from texpr_ad.pullback import Pullback
from texpr_ad.te.dag import add_batch_axis
from texpr_ad.arrays import (KERNEL_DTYPES, OpArgumentError, op_arguments, op_dtype,
                             shape_env)
from texpr_ad.errors import TexprError
from texpr_ad.kernels import cuda_runtime
from texpr_ad.te.tensor import Tensor

_NP = {getattr(torch, n): np.dtype(n) for n in KERNEL_DTYPES}  # the dtypes the kernels take
_REGISTERED: set[str] = set()  # qualified names registered by this module
_OPS: dict[str, TorchOp] = {}  # qualified name -> its op (what unpickling an op looks up)
_CPU = torch.device("cpu")
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # a Parameter disables torch function: plain


class TorchOpError(TexprError, ValueError):
    """A texpr_ad torch op whose name is taken, or whose outputs PyTorch cannot shape."""


class TorchDeviceError(TorchOpError, RuntimeError):
    """Tensors on different devices, or on one texpr_ad has no kernels for (a RuntimeError, as
    PyTorch's own ops raise)."""


def _is_float(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point


_NUMBERS = (bool, int, float)  # Python numbers an op takes (as 0-dim tensors)
_SCHEMA_RESERVED = {"wrt", "self", "out"}  # names the schema keeps for itself


def _takes(a: Any) -> bool:
    return isinstance(a, (torch.Tensor, *_NUMBERS))


def _schema_names(fn: Callable[..., Any]) -> list[str] | None:
    """The te function's parameter names when they can name the schema's arguments (plain
    positional parameters), else None (one `Tensor[] xs` argument)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    plain = all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
                and p.name.isascii() and p.name not in _SCHEMA_RESERVED for p in params)
    return [p.name for p in params] if plain and params else None


def _as_tensors(args: Sequence[Any]) -> list[torch.Tensor]:
    """The arguments as tensors: a Python number becomes a 0-dim tensor on the tensors' device,
    a float in the dtype of the first float tensor (torch's default dtype when none)."""
    if all(isinstance(a, torch.Tensor) for a in args):
        return list(args)
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    dev = ts[0].device if ts else torch.device("cpu")
    fl = next((t.dtype for t in ts if _is_float(t)), torch.get_default_dtype())
    kinds = {bool: torch.bool, int: torch.int64, float: fl}
    return [a if isinstance(a, torch.Tensor) else torch.tensor(a, dtype=kinds[type(a)], device=dev)
            for a in args]


class TorchOp:
    """A te function as a PyTorch operator with autograd; call it on tensors.

    `op(*tensors)` returns a tensor, or a tuple for several outputs.  `op.core` is the NumPy
    `ta.CustomOp` doing the work on the CPU; `op.forward_op`/`op.vjp_op` are the registered
    `torch.library` ops (`texpr_ad::<name>`, `texpr_ad::<name>_vjp`).
    """

    def __init__(self, fn: Callable[..., Any], name: str, dynamic: bool = False,
                 static_dims: Mapping[str, int | Sequence[int]] | None = None):
        ns, _, base = name.rpartition("::")
        self.qualname = f"{ns or 'texpr_ad'}::{base}"
        self.name = base
        self.core = CustomOp(fn, base, dynamic=dynamic, static_dims=static_dims)
        self._cuda: dict[tuple, list] = {}
        self._names = _schema_names(fn)
        args = ", ".join(f"Tensor {n}" for n in self._names) if self._names else "Tensor[] xs"
        self.forward_op = self._register(
            self.qualname, f"({args}, bool[] wrt) -> Tensor[]",
            lambda *a: self._forward(*self._split(a)),
            lambda *a: self._forward_fake(*self._split(a)))
        self.vjp_op = self._register(
            self.qualname + "_vjp",
            "(Tensor[] gs, Tensor[] xs, Tensor[] ys, bool[] wrt) -> Tensor[]",
            self._vjp, self._vjp_fake)
        self.forward_op.register_autograd(self._backward, setup_context=self._setup_context)
        self.vjp_op.register_autograd(self._vjp_backward, setup_context=self._vjp_setup_context)
        self._second: dict[int, TorchOp] = {}  # inputs count -> the op of the vjp graph
        self._fast: dict[tuple, _Plan] = {}  # (shapes and dtypes, wrt) -> pullback's plan
        self._vmapped: dict[tuple, TorchOp] = {}  # (batched args, wrt) -> the batched op
        self._counts: dict[tuple, int] = {}  # ranks -> outputs (recorded by `_forward_fake`)
        self.forward_op.register_vmap(self._forward_vmap)
        self.vjp_op.register_vmap(self._vjp_vmap)
        _OPS[self.qualname] = self

    def __reduce__(self) -> tuple:
        """Pickled by name (torch.save of a module holding the op, copy.deepcopy, spawned
        workers): loading gives the op of that name defined in the loading process."""
        return _registered_op, (self.qualname,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        op_arguments(self.name, args, kwargs, self._arg_names, _takes,
                     "torch tensor or Python number", "torch.as_tensor(value)")
        if self._names and len(args) != len(self._names):
            self._arg_names(len(args))  # a CustomOpError saying what the te function takes
        xs = _as_tensors(args)
        wrt = [x.requires_grad for x in xs] if torch.is_grad_enabled() else [False] * len(xs)
        if _plain_eager(xs):  # nothing else would see the op: skip the dispatcher
            plan = self._plan(xs, wrt)
            outs = _eager(self, plan, wrt, *xs) if any(wrt) else \
                self._forward(xs, wrt) if _on_gpu(xs) else plan.forward(xs)
            n = plan.n_out
        else:
            if torch._C._get_tracing_state():
                raise TorchOpError(f"{self.name}: torch.jit.trace cannot record a texpr_ad op (its "
                                   f"bool[] argument is not traceable, and a trace would fix which "
                                   f"inputs get gradients); use torch.compile or torch.export")
            outs = self.forward_op(*xs, wrt) if self._names else self.forward_op(xs, wrt)
            n = self._n_out(xs, wrt)
        return outs[0] if n == 1 else tuple(outs[:n])  # then residuals

    def _n_out(self, xs: Sequence[torch.Tensor], wrt: Sequence[bool]) -> int:
        """The number of outputs (the memoized pullback's, eagerly; while torch.compile traces,
        the count `_forward_fake`, run first, recorded: a guard on the core's shape memo fails)."""
        if torch.compiler.is_compiling():
            return self._counts[tuple([x.dim() for x in xs])]
        return len(self._pullback(xs, wrt).outputs)

    def _split(self, args: Sequence[Any]) -> tuple[list[torch.Tensor], list[bool]]:
        """(tensors, wrt) from the forward op's arguments (named tensors or one list, then wrt)."""
        return (list(args[:-1]) if self._names else list(args[0])), list(args[-1])

    def _arg_names(self, n: int) -> list[str]:
        """The te function's parameter names for `n` tensors (for messages: a CustomOpError if
        it takes another count)."""
        return param_names(self.core.fn, n, self.name)

    def _label(self, xs: Sequence[torch.Tensor], k: int) -> str:
        return f"argument {k} ({self._arg_names(len(xs))[k]!r})"

    def _pullback(self, xs: Sequence[torch.Tensor], wrt: Sequence[bool] | None = None) -> Any:
        return self._plan(xs, wrt).p

    def _plan(self, xs: Sequence[torch.Tensor], wrt: Sequence[bool] | None = None) -> _Plan:
        """The `_Plan` of the core pullback for these tensors, deriving the gradients flagged
        in `wrt` (all float ones when None); memoized per concrete shapes, dtypes and `wrt`."""
        key: Any = (tuple([(x.shape, x.dtype) for x in xs]), None if wrt is None else tuple(wrt))
        try:
            return self._fast[key]
        except KeyError:
            pass
        except TypeError:  # symbolic sizes (torch.compile's SymInts) do not hash; the core
            key = None      # makes those dims symbolic for later calls too: forget the memo
            self._fast.clear()
        pos = None if wrt is None else [k for k, w in enumerate(wrt) if w]
        plan = _Plan(self.core.pullback(self._specs(xs), wrt=pos))
        if key is not None:
            self._fast[key] = plan
        return plan

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
        (xs, wrt), ys = self._split(inputs), list(output)
        ctx.n_in, ctx.n_out, ctx.wrt = len(xs), self._n_out(xs, wrt), wrt
        ints = [y for y in ys[: ctx.n_out] if not _is_float(y)]  # integer outputs: no gradient
        ctx.mark_non_differentiable(*ys[ctx.n_out:], *ints)
        ctx.save_for_backward(*xs, *_stand_ins(ys, self._plan(xs, wrt).unread))

    def _backward(self, ctx: Any, gs: Sequence[torch.Tensor | None]) -> tuple:
        """One gradient per input flagged in the forward's `wrt`, None for the others."""
        saved = ctx.saved_tensors
        xs, ys = saved[: ctx.n_in], saved[ctx.n_in:]
        heads = [torch.zeros_like(y) if g is None else g for g, y in zip(gs, ys[: ctx.n_out])]
        vjp = self._vjp if not torch.is_grad_enabled() and _plain_eager([*xs, *ys, *heads]) \
            else self.vjp_op
        got = iter(vjp(heads, list(xs), list(ys), ctx.wrt) if any(ctx.wrt) else ())
        grads = [next(got) if w else None for w in ctx.wrt]
        return (*grads, None) if self._names else (grads, None)

    # -- double backward: the vjp graph as an op, with its own derived vjp ------------------

    def _vjp_setup_context(self, ctx: Any, inputs: tuple, output: Any) -> None:
        gs, xs, ys, wrt = inputs
        ctx.n_in, ctx.n_saved, ctx.wrt = len(xs), len(ys), wrt
        ctx.wrt2 = [t.requires_grad for t in (*xs, *gs)]
        ctx.save_for_backward(*xs, *gs)

    def _vjp_backward(self, ctx: Any, ggs: Sequence[torch.Tensor | None]) -> tuple:
        """Gradients of <ggs, vjp(gs, xs)> w.r.t. the inputs and the cotangents: the vjp graph
        (`_second`: its adjoints as a te function of the inputs and cotangents) differentiated
        by texpr_ad.  The saved outputs `ys` get None: the graph reads the inputs alone, so
        its derivative w.r.t. the inputs is the whole one."""
        saved, n = list(ctx.saved_tensors), ctx.n_in
        xs, gs = saved[:n], saved[n:]
        if not any(ctx.wrt2):
            return [None] * len(gs), [None] * n, [None] * ctx.n_saved, None
        second = self._second_op(n)
        given = iter(ggs)
        cot = {k: next(given) for k, w in enumerate(ctx.wrt) if w}
        heads = [torch.zeros_like(x) if cot.get(k) is None else cot[k]
                 for k, x in enumerate(xs) if _is_float(x)]
        ys = second.forward_op(saved, ctx.wrt2)  # the adjoints (recomputed) and their residuals
        got = iter(second.vjp_op(heads, saved, list(ys), ctx.wrt2))
        d = [next(got) if w else None for w in ctx.wrt2]
        return d[n:], d[:n], [None] * ctx.n_saved, None

    def _second_op(self, n_in: int) -> TorchOp:
        """The op `(*xs, *cotangents) -> adjoints of the float inputs`, registered as
        `<name>_grad` (its own vjp, and so on for higher orders, derived the same way)."""
        op = self._second.get(n_in)
        if op is None:
            fn = self.core.fn

            def adjoints(*args: Tensor) -> list[Tensor]:
                xs, heads = list(args[:n_in]), args[n_in:]
                outs = fn(*xs)
                outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                diff = [k for k, o in enumerate(outs) if o.dtype.startswith("float")]
                got = grad([outs[k] for k in diff], xs, head=[heads[k] for k in diff])
                return [a for a in got if a is not None]
            suffix = "_grad" if self._names else f"_grad{n_in}"
            op = self._second[n_in] = TorchOp(adjoints, self.qualname + suffix)
        return op

    # -- vmap: the te function mapped over a batch axis, as an op (one batched kernel) -------

    def _forward_vmap(self, info: Any, in_dims: tuple, *args: Any) -> tuple[list, list]:
        """torch.vmap of the forward op: the outputs and saved intermediates of the unbatched
        op, computed for the whole batch by the batched op (differentiable in turn)."""
        xs, wrt = self._split(args)
        dims = list(in_dims[:-1]) if self._names else list(in_dims[0])
        xs, mask = _batch_first(xs, dims)
        outs = self._vmapped_op(tuple(mask), tuple(wrt))(*xs)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        return outs, [0] * len(outs)

    def _vjp_vmap(self, info: Any, in_dims: tuple, gs: list[torch.Tensor], xs: list[torch.Tensor],
                  ys: list[torch.Tensor], wrt: list[bool]) -> tuple[list, list]:
        """torch.vmap of the backward op (batched cotangents, per-sample gradients): the
        batched vjp graph (`_second_op`), from the inputs and cotangents."""
        gs, gm = _batch_first(gs, in_dims[0])
        xs, xm = _batch_first(xs, in_dims[1])
        second = self._second_op(len(xs))
        need = tuple(t.requires_grad for t in (*xs, *gs))
        adj = second._vmapped_op((*xm, *gm), need)(*xs, *gs)
        adj = iter(adj if isinstance(adj, tuple) else (adj,))
        got = [next(adj) if _is_float(x) else None for x in xs]
        res = [g for g, w in zip(got, wrt) if w]
        return res, [0] * len(res)

    def _vmapped_op(self, mask: tuple[bool, ...], wrt: tuple[bool, ...]) -> TorchOp:
        """The op of the te function mapped over a leading batch axis of the arguments flagged
        in `mask` (te/dag.add_batch_axis), giving what the forward op gives for `wrt`: the
        outputs, then the saved intermediates, each batched."""
        key = (mask, wrt)
        op = self._vmapped.get(key)
        if op is None:
            fn, target = self.core.fn, self.core.target
            pos = [k for k, w in enumerate(wrt) if w]

            def batched(*args: Tensor) -> list[Tensor]:
                ins = [te.placeholder(a.shape[1:], a.dtype, name=a.name) if m else a
                       for a, m in zip(args, mask, strict=True)]
                outs = fn(*ins)
                p = Pullback(list(outs) if isinstance(outs, (list, tuple)) else [outs], ins,
                             target, wrt=pos)  # the residual decisions of the forward op
                size = next(a.shape[0] for a, m in zip(args, mask) if m)
                res = add_batch_axis(p.outputs + p.extra,
                                     {i: a for i, a, m in zip(ins, args, mask) if m})
                return [r if r.ndim and r.shape[0] is size else _broadcast(r, size) for r in res]
            tag = "".join("b" if m else "_" for m in mask) + "".join("w" if w else "_" for w in wrt)
            op = self._vmapped[key] = TorchOp(batched, f"{self.qualname}_vmap_{tag}")
        return op

    # -- implementations (real and fake) ---------------------------------------------------

    def _specs(self, xs: Sequence[torch.Tensor]) -> list[tuple[tuple[Any, ...], Any]]:
        """(shape, NumPy dtype) per tensor.  A symbolic size (a SymInt: torch.compile's dynamic
        shapes, torch.export) stays symbolic: the core makes that dim a te.var, for this call
        and the real ones after it (one kernel for all sizes)."""
        bad = next((k for k, x in enumerate(xs) if x.dtype not in _NP), None)
        if bad is not None:
            op_dtype(self.name, self._label(xs, bad), str(xs[bad].dtype).removeprefix("torch."),
                     "op(x.float(), ...).to(x.dtype)")
        return [(tuple(x.shape), _NP[x.dtype]) for x in xs]

    def _device(self, gs: Sequence[torch.Tensor], xs: Sequence[torch.Tensor],
                ys: Sequence[torch.Tensor] = ()) -> torch.device:
        """The one device of all the tensors, or a TorchDeviceError naming two that differ."""
        ts = [*xs, *gs, *ys]
        if all(t.is_cpu for t in ts):
            return _CPU
        if all(t.device == ts[0].device for t in ts):
            return ts[0].device if ts else torch.device("cpu")
        labels = [*(self._label(xs, k) for k in range(len(xs))),
                  *(f"cotangent {k}" for k in range(len(gs))),
                  *(f"saved output {k}" for k in range(len(ys)))]
        return _one_device(list(zip(labels, ts)), self.name)

    def _forward_fake(self, xs: list[torch.Tensor], wrt: list[bool]) -> list[torch.Tensor]:
        dev = self._device((), xs)  # a CPU tensor next to a meta one lands here: refuse it
        p = self._pullback(xs, wrt)
        self._counts[tuple([x.dim() for x in xs])] = len(p.outputs)
        outs = p.outputs + p.extra  # shaped by the te shapes over the inputs' (Sym)Ints
        shapes = self.core.out_shapes(self._specs(xs), outs)
        return [torch.empty(s, dtype=_torch_dtype(o.dtype), device=dev)
                for s, o in zip(shapes, outs, strict=True)]

    def _vjp_fake(self, gs: list[torch.Tensor], xs: list[torch.Tensor], ys: list[torch.Tensor],
                  wrt: list[bool]) -> list[torch.Tensor]:
        self._device(gs, xs, ys)
        return [torch.empty_like(x) for x, w in zip(xs, wrt) if w]

    def _forward(self, xs: list[torch.Tensor], wrt: list[bool]) -> list[torch.Tensor]:
        """The outputs, then the saved intermediates (the pullback's `extra`) that the
        gradients flagged in `wrt` read."""
        if _on_cuda(self._device((), xs), self.name):
            return self._cuda_call(xs, wrt, None, None)
        return self._plan(xs, wrt).forward(xs)  # checks the dtypes, naming the arguments

    def _vjp(self, gs: list[torch.Tensor], xs: list[torch.Tensor], ys: list[torch.Tensor],
             wrt: list[bool]) -> list[torch.Tensor]:
        """The gradients flagged in `wrt` (saved outputs and intermediates in `ys`)."""
        if _on_cuda(self._device(gs, xs, ys), self.name):
            return self._cuda_call(xs, wrt, gs, ys)
        p = (plan := self._plan(xs, wrt)).p
        heads = [_host(g) for g in gs]
        if any(g.shape != y.shape or g.dtype != y.dtype for g, y in zip(gs, ys)):  # else as is
            heads = self.core._heads(heads, p.outputs, shape_env(p.inputs, [x.shape for x in xs]))
        grads = plan.gradients([_host(t) for t in plan.p.reads(xs, ys)], list(heads), xs, wrt)
        return [g for g, w in zip(grads, wrt) if w]

    # -- CUDA (untested without a GPU) ------------------------------------------------------

    def _cuda_call(self, xs: list[torch.Tensor], wrt: list[bool], gs: list[torch.Tensor] | None,
                   ys: list[torch.Tensor] | None) -> list[torch.Tensor]:
        """Forward with residuals (gs None) or the `wrt` gradients on the GPU: the CPU
        pullback's graphs (outputs + extra; gradients over saved slots) built for CUDA."""
        p = self._pullback(xs, wrt)
        key = (tuple(self._specs(xs)), tuple(wrt))
        inst = self._cuda.get(key)
        if inst is None:
            inst = self._cuda[key] = [build(p.outputs + p.extra, p.inputs, "cuda"), None]
        if gs is not None and inst[1] is None and p.grads:
            params = [p.inputs[k] for k in p.input_positions] + p.slots + p.heads
            inst[1] = build(p.grads, params, "cuda")
        # Numba launches on the legacy default stream (handle 0): when torch runs on it too, stream
        # order is enough; on another torch stream, wait for it before and for Numba after
        stream = torch.cuda.current_stream(xs[0].device)
        ordered = stream.cuda_stream == 0
        if not ordered:
            stream.synchronize()
        if gs is None:
            args = [x.detach().contiguous() for x in xs]
            res = inst[0](*args)
        else:
            args = [a.detach().contiguous() for a in p.reads(xs, list(ys or ())) + list(gs)]
            res = inst[1](*args) if inst[1] is not None else ()
            res = [torch.zeros_like(x) if r is None else r.clone() if any(r is a for a in args)
                   else r for r, x, w in zip(p.spread(res, args), xs, wrt, strict=True) if w]
        if not ordered:
            cuda_runtime.synchronize()
        return [torch.as_tensor(r, device=xs[0].device) for r in res]


def custom_op(fn: Callable[..., Any], name: str, dynamic: bool = False,
              static_dims: Mapping[str, int | Sequence[int]] | None = None) -> TorchOp:
    """Turn a te function (placeholders in, te tensor or list of them out; see `ta.custom_op`)
    into a PyTorch operator with a derived backward, registered as `texpr_ad::<name>` (or
    `ns::name` when `name` has a namespace).  Kernels are built per shape, or with
    `dynamic=True` per rank and dtype (sizes bound at the call; `static_dims={"w": (0, 1)}` pins
    dims); under torch.compile's dynamic shapes the symbolic dims get one kernel for all sizes."""
    return TorchOp(fn, name, dynamic, static_dims)


# -- helpers ---------------------------------------------------------------------------------

def _host(x: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor of a kernel dtype (`_specs` checks), or a contiguous copy."""
    a = x.numpy(force=True)  # detached, the bits resolved
    return a if x.is_contiguous() else np.ascontiguousarray(a)


class _Eager(torch.autograd.Function):
    """The forward and backward ops' implementations as an autograd.Function: what an eager call
    on plain CPU or CUDA tensors records (torch.library's autograd wrapper costs about twice as
    much on the CPU; on CUDA tensors its two op calls cost about 0.5 ms a training step).  Its
    backward calls the backward op when a graph is built (create_graph: double backward)."""

    @staticmethod
    def forward(ctx: Any, op: TorchOp, plan: _Plan, wrt: list[bool], *xs: torch.Tensor) -> tuple:
        # the context as `_setup_context` sets it up, and the backward kernel's arrays (not
        # copies of non-contiguous inputs: the backward copies again rather than hold them)
        ctx.op, ctx.plan, ctx.n_in, ctx.n_out, ctx.wrt = op, plan, len(xs), plan.n_out, wrt
        ctx.reads = None
        if _on_gpu(xs):  # the CUDA kernels; the backward takes the general path below
            outs = op._forward(list(xs), wrt)
        else:
            arrays = [_host(x) for x in xs]
            res = plan.run(arrays)
            outs = [torch.from_numpy(r) for r in res]
            if all(x.is_contiguous() for x in xs):
                ctx.reads = plan.p.reads(arrays, res)
        if plan.fixed:
            ctx.mark_non_differentiable(*[outs[k] for k in plan.fixed])
        ctx.save_for_backward(*xs, *_stand_ins(outs, plan.unread))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *gs: Any) -> tuple:
        # saved_tensors raises if a tensor was modified in place since; the residuals'
        # cotangents are not read; the forward's arrays are not held after (retain_graph: a
        # second backward reads the saved tensors).  The general path: create_graph, a mode,
        # cotangents not shaped like their outputs (the bound kernel trusts them) or None
        saved, n, plan, gs = ctx.saved_tensors, ctx.n_in, ctx.plan, gs[: ctx.n_out]
        reads, ctx.reads = ctx.reads, None
        if torch.is_grad_enabled() or not _plain_eager(gs) or _on_gpu(gs) or not all(
                g.shape == y.shape and g.dtype == y.dtype for g, y in zip(gs, saved[n:])):
            grads = ctx.op._backward(ctx, gs)
            return (None, None, None, *(grads[:-1] if ctx.op._names else grads[0]))
        if reads is None:
            reads = [_host(t) for t in plan.p.reads(saved[:n], saved[n:])]
        return (None, None, None, *plan.gradients(reads, [_host(g) for g in gs], saved[:n],
                                                  ctx.wrt, bound=True, given=gs))


# `_Eager.apply` less its Python wrapper, which binds the arguments for a setup_context (there
# is none) and unwraps functorch's dead wrappers (`_plain_eager` let none through)
_eager = super(torch.autograd.Function, _Eager).apply


class _Plan:
    """One signature's (shapes, dtypes, wrt) pullback and what its CPU calls reuse: the outputs
    autograd must not differentiate (residuals, integer ones) and both kernels bound (`CpuKernel.bind`: `TorchOp._plan`'s memo key vouches for the
    inputs, `_Eager.backward` for the cotangents)."""

    def __init__(self, p: Pullback) -> None:
        self.p, self.n_out = p, len(p.outputs)
        outs = p.outputs + p.extra
        self.fixed = [k for k, t in enumerate(outs) if k >= self.n_out or t.dtype[0] != "f"]
        self.unread = [k for k in range(self.n_out) if k not in p.saved_at]  # by the backward
        self._fwd: Any = None
        self._bwd: Any = None

    def run(self, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """The forward kernel on the inputs' arrays (`_host`'s): outputs, saved intermediates."""
        self._fwd = self._fwd or self.p.forward_kernel.bind(arrays)
        return self._fwd(*arrays)

    def forward(self, xs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.from_numpy(r) for r in self.run([_host(x) for x in xs])]

    def gradients(self, reads: list[np.ndarray], heads: list[np.ndarray],
                  xs: Sequence[torch.Tensor], wrt: Sequence[bool], bound: bool = False,
                  given: Sequence[torch.Tensor] = ()) -> list[torch.Tensor | None]:
        """One gradient per input of the CPU tensors `xs`: those flagged in `wrt`, from the
        backward kernel's `reads` and the cotangents (checked unless `bound`), else None.  A
        gradient that is a cotangent unchanged (`Pullback.forwarded`) is its tensor in `given`
        (autograd's backward: as torch's add returns it), else a copy."""
        kern, args = self.p.backward_kernel, reads + heads
        if bound and kern is not None:
            kern = self._bwd = self._bwd or kern.bind(args)
        got = self.p.spread(kern(*args) if kern is not None else (), args)
        tensors = {id(h): t for h, t in zip(heads, given)}
        return [None if not w else torch.zeros_like(x) if g is None else tensors[id(g)]
                if id(g) in tensors else torch.from_numpy(g.copy() if any(g is a for a in args)
                                                          else g)
                for g, x, w in zip(got, xs, wrt, strict=True)]


def _stand_ins(ys: Sequence[torch.Tensor], unread: Sequence[int]) -> list[torch.Tensor]:
    """The forward's results as autograd saves them: an output the backward does not read is
    zeros of its shape (stride 0), so `out += x` after the op is no error, as for torch's ops."""
    return [y.new_zeros(()).expand(y.shape) if k in unread else y for k, y in enumerate(ys)]


def _registered_op(qualname: str) -> TorchOp:
    """The op `qualname` of this process (unpickling a TorchOp), or a TorchOpError."""
    if qualname not in _OPS:
        raise TorchOpError(f"cannot load the texpr_ad op {qualname!r}: it is not defined in this "
                           f"process; import the module that defines it (custom_op) first")
    return _OPS[qualname]


def _plain_eager(ts: Sequence[torch.Tensor]) -> bool:
    """Whether a call may skip the dispatcher (the per-call fast path): eager, tensors of the
    plain class or nn.Parameter (no FakeTensor, no functorch wrapper or transform) all on the
    CPU or all on one CUDA device, no torch function or dispatch mode, not tracing
    (torch.compile, torch.jit.trace), no profiler -- nothing would see the op."""
    return (not torch.compiler.is_compiling()  # first: torch.compile folds it, reads no more
            and not torch._C._len_torch_dispatch_stack()
            and not torch._C._autograd._profiler_enabled()
            and not torch._C._is_torch_function_mode_enabled()
            and not torch._C._get_tracing_state()
            and torch._C._functorch.peek_interpreter_stack() is None  # no vmap/grad transform
            and all(type(t) in _PLAIN and not torch._C._functorch.is_functorch_wrapped_tensor(t)
                    for t in ts)
            and _one_kernel_device(ts))


def _one_kernel_device(ts: Sequence[torch.Tensor]) -> bool:
    """All on the CPU, or all on one CUDA device that Numba can run kernels on."""
    if all(t.is_cpu for t in ts):
        return True
    dev = ts[0].device
    return dev.type == "cuda" and all(t.device == dev for t in ts) and \
        cuda_runtime.gpu_available()


def _on_gpu(ts: Sequence[torch.Tensor]) -> bool:
    """Whether tensors that passed `_plain_eager` are CUDA ones."""
    return bool(ts) and ts[0].is_cuda


def _batch_first(ts: Sequence[torch.Tensor], dims: Sequence[int | None]
                 ) -> tuple[list[torch.Tensor], list[bool]]:
    """The tensors with their vmap dim moved first, and which ones are batched."""
    return ([t if d is None else t.movedim(d, 0) for t, d in zip(ts, dims, strict=True)],
            [d is not None for d in dims])


def _broadcast(t: Tensor, size: Any) -> Tensor:
    """`t` repeated along a new leading axis of `size` (a batched op's unbatched output)."""
    return te.compute((size, *t.shape), lambda b, *i: t[i], name=f"{t.name}_b")


def _one_device(labelled: Sequence[tuple[str, torch.Tensor]], op: str) -> torch.device:
    """The device all the tensors are on, or a TorchDeviceError naming two that differ (as
    PyTorch's ops: no silent copy between devices)."""
    if not labelled:
        return torch.device("cpu")
    (w0, t0), *rest = labelled
    other = next(((w, t) for w, t in rest if t.device != t0.device), None)
    if other is not None:
        raise TorchDeviceError(f"{op}: expected all tensors on one device, but {other[0]} is on "
                               f"{other[1].device} and {w0} on {t0.device}; move them to one "
                               f"device, e.g. with .to({str(t0.device)!r})")
    return t0.device


def _on_cuda(dev: torch.device, op: str) -> bool:
    """Whether tensors on `dev` go to the CUDA kernels (CPU ones to the Numba CPU kernels)."""
    if dev.type not in ("cpu", "cuda"):
        raise TorchDeviceError(f"{op}: got tensors on {dev}; texpr_ad ops run on CPU and CUDA "
                               f"tensors (meta ones only give shapes): move them with .cpu()")
    if dev.type == "cuda" and not cuda_runtime.gpu_available():
        raise TorchDeviceError(f"{op}: got CUDA tensors, but Numba finds no usable GPU; move them "
                               f"to the CPU with .cpu(), or install the `cuda` extra (numba-cuda)")
    return dev.type == "cuda"


def _torch_dtype(d: str) -> torch.dtype:
    return getattr(torch, d)  # te dtype names are torch's


__all__ = ["OpArgumentError", "TorchDeviceError", "TorchOp", "TorchOpError", "custom_op"]

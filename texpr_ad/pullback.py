"""`vjp` (pullback kernels): a forward kernel that also returns residuals, and a backward kernel that reads them.

    fwd, bwd = ta.vjp([Y], [A, W])
    (y,), res = fwd(a, w)          # the outputs, and what the backward needs
    da, dw = bwd(res, dy)          # one cotangent per output; None for integer inputs
                                   # (integer outputs take a cotangent too, never read)
    fwd, bwd = ta.vjp([Y], [A, W], wrt=[A])   # only dA derived and built; dW is None

Which forward tensors are saved and which are recomputed in the backward is decided per
tensor by `schedule.residuals.choose` (outputs and reductions are saved; elementwise
stages are recomputed, softmax's exp rebuilt from the saved output and sum); `fwd.explain()` prints each decision with its reason.  The residuals
hold references to the arrays passed to `fwd` and to the outputs it returned: modifying them
in place before calling `bwd` changes the gradient, as it would in PyTorch without its
version counters.

An adjoint that is a cotangent unchanged (`dx = dy` of a residual add) is not computed: the
PyTorch front end returns that cotangent itself, as torch's add does; `bwd` returns a copy.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass
from typing import Any, Callable, Collection, NamedTuple, Sequence

import numpy as np

from . import te
from .deriv import GradientError, grad
from .errors import TexprError
from .kernels.cuda_runtime import is_device_array
from .kernels.kernel import no_keywords
from .schedule.residuals import Decision, choose, rebuilt
from .te import dtype as dt
from .te.dag import placeholders, replace_inputs
from .te.expr import Read, Var
from .te.tensor import ComputeOp, PlaceholderOp, Tensor


class ResidualsError(TexprError, TypeError):
    """A backward called with residuals from another vjp, or with the wrong cotangents."""


@dataclass(frozen=True)
class Residuals:
    """What one forward call saved for its backward: input arrays the backward recomputes
    from, and saved forward tensors (outputs and intermediates), in the backward's order."""

    owner: int  # id of the VJP that made them
    arrays: tuple[np.ndarray, ...]
    names: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        """Bytes held only for the backward: saved intermediates (not inputs or outputs)."""
        return sum(a.nbytes for a, n in zip(self.arrays, self.names, strict=True)
                   if n.startswith("saved "))


class Pullback:
    """The derivation of one vjp: cotangent placeholders, adjoints, the residual decisions and
    the backward graph over the saved tensors; both kernels are built on first use."""

    def __init__(self, outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu",
                 save: str | Collection[str] = "auto", wrt: Collection[int] | None = None,
                 on_build: Callable[[], None] | None = None) -> None:
        self.on_build = on_build  # called before each kernel is built (CustomOp.builds counts)
        self.outputs, self.inputs, self.target = list(outputs), list(inputs), target
        self.heads = [te.placeholder(o.shape, o.dtype, name=f"d{o.name}") for o in self.outputs]
        # only the adjoints asked for (positions `wrt`, default all) are derived; integer
        # outputs are not differentiated: their cotangents are taken and not read
        self.wrt = tuple(range(len(self.inputs)) if wrt is None else sorted(set(wrt)))
        diff = [k for k, o in enumerate(self.outputs) if dt.is_float(o.dtype)]
        some = grad([self.outputs[k] for k in diff], [self.inputs[k] for k in self.wrt],
                    head=[self.heads[k] for k in diff]) if diff and self.wrt else []
        by_pos = dict(zip(self.wrt, some))
        self.adjoints = [by_pos.get(k) for k in range(len(self.inputs))]
        live = [a for a in self.adjoints if a is not None]
        self.decisions = choose(self.outputs, live, self.heads, save)
        self.saved = [d.tensor for d in self.decisions if d.save]
        self.extra = [t for t in self.saved if all(t is not o for o in self.outputs)]
        results = self.outputs + self.extra  # the forward kernel's; each saved one's place in them
        self.saved_at = [next(k for k, o in enumerate(results) if o is t) for t in self.saved]
        self.slots = [te.placeholder(t.shape, t.dtype, name=f"saved_{t.name}") for t in self.saved]
        images = dict(zip(self.saved, self.slots, strict=True))
        for d in self.decisions:  # elementwise tensors rebuilt from saved ones (softmax's exp)
            if d.rebuild is not None:
                images[d.tensor] = rebuilt(d, images)
        self.grads = replace_inputs(live, images)
        read = {id(p) for p in placeholders(self.grads)}
        self.input_positions = [k for k, x in enumerate(self.inputs) if id(x) in read]
        # symbolic dims (te.var) only an unread input carries (a bias's gradient is shaped by
        # the bias): the backward takes that input too, to bind them from its shape
        known = {d for k in self.input_positions for d in self.inputs[k].shape} | {
            d for t in self.slots + self.heads for d in t.shape}
        self.input_positions = sorted({*self.input_positions, *(
            k for k, x in enumerate(self.inputs)
            if any(isinstance(d, Var) and d not in known for d in x.shape))})
        self.params = [self.inputs[k] for k in self.input_positions] + self.slots + self.heads
        self.forwarded = {i: next(j for j, x in enumerate(self.params) if x is t) for i, g
                          in enumerate(self.grads) if (t := forwarded(g)) is not None
                          and any(x is t for x in self.params)}  # grad -> the argument it is
        self._fwd: Any = None
        self._bwd: Any = None

    @property
    def forward_kernel(self) -> Any:
        """Inputs -> outputs, then the saved tensors that are not outputs (`extra`)."""
        if self._fwd is None:
            from .kernels import build
            if self.on_build:
                self.on_build()
            self._fwd = build(self.outputs + self.extra, self.inputs, self.target)
        return self._fwd

    @property
    def backward_kernel(self) -> Any:
        """Read inputs, saved tensors, cotangents -> the live gradients that are not one of
        them unchanged (`forwarded`; None if none are left)."""
        grads = [g for i, g in enumerate(self.grads) if i not in self.forwarded]
        if self._bwd is None and grads:
            from .kernels import build
            if self.on_build:
                self.on_build()
            self._bwd = build(grads, self.params, self.target)
        return self._bwd

    def residuals(self, arrays: Sequence[Any], outs: Sequence[Any], extra: Sequence[Any]) -> Residuals:
        """The residuals of one forward call: its input arrays, outputs and extra saved arrays."""
        return Residuals(id(self), tuple(self.reads(arrays, [*outs, *extra])), self.residual_names)

    def reads(self, arrays: Sequence[Any], results: Sequence[Any]) -> list[Any]:
        """The backward kernel's arrays before the cotangents, of a forward call's `results`."""
        return [arrays[k] for k in self.input_positions] + [results[k] for k in self.saved_at]

    def spread(self, grads: Sequence[Any], args: Sequence[Any]) -> tuple[Any | None, ...]:
        """The backward kernel's results on `args` as one entry per input (None: not derived),
        a forwarded gradient the argument itself."""
        got = iter(grads)
        live = iter([args[self.forwarded[i]] if i in self.forwarded else next(got)
                     for i in range(len(self.grads))])
        return tuple(None if a is None else next(live) for a in self.adjoints)

    @functools.cached_property
    def residual_names(self) -> tuple[str, ...]:
        outs = {id(o) for o in self.outputs}
        return tuple([f"input {self.inputs[k].name}" for k in self.input_positions]
                     + [f"{'output' if id(t) in outs else 'saved'} {t.name}" for t in self.saved])

    def forward(self, *arrays: Any) -> tuple[tuple[Any, ...], Residuals]:
        res = self.forward_kernel(*arrays)
        n = len(self.outputs)
        # device arrays stay as they are (np.asarray would copy them to the host, and the
        # backward would copy them back)
        kept = [a if is_device_array(a) else np.asarray(a) for a in arrays]
        return tuple(res[:n]), self.residuals(kept, res[:n], res[n:])

    def backward(self, res: Residuals, *heads: Any) -> tuple[Any | None, ...]:
        if not isinstance(res, Residuals) or res.owner != id(self):
            raise ResidualsError(f"backward takes the residuals returned by this vjp's forward "
                                 f"(`outs, res = fwd(...)`), got {type(res).__name__}")
        if len(heads) != len(self.heads):
            raise ResidualsError(f"backward got {len(heads)} cotangent(s) for {len(self.heads)} "
                                 f"output(s) ({', '.join(o.name for o in self.outputs)}); pass "
                                 f"one per output, shaped like it")
        kern, args = self.backward_kernel, [*res.arrays, *heads]
        got = self.spread(kern(*args) if kern is not None else (), args)
        return tuple(g.copy() if any(g is a for a in args) else g for g in got)  # type: ignore[union-attr]

    def explain(self) -> str:
        lines = [f"residuals of vjp({', '.join(o.name for o in self.outputs)}):"]
        lines += [f"  {d}" for d in self.decisions] or ["  (the backward reads no forward tensor)"]
        if self.input_positions:
            lines.append("  inputs read by the backward: "
                         + ", ".join(self.inputs[k].name for k in self.input_positions))
        return "\n".join(lines)


class Forward:
    """`fwd(*arrays)`: `(outputs, residuals)`; `fwd.explain()` prints the residual decisions."""

    def __init__(self, pullback: Pullback) -> None:
        self.pullback = pullback

    def __call__(self, *arrays: Any, **keywords: Any) -> tuple[tuple[Any, ...], Residuals]:
        if keywords:
            no_keywords(keywords, self.pullback.inputs, "the vjp's forward")
        return self.pullback.forward(*arrays)

    def explain(self) -> str:
        return self.pullback.explain()

    @property
    def kernel(self) -> Any:
        return self.pullback.forward_kernel


class Backward:
    """`bwd(residuals, *cotangents)`: one gradient per input (None for integer inputs)."""

    def __init__(self, pullback: Pullback) -> None:
        self.pullback = pullback

    def __call__(self, res: Residuals, *heads: Any, **keywords: Any) -> tuple[Any | None, ...]:
        if keywords:
            no_keywords(keywords, self.pullback.outputs, "the vjp's backward",
                        "the residuals, then one cotangent per output")
        return self.pullback.backward(res, *heads)

    def explain(self) -> str:
        return self.pullback.explain()

    @property
    def kernel(self) -> Any:
        return self.pullback.backward_kernel


class VJP(NamedTuple):
    """`fwd, bwd = ta.vjp(...)`: the forward (outputs and residuals) and the backward."""

    forward: Forward
    backward: Backward

    @property
    def decisions(self) -> list[Decision]:
        return self.forward.pullback.decisions

    def explain(self) -> str:
        return self.forward.explain()


def vjp(outputs: Tensor | Sequence[Tensor], inputs: Sequence[Tensor], target: str = "cpu",
        save: str | Collection[str] = "auto", wrt: Sequence[Tensor] | None = None) -> VJP:
    """Build `fwd, bwd` for `outputs` as functions of the placeholders `inputs`.

    `fwd(*arrays)` returns `(outputs, residuals)`; `bwd(residuals, *cotangents)` returns one
    gradient per input.  `save` is "auto" (the rule table of `schedule.residuals`), "none"
    (recompute everything from the inputs), "all", or the names of the forward tensors to save.
    `wrt` (some of `inputs`) derives and builds only their gradients; the others are None.
    """
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = list(inputs)
    p = Pullback(outs, inputs, target, save, None if wrt is None else _positions(wrt, inputs))
    p.forward_kernel, p.backward_kernel  # build both now: errors surface here, not at the first call
    return VJP(Forward(p), Backward(p))


def _positions(wrt: Sequence[Tensor], inputs: Sequence[Tensor]) -> list[int]:
    """The positions in `inputs` of the placeholders `wrt`, or a GradientError naming one that
    is not an input."""
    if isinstance(wrt, Tensor):
        wrt = [wrt]
    ids = {id(x): k for k, x in enumerate(inputs)}
    bad = next((w for w in wrt if id(w) not in ids), None)
    if bad is not None:
        raise GradientError(f"vjp: wrt= names {getattr(bad, 'name', bad)!r}, which is not one of "
                             f"the inputs ({', '.join(x.name for x in inputs)}); pass some of the "
                             f"inputs' placeholders")
    return [ids[id(w)] for w in wrt]


def forwarded(g: Tensor) -> Tensor | None:
    """The placeholder `g` copies unchanged (read at g's own axes; same shape, dtype), or None."""
    op = g.op
    b = op.body[0] if isinstance(op, ComputeOp) and len(op.body) == 1 else None
    if not isinstance(b, Read) or not isinstance(b.tensor.op, PlaceholderOp) or b.dtype != g.dtype:
        return None
    axes = op.axis  # type: ignore[union-attr]
    same = len(b.indices) == len(axes) == len(b.tensor.shape) and all(
        i is a for i, a in zip(b.indices, axes)) and all(
        x.same_as(y) for x, y in zip(b.tensor.shape, g.shape))
    return b.tensor if same else None

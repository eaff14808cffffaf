"""Capture the `tvm.te` computation a Relax op call legalizes to (TVM 0.27).

`relax.transform.LegalizeOps` runs an op's `FLegalize(bb, call)`, which calls
`bb.call_te(topi_fn, *args)`, which goes through `tvm.relax.utils.gen_call_tir_inputs`
(imported by name into `relax.block_builder` and `relax.transform.legalize_ops.manipulate`).
`capture(call)` runs the legalization on a scratch BlockBuilder with that function wrapped,
so the te function's outputs are recorded, and then checks that the result is pure te:
exactly one te call, only `ComputeOp`s and Relax placeholders in its DAG, and every
placeholder fed by an expression of the call's own arguments (helper bindings such as
`index_tensor`'s `TupleGetItem`s are resolved through the scratch block).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import TexprError


class NotDerivable(TexprError, ValueError):
    """An op call whose legalization is not pure te; `reason` says what it is instead."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(f"{op}: {reason}; its gradient cannot be derived from te")
        self.op = op
        self.reason = reason


@dataclass
class Capture:
    """The te DAG of one legalized call."""

    op: str
    outputs: list[Any]   # tvm.te tensors the te function returned
    inputs: list[Any]    # the tvm.te placeholders they read (Relax placeholders)
    values: list[Any]    # per input: the Relax expression (over the call's arguments) feeding it
    multi: bool          # the te function returned a list (Relax tuple output)


_MODULES = ("tvm.relax.utils", "tvm.relax.block_builder",
            "tvm.relax.transform.legalize_ops.manipulate")


@contextlib.contextmanager
def _recording() -> Iterator[list[Any]]:
    """Wrap `gen_call_tir_inputs` wherever it was imported; yields the list of te results."""
    import importlib
    mods = [importlib.import_module(m) for m in _MODULES]
    real = mods[0].gen_call_tir_inputs
    record: list[Any] = []

    def wrapped(func: Any, *args: Any, **kwargs: Any) -> Any:
        def te_func(*a: Any, **k: Any) -> Any:
            out = func(*a, **k)
            record.append(out)
            return out

        te_func.__name__ = getattr(func, "__name__", "te_func")
        return real(te_func, *args, **kwargs)

    saved = [m.gen_call_tir_inputs for m in mods]
    for m in mods:
        m.gen_call_tir_inputs = wrapped
    try:
        yield record
    finally:
        for m, fn in zip(mods, saved, strict=True):
            m.gen_call_tir_inputs = fn


def te_stages(outputs: list[Any]) -> list[Any]:
    """Every tvm.te operation reachable from `outputs` (producers first)."""
    seen: dict[Any, None] = {}

    def visit(op: Any) -> None:
        if op in seen:
            return
        for t in getattr(op, "input_tensors", []):
            visit(t.op)
        seen[op] = None

    for t in outputs:
        visit(t.op)
    return list(seen)


def _resolve(e: Any, bindings: dict[Any, Any], op: str) -> Any:
    """`e` with scratch-block variables replaced by their bound values."""
    import tvm
    from tvm import relax
    if isinstance(e, relax.Var) and e in bindings:
        return _resolve(bindings[e], bindings, op)
    if isinstance(e, relax.TupleGetItem):
        return relax.TupleGetItem(_resolve(e.tuple_value, bindings, op), e.index)
    if isinstance(e, relax.Tuple):
        return relax.Tuple([_resolve(x, bindings, op) for x in e.fields])
    if isinstance(e, (relax.Var, tvm.ir.expr.GenericConst)):
        return e
    raise NotDerivable(op, f"its legalization computes a te input with Relax helpers ({e.op})"
                       if isinstance(e, relax.Call) else
                       f"its legalization feeds te a {type(e).__name__}")


def capture(call: Any) -> Capture:
    """The te computation `call` legalizes to; raises `NotDerivable` when it is not pure te."""
    import tvm
    from tvm import relax, te as tvm_te
    op = str(call.op.name)
    leg = tvm.ir.Op.get(op).get_attr("FLegalize")
    if leg is None:
        raise NotDerivable(op, "it has no legalization (FLegalize)")
    bb = relax.BlockBuilder()
    bb._begin_dataflow_block()  # legalizations may emit helper bindings
    try:
        with _recording() as record:
            result = leg(bb, call)
    except Exception as e:  # noqa: BLE001 - a TVM legalization failure, reported per op
        first = (str(e).strip().splitlines() or [""])[-1][:160]
        raise NotDerivable(op, f"its legalization fails in TVM ({type(e).__name__}: {first})") \
            from e
    finally:
        block = bb._end_block()
    if len(record) != 1:
        raise NotDerivable(op, "it does not legalize to te" if not record else
                           f"its legalization makes {len(record)} te calls")
    if not (isinstance(result, relax.Call) and str(getattr(result.op, "name", "")) ==
            "relax.call_tir"):
        raise NotDerivable(op, f"its legalization wraps te in {type(result).__name__} "
                           f"{getattr(getattr(result, 'op', None), 'name', '')}".rstrip())
    res = record[0]
    multi = isinstance(res, (list, tuple)) or type(res).__name__ == "Array"
    outputs = list(res) if multi else [res]
    inputs, values = [], []
    bindings = {bd.var: bd.value for bd in block.bindings}
    for stage in te_stages(outputs):
        if isinstance(stage, relax.expr.TEPlaceholderOp):
            inputs.append(stage.output(0))
            values.append(_resolve(stage.value, bindings, op))
        elif isinstance(stage, tvm_te.ExternOp):
            raise NotDerivable(op, f"its legalization uses te.extern ({stage.name})")
        elif not isinstance(stage, tvm_te.ComputeOp):
            raise NotDerivable(op, f"its legalization uses a {type(stage).__name__}")
    return Capture(op, outputs, inputs, values, multi)


__all__ = ["Capture", "NotDerivable", "capture", "te_stages"]

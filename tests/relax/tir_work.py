"""The work of a TIR PrimFunc as TVM will run it: how many times its block bodies execute.

Each `For` contributes its extent, evaluated at the enclosing loop indices; a loop whose index a
loop inside it depends on (a reduce window that moves with the output index, a gated extent
`if_then_else(c, E, 0)`) is enumerated, every other one multiplies.  A block with loops in its
body (a `te.extern` scatter) counts its innermost statements.
"""
from __future__ import annotations

from typing import Any

import tvm
import tvm.s_tir
from tvm import tirx


def _value(e: Any, env: dict[Any, int]) -> int:
    a = tvm.sym.Analyzer()
    for v, x in env.items():
        a.bind(v, x)
    return int(a.simplify(e))


def _uses(vars_: list[Any], v: Any) -> bool:
    return any(v.same_as(u) for u in vars_)


def _bound_by(s: Any) -> list[Any]:
    """The variables the bounds of the loops in `s` use (through block bindings)."""
    if isinstance(s, tirx.For):
        return [*tirx.analysis.undefined_vars(s.min), *tirx.analysis.undefined_vars(s.extent),
                *_bound_by(s.body)]
    if isinstance(s, tirx.SeqStmt):
        return [v for x in s.seq for v in _bound_by(x)]
    if isinstance(s, tvm.s_tir.SBlockRealize):
        inner = _bound_by(s.block.body)
        return inner + [u for iv, x in zip(s.block.iter_vars, s.iter_values, strict=True)
                        if _uses(inner, iv.var) for u in tirx.analysis.undefined_vars(x)]
    return _bound_by(s.body) if hasattr(s, "body") else []


def _work(s: Any, env: dict[Any, int]) -> int:
    if isinstance(s, tirx.For):
        ext = _value(s.extent, env)
        if not _uses(_bound_by(s.body), s.loop_var):
            return ext * _work(s.body, env)
        lo = _value(s.min, env)
        return sum(_work(s.body, {**env, s.loop_var: lo + i}) for i in range(ext))
    if isinstance(s, tirx.SeqStmt):
        return sum(_work(x, env) for x in s.seq)
    if isinstance(s, tvm.s_tir.SBlockRealize):
        inner = _bound_by(s.block.body)
        env = {**env, **{iv.var: _value(x, env)
                         for iv, x in zip(s.block.iter_vars, s.iter_values, strict=True)
                         if _uses(inner, iv.var)}}
        return _work(s.block.body, env)
    return _work(s.body, env) if hasattr(s, "body") else 1


def tir_work(f: tirx.PrimFunc) -> int:
    """Block-body executions of `f` (static shapes)."""
    return _work(f.body, {})

"""Readable, re-evaluable printing of expressions and tensor DAGs (te-like Python)."""
from __future__ import annotations

import math

from .expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind, Var
from .ops import ATOM_PRECEDENCE, COMPARE, INFIX, PRECEDENCE, UNARY_PRECEDENCE, Op

_FUNC = {Op.MIN: "min", Op.MAX: "max", Op.SELECT: "if_then_else", Op.NOT: "logical_not"}


def _const(c: Const) -> str:
    v = c.value
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if math.isnan(v):
            return "nan"
        return repr(v)
    if c.dtype in ("int32", "bool"):
        return repr(v)
    return f'const({v!r}, "{c.dtype}")'


def _prec(e: Expr) -> int:
    if isinstance(e, Call):
        if e.op in PRECEDENCE:
            return PRECEDENCE[e.op]
        if e.op is Op.NEG:
            return UNARY_PRECEDENCE
    if isinstance(e, Const) and isinstance(e.value, (int, float)) and e.value < 0:
        return UNARY_PRECEDENCE
    return ATOM_PRECEDENCE


def _typed(e: Expr, siblings: tuple[Expr, ...], memo: dict[int, str]) -> str:
    """A constant prints bare when a sibling fixes its dtype (or it is int32/float32/bool)."""
    if isinstance(e, Const) and e.dtype not in ("int32", "float32", "bool") and not any(
            not isinstance(s, Const) and s.dtype == e.dtype for s in siblings if s is not e):
        v = e.value
        return f'const({v!r}, "{e.dtype}")' if not isinstance(v, float) or math.isfinite(v) \
            else f'const(float("{v}"), "{e.dtype}")'
    return memo[id(e)]


def expr_str(e: Expr) -> str:
    """`e` as te-like Python; iterative (children first), so any depth prints."""
    from .visit import walk
    memo: dict[int, str] = {}
    for x in walk(e):
        memo[id(x)] = _node_str(x, memo)
    return memo[id(e)]


def _node_str(e: Expr, memo: dict[int, str]) -> str:
    """One node, its children already printed in `memo` (by id)."""
    match e:
        case Const():
            return _const(e)
        case Var(name=n) | IterVar(name=n):
            return n
        case Read(tensor=t, indices=idx):
            return f"{t.name}[{', '.join(memo[id(i)] for i in idx) if idx else '()'}]"
        case Reduce():
            return _reduce_str(e, memo)
        case Call(op=op, args=args):
            if op in INFIX:
                p = PRECEDENCE[op]
                a, b = args
                # left-assoc: right operand needs parens at equal precedence (except ** which is right-assoc)
                sa = _paren(a, p + (1 if op is Op.POW else 0), memo, args)
                if op in COMPARE and isinstance(a, Const) and not isinstance(b, Const):
                    sa = f'const({a.value!r}, "{a.dtype}")'  # `0 <= x` would reflect to x >= 0
                sb = _paren(b, p + (0 if op is Op.POW else 1), memo, args)
                return f"{sa} {INFIX[op]} {sb}"
            if op is Op.NEG:
                return f"-{_paren(args[0], UNARY_PRECEDENCE, memo)}"
            if op is Op.CAST:
                if isinstance(args[0], Const):
                    return f'const({args[0].value!r}, "{e.dtype}")'
                return f'{_paren(args[0], ATOM_PRECEDENCE, memo)}.astype("{e.dtype}")'
            name = _FUNC.get(op, op.name.lower())
            sib = args[1:] if op is Op.SELECT else args
            return f"{name}({', '.join(_typed(a, sib, memo) for a in args)})"
    return f"<{type(e).__name__}>"


def _paren(e: Expr, need: int, memo: dict[int, str], siblings: tuple[Expr, ...] = ()) -> str:
    s = _typed(e, siblings, memo)
    return f"({s})" if _prec(e) < need else s


def _axes_str(axes: tuple[IterVar, ...]) -> str:
    names = [a.name for a in axes]
    return names[0] if len(names) == 1 else f"[{', '.join(names)}]"


def _reduce_str(r: Reduce, memo: dict[int, str]) -> str:
    kind = r.combiner.kind
    src = memo[id(r.source[0])] if len(r.source) == 1 else \
        f"({', '.join(memo[id(s)] for s in r.source)})"
    extra = ""
    if not (isinstance(r.condition, Const) and r.condition.value is True):
        extra += f", where={memo[id(r.condition)]}"
    if r.init:
        extra += f", init={', '.join(memo[id(i)] for i in r.init)}"
    name = kind.value if kind is not ReduceKind.CUSTOM else (r.combiner.name or "reducer")
    s = f"{name}({src}, axis={_axes_str(r.axis)}{extra})"
    return s if len(r.source) == 1 else f"{s}[{r.value_index}]"


def _upper(a: IterVar) -> Expr:
    """The exclusive upper bound lo + extent, read back from `max(hi - lo, 0)` when possible."""
    from .affine import from_affine, to_affine
    if isinstance(a.lo, Const) and a.lo.value == 0:
        return a.extent
    ext = a.extent
    if isinstance(ext, Call) and ext.op is Op.MAX and isinstance(ext.args[1], Const) and ext.args[1].value == 0:
        ext = ext.args[0]
    f = to_affine(Call(Op.ADD, (ext, a.lo), ext.dtype))
    return a.lo + a.extent if f is None else from_affine(f[0], f[1], ext.dtype)


def _shape(shape: tuple[Expr, ...]) -> str:
    inner = ", ".join(expr_str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def stage_str(t: object) -> str:
    """One stage (the op producing tensor `t`) as te code."""
    from .tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor
    assert isinstance(t, Tensor)
    op = t.op
    if isinstance(op, PlaceholderOp):
        return f'{op.name} = placeholder({_shape(op.shape)}, "{op.dtype}", name="{op.name}")'
    lines = []
    if isinstance(op, ComputeOp):
        raxes = op.all_reduce_axes
        for a in raxes:
            hi = _upper(a)
            lines.append(f'{a.name} = reduce_axis(({expr_str(a.lo)}, {expr_str(hi)}), name="{a.name}")')
        params = " " + ", ".join(a.name for a in op.axis) if op.axis else ""
        body = expr_str(op.body[0]) if len(op.body) == 1 else f"[{', '.join(map(expr_str, op.body))}]"
        names = op.name if len(op.body) == 1 else ", ".join(
            op.name if k == 0 else f"{op.name}_v{k}" for k in range(len(op.body)))
        lines.append(f'{names} = compute({_shape(tuple(a.extent for a in op.axis))}, '
                     f'lambda{params}: {body}, name="{op.name}")')
    elif isinstance(op, ScatterOp):
        dom = ", ".join(f"{a.name} in range({expr_str(a.extent)})" for a in op.axis)
        lines.append(f"{op.name} = scatter_add({_shape(op.shape)}, \"{op.dtype}\")  # for {dom}:")
        for u in op.updates:
            cond = "" if isinstance(u.condition, Const) else f" if {expr_str(u.condition)}"
            lines.append(f"#     {op.name}[{', '.join(map(expr_str, u.index))}] += "
                         f"{expr_str(u.value)}{cond}")
    return "\n".join(lines)


def tensor_str(t: object, include_inputs: bool = False) -> str:
    """All stages that `t` depends on, inputs first (placeholders only if asked)."""
    from .dag import topo_order
    from .tensor import PlaceholderOp
    out, seen_ops = [], set()
    for s in topo_order([t]):  # type: ignore[list-item]
        if id(s.op) in seen_ops or (isinstance(s.op, PlaceholderOp) and not include_inputs):
            continue
        seen_ops.add(id(s.op))
        out.append(stage_str(s))
    return "\n".join(out)

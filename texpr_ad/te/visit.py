"""Generic traversal of expressions: children, rebuild, bottom-up rewrite, substitution."""
from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, Iterator, Mapping, Sequence, TypeVar

from .expr import Call, Expr, IterVar, Read, Reduce, Var


def children(e: Expr) -> tuple[Expr, ...]:
    match e:
        case Call(args=args):
            return args
        case Read(indices=idx):
            return idx
        case Reduce():
            return e.source + (e.condition,) + e.init
    return ()


def rebuild(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`e` with its children replaced by `kids` (returns `e` itself when nothing changed)."""
    if all(a is b for a, b in zip(children(e), kids, strict=True)):
        return e
    match e:
        case Call():
            return Call(e.op, kids, e.dtype)
        case Read():
            return Read(e.tensor, kids, e.dtype)
        case Reduce():
            n = len(e.source)
            return Reduce(e.combiner, kids[:n], e.axis, kids[n], e.value_index, e.dtype, kids[n + 1:])
    return e


N = TypeVar("N")
R = TypeVar("R")


def fold(root: N, operands: Callable[[N], Sequence[N]], combine: Callable[[N, list[R]], R],
         key: Callable[[Any], Hashable] = id) -> R:
    """`combine(node, [the results of its operands])` bottom-up from the leaves to `root`, each
    distinct node (by `key`) once.  Iterative (an explicit stack), so the depth of `root` is not
    bounded by Python's recursion limit.  Every walker over te or TVM expressions uses it."""
    memo: dict[Hashable, R] = {}
    keep = [root]  # nodes keyed by identity stay alive while `memo` is used
    stack: list[tuple[N, bool]] = [(root, False)]
    while stack:
        x, ready = stack.pop()
        if key(x) in memo:
            continue
        kids = operands(x)
        if kids and not ready:
            keep += kids
            stack.append((x, True))
            stack += [(k, False) for k in reversed(kids) if key(k) not in memo]
            continue
        memo[key(x)] = combine(x, [memo[key(k)] for k in kids])
    return memo[key(root)]


def transform(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rewrite bottom-up: children first, then `fn` on the rebuilt node (None keeps it).

    Iterative (an explicit stack), so expression depth is not bounded by Python's recursion
    limit; each distinct node (by identity) is rewritten once."""
    def image(x: Expr, kids: list[Expr]) -> Expr:
        y = rebuild(x, tuple(kids))
        r = fn(y)
        return y if r is None else r
    return fold(e, children, image)


# Var / IterVar leaf -> its replacement (keys Any: a dict's key type is invariant, and callers
# hold dict[IterVar, IterVar], dict[Var, Expr], ...)
Subst = Mapping[Any, Expr]


def substitute(e: Expr, mapping: Subst) -> Expr:
    """Replace variables (Var / IterVar leaves) by expressions, inside reduce-axis bounds too."""
    if not mapping:
        return e

    def fn(x: Expr) -> Expr | None:
        if isinstance(x, (Var, IterVar)):
            return mapping.get(x)
        if isinstance(x, Reduce):
            return _rebind_axes(x, mapping)
        return None

    return transform(e, fn)


def _rebind_axes(red: Reduce, mapping: Subst) -> Reduce | None:
    """New reduce axes when `mapping` changes their bounds (the body already has `mapping` applied)."""
    return rebind_bounds(red, lambda b, amap: substitute(b, {**mapping, **amap}))


def rebind_bounds(red: Reduce, fn: Callable[[Expr, Subst], Expr]) -> Reduce | None:
    """`red` over new axes whose bounds are `fn(bound, rebuilt)` (None when no bound changes);
    `rebuilt` maps the earlier axes of the same reduction to their new selves, for an axis
    whose bounds use an earlier one."""
    amap: dict[IterVar, IterVar] = {}
    for a in red.axis:
        amap[a] = IterVar(a.name, fn(a.lo, amap), fn(a.extent, amap), a.kind)
    axes = tuple(amap[a] for a in red.axis)
    if all(n.lo is a.lo and n.extent is a.extent for n, a in zip(axes, red.axis, strict=True)):
        return None
    return Reduce(red.combiner, tuple(substitute(s, amap) for s in red.source), axes,
                  substitute(red.condition, amap), red.value_index, red.dtype,
                  tuple(substitute(i, amap) for i in red.init))


def walk(e: Expr) -> Iterator[Expr]:
    """Every distinct node of `e`, children before parents."""
    seen: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        x, done = stack.pop()
        if done:
            yield x
            continue
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.append((x, True))
        stack.extend((c, False) for c in reversed(children(x)))


def free_vars(e: Expr) -> list[Var | IterVar]:
    """Variables used in `e`, in first-use order, excluding the axes `e`'s reductions bind."""
    bound: set[IterVar] = set()
    out: dict[Var | IterVar, None] = {}
    for x in walk(e):
        if isinstance(x, Reduce):
            bound.update(x.axis)
        elif isinstance(x, (Var, IterVar)):
            out[x] = None
    for x in walk(e):  # variables inside symbolic extents of reduce axes
        if isinstance(x, Reduce):
            for ax in x.axis:
                for v in list(walk(ax.lo)) + list(walk(ax.extent)):
                    if isinstance(v, (Var, IterVar)):
                        out[v] = None
    return [v for v in out if v not in bound]


def reads(e: Expr) -> list[Read]:
    return [x for x in walk(e) if isinstance(x, Read)]


def reads_in(exprs: Iterable[Expr], axes: Iterable[IterVar] = ()) -> Iterator[Read]:
    """Every read that evaluating `exprs` over `axes` does, those in the bounds of `axes` and of
    the reductions' axes included (`reduce_axis((0, L[i]))` reads L); `walk` sees the bodies only."""
    todo = [*exprs, *(b for a in axes for b in (a.lo, a.extent))]
    while todo:
        for x in walk(todo.pop(0)):
            if isinstance(x, Read):
                yield x
            elif isinstance(x, Reduce):
                todo += [b for a in x.axis for b in (a.lo, a.extent)]


def bounds_depend_on_axes(axis: IterVar) -> bool:
    """Whether the range of `axis` uses a loop axis (`reduce_axis((0, i + 1))`, a window
    `[i - 2, i + 2)`): such an axis cannot be flattened or split off its enclosing loops."""
    return any(isinstance(v, IterVar) for e in (axis.lo, axis.extent) for v in walk(e))

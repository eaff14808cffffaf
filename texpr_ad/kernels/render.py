"""Render a `Plan` to Python source text (pure: no numba import, no decisions).

The scheduler decides; this module only spells the decisions out.  Backends
subclass `Renderer` and differ in its tables (STYLE rule 14): the header and
decorators, the parallel outer loop, the scatter accumulation.  Expressions are
rendered by `EXPR_RULES`, one entry per `Op`.

Names in the generated code come from the stage, tensor and axis names, made
unique with numeric suffixes in order of first use, so the same DAG always
gives byte-identical source.
"""
from __future__ import annotations

import keyword
import math
import re
from abc import ABC, abstractmethod
from typing import Callable, Collection, Iterator, Sequence


from ..te import dtype as dt
from ..te.expr import Call, CommReducer, Const, Expr, IterVar, Read, Reduce, Var, always, is_zero
from ..te.ops import Op
from ..te.bounds import Verdict, dead, dim_verdict, facts
from ..te.printer import expr_str
from ..te.tensor import ScatterUpdate, Tensor
from ..te.visit import children, walk
from ..schedule.plan import ComputeStage, Plan, ScatterStage, Stage, wide_sum
from ..schedule.stageloops import Bind, Fold, For, Store, reduce_groups

KERNEL_NAME = "texpr_kernel"
NEST_LIMIT = 24  # deeper subexpressions are bound to locals (Python's parser stops at 200 parens)
SHARE_MIN = 80  # a repeated subexpression longer than this is bound to a local once
COSTLY = frozenset(o for o in Op if o.name in (  # ... as is one holding a math call
    "EXP", "LOG", "LOG1P", "SQRT", "RSQRT", "TANH", "POW", "ERF", "SIGMOID", "SIN", "COS"))
CHECK_NAME = "_chk"
ERR_NAME = "err"
WIDE_ZERO = "np.float64(0.0)"  # a wide sum's float64 accumulator starts here (plan.wide_sum)


def check_call(i: str, n: str, site: int) -> str:
    """A call of the CPU bounds-check helper.  The site number goes in as `np.int64(k)`, not a
    literal: Numba compiles one specialization of the helper per literal argument value
    (measured: about 0.1 s of cold compile per extra site)."""
    return f"{CHECK_NAME}({i}, {n}, {ERR_NAME}, np.int64({site}))"

# -- expressions: one rule per Op --------------------------------------------------------

Rule = Callable[[Call, list[str]], str]


def _infix(sym: str) -> Rule:
    return lambda e, a: f"({a[0]} {sym} {a[1]})"


def _fn(name: str) -> Rule:
    return lambda e, a: f"{name}({', '.join(a)})"


def one_literal(dtype: str) -> str:
    return f"np.{dtype}(1.0)" if dtype != "float64" else "1.0"


def _float_or_int(on_float: Rule, on_int: Rule) -> Rule:
    return lambda e, a: (on_float if dt.is_float(e.dtype) else on_int)(e, a)


def _cast(e: Call, a: list[str]) -> str:
    if e.dtype == "bool":
        return f"({a[0]} != 0)"
    return f"np.{e.dtype}({a[0]})"  # float -> int truncates toward zero, like C and np.trunc


EXPR_RULES: dict[Op, Rule] = {
    Op.ADD: _infix("+"), Op.SUB: _infix("-"), Op.MUL: _infix("*"),
    Op.DIV: _float_or_int(_infix("/"), _infix("//")),  # int / int is floor division
    Op.FLOORDIV: _float_or_int(lambda e, a: f"np.floor({a[0]} / {a[1]})", _infix("//")),
    Op.FLOORMOD: _infix("%"),  # Numba follows Python: the result has the divisor's sign
    Op.MIN: _float_or_int(_fn("np.minimum"), _fn("min")),  # np.minimum propagates NaN
    Op.MAX: _float_or_int(_fn("np.maximum"), _fn("max")),
    Op.POW: _infix("**"),
    Op.NEG: lambda e, a: f"(-{a[0]})",
    Op.LT: _infix("<"), Op.LE: _infix("<="), Op.GT: _infix(">"), Op.GE: _infix(">="),
    Op.EQ: _infix("=="), Op.NE: _infix("!="),
    Op.AND: _infix("and"), Op.OR: _infix("or"),  # short-circuit: the right side may be a guarded read
    Op.NOT: lambda e, a: f"(not {a[0]})",
    Op.SHL: _infix("<<"), Op.SHR: _infix(">>"),
    Op.SELECT: lambda e, a: f"({a[1]} if {a[0]} else {a[2]})",  # lazy in both branches
    Op.CAST: _cast,
    Op.EXP: _fn("np.exp"), Op.LOG: _fn("np.log"), Op.LOG1P: _fn("np.log1p"),
    Op.SQRT: _fn("np.sqrt"),
    Op.RSQRT: lambda e, a: f"({one_literal(e.dtype)} / np.sqrt({a[0]}))",
    Op.TANH: _fn("np.tanh"),
    Op.SIGMOID: lambda e, a: f"({one_literal(e.dtype)} / ({one_literal(e.dtype)} + np.exp(-{a[0]})))",
    Op.ERF: _fn("math.erf"), Op.SIN: _fn("np.sin"), Op.COS: _fn("np.cos"),
    Op.ATAN: _fn("np.arctan"), Op.ABS: _fn("abs"), Op.FLOOR: _fn("np.floor"),
    Op.CEIL: _fn("np.ceil"), Op.TRUNC: _fn("np.trunc"),
    Op.ROUND: _fn("np.rint"),  # half to even, as np.round
    Op.SIGN: _fn("np.sign"),
    Op.STOP_GRADIENT: lambda e, a: a[0],
    Op.TAN: _fn("np.tan"), Op.SINH: _fn("np.sinh"), Op.COSH: _fn("np.cosh"),
    Op.ASIN: _fn("np.arcsin"), Op.ACOS: _fn("np.arccos"), Op.ASINH: _fn("np.arcsinh"),
    Op.ACOSH: _fn("np.arccosh"), Op.ATANH: _fn("np.arctanh"), Op.ATAN2: _fn("np.arctan2"),
    Op.ISNAN: _fn("np.isnan"),
    Op.BITWISE_AND: _infix("&"), Op.BITWISE_OR: _infix("|"), Op.BITWISE_XOR: _infix("^"),
    Op.BITWISE_NOT: lambda e, a: f"(~{a[0]})",
}


def const_str(c: Const) -> str:
    v = c.value
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, int):
        return repr(v) if v >= 0 else f"({v})"
    if math.isnan(v):
        s = "np.nan"
    elif math.isinf(v):
        s = "np.inf" if v > 0 else "-np.inf"
    else:
        s = repr(v)
    if c.dtype != "float64":
        return f"np.{c.dtype}({s})"
    return s if not s.startswith("-") else f"({s})"


def top(s: str) -> str:
    """Drop one pair of enclosing parentheses (for statement-level expressions)."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for k, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and k < len(s) - 1:
            return s
    return s[1:-1]


# -- names -----------------------------------------------------------------------------------

_RESERVED = set(keyword.kwlist) | {
    "np", "math", "numba", "njit", "prange", "cuda", "range", "min", "max", "abs", "int",
    "float", "bool", "len", "print", "exp_f32", "tanh_f32", "log_f32", "log1p_f32", "erf_f32",
    "cosh_f32", "sinh_f32", "pow_f32", "fmax", "fmin", KERNEL_NAME, CHECK_NAME, ERR_NAME}


class Names:
    """Unique identifiers for tensors, axes and temporaries, in order of first request."""

    def __init__(self) -> None:
        self.taken: set[str] = set(_RESERVED)
        self.by_key: dict[object, str] = {}

    def get(self, key: object, hint: str) -> str:
        if key not in self.by_key:
            self.by_key[key] = self.fresh(hint)
        return self.by_key[key]

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = "_" + base
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name


# -- the renderer -------------------------------------------------------------------------------

class Renderer(ABC):
    """Plan -> source.  Each target subclasses it: fills the tables below and renders with its
    own `RenderPass` (kernels/cpu_render.py, kernels/cuda_render.py); this module holds only
    what both share (expressions, names, loops, reductions, index checks)."""

    target = "abstract"
    header: tuple[str, ...] = ("import math", "import numpy as np")
    helper_decorator = ""
    kernel_decorator_parallel = ""
    kernel_decorator_serial = ""
    # the parallel outer loop, as lines; the last one opens the block (a CUDA backend would use
    # ("{var} = cuda.grid(1)", "if {var} < {extent}:"): one thread per point, with a guard)
    parallel_loop: tuple[str, ...] = ("for {var} in range({extent}):",)
    scatter_add = "{target} += {value}"
    rules: dict[Op, Rule] = EXPR_RULES

    def workspace(self, plan: Plan) -> tuple[Tensor, ...]:
        """The intermediates passed in as preallocated arrays, in argument order (the plan's)."""
        return plan.workspace

    @abstractmethod
    def render(self, plan: Plan) -> str:
        """The kernel module's source for `plan`."""

    def render_expr(self, e: Expr, names: dict[Expr, str]) -> str:
        """One expression as source, with variables and reads' tensors named by `names`."""
        empty = Plan(self.target, (), (), tuple(v for v in names if isinstance(v, Var)), (), ())
        r = RenderPass(self, empty)
        for k, v in names.items():
            r.names.by_key[("", k) if isinstance(k, IterVar) else k] = v
        for x in walk(e):
            if isinstance(x, Read):
                r.names.by_key.setdefault(("t", id(x.tensor)), x.tensor.name)
        return top(r.expr(e, {k: v for k, v in names.items() if not isinstance(k, Var)}))


class RenderPass:
    """One rendering pass (holds the name table and the lines being emitted)."""

    def __init__(self, r: Renderer, plan: Plan) -> None:
        self.r, self.plan, self.names = r, plan, Names()
        self.lines: list[str] = []
        self.scope = ""  # the stage being rendered
        self.checked = False  # a data-dependent index check was emitted in the current stage
        self.any_check = False
        self.row_dim: dict[int, tuple[int, ...]] = {}  # tensor id -> the dims a row buffer leaves out
        self.ws: set[int] = set()  # ids of the tensors passed in as workspace arguments
        self.recip: dict[Expr, str] = {}  # hoisted float32 divisors -> their reciprocal's name
        self.pending: list[str] = []  # locals bound by `expr`, emitted before the next statement
        self.unproven: dict[Read, set[int]] = {}  # read dims checked at run time (te.bounds)
        self.sites: list[str] = []  # what each run-time index check guards, by site number
        self.hoist: dict[IterVar, list[tuple[Read, int, int]]] = {}  # checked at loop entry
        self.hoisted: set[tuple[Read, int]] = set()  # read dims whose loop entry was checked
        self.bound: dict[tuple[str, int, Expr], str] = {}  # (tensor, dim, index) -> checked local

    def emit(self, depth: int, text: str) -> None:
        """Append a statement, after the locals its expressions bound (see `expr`)."""
        self.lines.extend("    " * depth + b for b in self.pending)
        self.pending.clear()
        self.lines.append("    " * depth + text)

    def tensor(self, t: Tensor) -> str:
        return self.names.get(("t", id(t)), t.name)

    def axis(self, a: IterVar) -> str:
        # per stage: a reduce axis shared by two stages still gets a private loop variable
        return self.names.get((self.scope, a), a.name)

    # -- expressions ----------------------------------------------------------------------
    def expr(self, e: Expr, env: dict[Expr, str]) -> str:
        """`e` as source.  Iterative over the expression DAG; a subexpression that would nest
        deeper than `NEST_LIMIT` or that repeats with more than `SHARE_MIN` characters or a
        math call (`COSTLY`) is bound to a local first (`pending`, written before the next emitted statement), where it is
        evaluated on every path (not in a select branch or the right side of `and`/`or`).  A
        select on every path whose branch binds locals of its own is an `if`/`else` statement
        (`_select`): a branch's locals are evaluated only where it is taken."""
        return self._expr(e, env)[0]

    def _expr(self, e: Expr, env: dict[Expr, str]) -> tuple[str, int, bool, bool]:
        """`e`'s source, nesting depth, whether it reads a tensor, whether it holds a math call."""
        strict, uses = _occurrences(e, env, self.recip)
        blocks = {x for x in strict if isinstance(x, Call) and x.op is Op.SELECT and x not in env}
        text: dict[Expr, str] = {}
        nest: dict[Expr, int] = {}
        has_read: dict[Expr, bool] = {}
        costly: dict[Expr, bool] = {}
        bound = dict(env)  # and the locals bound so far, which a select's branches may use
        for x in _postorder(e, env, self.recip, blocks):
            if isinstance(x, Call) and x in blocks:
                s, n = self._select(x, bound, text, nest, has_read, costly)
                if not n:  # an `if` statement bound its value
                    bound[x] = s
            else:
                s, n = self._node(x, env, text, nest, has_read)
                costly[x] = isinstance(x, Call) and (x.op in COSTLY or any(
                    costly.get(c, False) for c in x.args))
            if (n > NEST_LIMIT or (uses.get(x, 0) > 1 and (len(s) > SHARE_MIN or costly[x]))) \
                    and x in strict and isinstance(x, (Call, Read)) and x not in env and n:
                name = bound[x] = self.names.fresh(f"{self.scope or 'v'}_t")
                self.pending.append(f"{name} = {top(s)}")
                s, n = name, 0
            text[x], nest[x] = s, n
        return text[e], nest[e], has_read[e], costly[e]

    def _select(self, x: Call, env: dict[Expr, str], text: dict[Expr, str], nest: dict[Expr, int],
                has_read: dict[Expr, bool], costly: dict[Expr, bool]) -> tuple[str, int]:
        """Select `x` (on every path): each branch rendered with its own locals (`expr`), which
        the statement `if c: <locals>; v = a else: <locals>; v = b` keeps under the guard, so
        a read that the condition keeps in bounds is still read only there.  Inline (`a if c
        else b`) where neither branch binds one."""
        outer, arms = self.pending, []
        for b in x.args[1:]:
            self.pending = []
            arms.append((*self._expr(b, env), self.pending))
        self.pending, c = outer, x.args[0]
        (sa, na, ra, ca, la), (sb, nb, rb, cb, lb) = arms
        has_read[x], costly[x] = has_read[c] or ra or rb, costly[c] or ca or cb
        if not (la or lb):
            return self.r.rules[Op.SELECT](x, [text[c], sa, sb]), 1 + max(nest[c], na, nb)
        v = self.names.fresh(f"{self.scope or 'v'}_t")
        self.pending += [f"if {top(text[c])}:", *("    " + t for t in la), f"    {v} = {top(sa)}",
                         "else:", *("    " + t for t in lb), f"    {v} = {top(sb)}"]
        return v, 0

    def _node(self, x: Expr, env: dict[Expr, str], text: dict[Expr, str], nest: dict[Expr, int],
              has_read: dict[Expr, bool]) -> tuple[str, int]:
        """One node rendered from its children's text: (source, nesting depth)."""
        kids = _render_children(x, env, self.recip)
        has_read[x] = isinstance(x, Read) or any(has_read[c] for c in kids)
        n = 1 + max((nest[c] for c in kids), default=0)
        match x:
            case Const():
                return const_str(x), 0
            case Var() | IterVar() | Reduce():
                if x in env:
                    return env[x], 0
                if isinstance(x, IterVar):
                    return self.axis(x), 0
                if isinstance(x, Var) and x in self.plan.params:
                    return self.names.get(x, x.name), 0
                raise ValueError(f"cannot render `{expr_str(x)}`: it is not bound here")
            case Read() | Call() if x in env:  # a hoisted loop-invariant value
                return env[x], 0
            case Call(op=Op.DIV, args=(a, b)) if b in self.recip:  # invariant float32 divisor
                return f"({text[a]} * {self.recip[b]})", n
            case Read(tensor=t, indices=idx):
                if not idx:
                    return f"{self.tensor(t)}[0]", n
                parts = []
                for d, i in enumerate(idx):
                    s = top(text[i])
                    if (t.name, d, i) in self.bound:  # computed and checked before its loop
                        s = self.bound[t.name, d, i]
                    elif has_read[i] or (d in self.unproven.get(x, ()) and (x, d) not in self.hoisted):
                        s = self.check(s, f"{self.tensor(t)}.shape[{d}]", read_site(x, d, self.scope))
                    parts.append(s)
                return self.index(t, parts), n
            case Call(op=op, args=args):
                return self.r.rules[op](x, [text[a] for a in args]), n
        raise TypeError(f"cannot render {type(x).__name__} `{x}`")

    def shape(self, exts: Sequence[Expr]) -> str:
        if not exts:
            return "1"  # zero-dim tensors are stored as one-element arrays
        s = [top(self.expr(x, {})) for x in exts]
        return f"({s[0]},)" if len(s) == 1 else f"({', '.join(s)})"

    def index(self, t: Tensor | None, idx: Sequence[str]) -> str:
        if (ds := self.row_dim.get(id(t))) is not None:  # a row buffer has no parallel dims
            idx = [x for d, x in enumerate(idx) if d not in ds]
        return f"{self.tensor(t)}[{', '.join(idx) if idx else '0'}]"  # type: ignore[arg-type]

    # -- loops ------------------------------------------------------------------------------
    def range_loop(self, depth: int, a: IterVar, env: dict[Expr, str]) -> None:
        lo, ext = self.expr(a.lo, env), self.expr(a.extent, env)
        start = None if is_zero(a.lo) else top(lo)
        match a.extent:
            case Call(op=Op.SUB, args=(hi, lo_)) if lo_.same_as(a.lo):  # extent = hi - lo
                start, stop = top(lo), top(self.expr(hi, env))
            case _:
                stop = top(ext) if start is None else f"{lo} + {ext}"
        if self.hoist.get(a):  # reads at `a + c` whose range is read from data: check both ends once
            ok = self.names.fresh(f"{self.axis(a)}_ok")  # else the loop is empty (the kernel raises
            self.emit(depth, f"{ok} = True")               # after the stage): no read past the data
            self.emit(depth, f"if {top(ext)} > 0:")
            for r, d, c in self.hoist[a]:
                n = f"{self.tensor(r.tensor)}.shape[{d}]"
                i0 = f"{lo} + {c}" if c else lo
                self.emit(depth + 1, self.check(i0, n, read_site(r, d, self.scope)))
                last = f"{lo} + {ext} - 1" + (f" + {c}" if c else "")  # same site as `first`
                self.emit(depth + 1, check_call(last, n, len(self.sites) - 1))
                self.emit(depth + 1, f"{ok} = {ok} and {i0} >= 0 and {last} < {n}")  # i0 <= last
                self.hoisted.add((r, d))
            stop = f"{stop} if {ok} else {start or 0}"
        self.emit(depth, f"for {self.axis(a)} in range({stop if start is None else f'{start}, {stop}'}):")

    def parallel_head(self, depth: int, var: str, extent: str) -> None:
        for line in self.r.parallel_loop:
            self.emit(depth, line.format(var=var, extent=extent))

    def parallel_nest(self, depth: int, axes: Sequence[IterVar], stage: str) -> int:
        """Emit the parallel loop over the flattened `axes`; returns the new depth."""
        exts = [self.expr(a.extent, {}) for a in axes]
        if len(axes) == 1:
            var = self.axis(axes[0]) if is_zero(axes[0].lo) else self.names.fresh(f"{stage}_p")
            self.parallel_head(depth, var, top(exts[0]))
            if not is_zero(axes[0].lo):
                self.emit(depth + 1, f"{self.axis(axes[0])} = {self.expr(axes[0].lo, {})} + {var}")
            return depth + 1
        f = self.names.fresh(f"{stage}_f")
        self.parallel_head(depth, f, " * ".join(exts))
        self.unflatten(depth + 1, f, axes)
        return depth + 1

    def unflatten(self, depth: int, f: str, axes: Sequence[IterVar]) -> None:
        """Each of `axes` from `f`, the index of a loop over their flattened product."""
        exts = [self.expr(a.extent, {}) for a in axes]
        for m, a in enumerate(axes):
            inner = exts[m + 1:]
            s = f if not inner else f"{f} // " + (inner[0] if len(inner) == 1 else f"({' * '.join(inner)})")
            if m > 0:
                s = f"{s if not inner else '(' + s + ')'} % {exts[m]}"
            if not is_zero(a.lo):
                s = f"{self.expr(a.lo, {})} + {s}"
            self.emit(depth, f"{self.axis(a)} = {s}")

    def reduction(self, depth: int, groups: list[Reduce], env: dict[Expr, str], stage: str) -> None:
        """Fold one reduction (all values of a tuple reducer) into local accumulators; a wide
        sum (plan.wide_sum) into a float64 one, rounded once after its loops."""
        r = groups[0]
        comb, n = r.combiner, len(r.source)
        wide = wide_sum(r)
        accs = [self.names.fresh(f"{stage}_acc" if n == 1 else f"{stage}_acc{k}") for k in range(n)]
        for a, ident in zip(accs, comb.identity, strict=True):
            self.emit(depth, f"{a} = {WIDE_ZERO if wide else top(self.expr(ident, {}))}")
        d = depth
        cond = not always(r.condition)
        if cond and not any(isinstance(x, Read) or any(x is a for a in r.axis)
                            for x in walk(r.condition)):
            # a condition on the data axes alone (`where ax == 0`): tested once, not per term
            self.emit(d, f"if {top(self.expr(r.condition, env))}:")
            d, cond = d + 1, False
        for ax in r.axis:
            self.range_loop(d, ax, env)
            d += 1
        if cond:
            self.emit(d, f"if {top(self.expr(r.condition, env))}:")
            d += 1
        srcs = [self.expr(s, env) for s in r.source]
        self.combine(d, comb, accs, srcs, accs, stage)
        if wide:
            accs = [self.narrow(depth, r, accs[0], stage)]
        if r.init:
            inits = [self.expr(i, env) for i in r.init]
            self.combine(depth, comb, inits, accs, accs, stage)
        for g in groups:
            env[g] = accs[g.value_index]

    def narrow(self, depth: int, r: Reduce, acc: str, stage: str) -> str:
        """A wide sum's float64 accumulator `acc` rounded to `r`'s dtype, in a new local."""
        out = self.names.fresh(f"{stage}_acc")
        self.emit(depth, f"{out} = np.{r.dtype}({acc})")
        return out

    def combine(self, depth: int, comb: CommReducer, lhs: list[str], rhs: list[str], dest: list[str],
                stage: str) -> None:
        """`dest = combine(lhs, rhs)`; operands used more than once go through temporaries."""
        cenv: dict[Expr, str] = {}
        for vars_, vals in ((comb.lhs, lhs), (comb.rhs, rhs)):
            for v, s in zip(vars_, vals, strict=True):
                uses = sum(1 for res in comb.result for x in _tree(res) if x.same_as(v))
                if uses > 1 and not is_atom(s):
                    tmp = self.names.fresh(f"{stage}_v")
                    self.emit(depth, f"{tmp} = {top(s)}")
                    s = tmp
                cenv[v] = s
        res = [self.expr(x, cenv) for x in comb.result]
        res = [top(res[0])] if len(res) == 1 else res
        self.emit(depth, f"{', '.join(dest)} = {', '.join(res)}")

    # -- loop trees (schedule/stageloops.py): the rules both targets share -------------------------
    NODE_RULES: dict[type, Callable[..., None]]  # by node kind; each target's pass adds its own

    def nodes(self, depth: int, nodes: Sequence[object], st: Stage, env: dict[Expr, str]) -> None:
        """Nodes of the plan's loop trees, each by its rule in `NODE_RULES`."""
        for n in nodes:
            self.NODE_RULES[type(n)](self, n, depth, st, env)

    def for_node(self, n: For, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        self.range_loop(depth, n.axis, {})
        self.nodes(depth + 1, n.body, st, env)

    def bind_node(self, n: Bind, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        sp = n.split
        self.emit(depth, f"{self.axis(sp.axis)} = {sp.factor} * {self.axis(sp.hi)} + "
                         f"{self.axis(sp.lo)}")

    def fold_node(self, n: Fold, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        self.reduction(depth, list(n.group), env, st.name)

    def store_node(self, n: Store, depth: int, st: Stage, env: dict[Expr, str]) -> None:
        idx = [self.axis(a) for a in n.index]
        self.emit(depth, f"{self.index(n.tensor, idx)} = {top(self.expr(n.value, env))}")

    # -- checks and scatter updates ---------------------------------------------------------------
    def check(self, i: str, n: str, site: str) -> str:
        """`i`, checked against the bound `n` at run time (indices not proven in bounds when
        defined: data-dependent, or over symbolic dims); `site` says which read, for the error."""
        self.checked = self.any_check = True
        self.sites.append(site)
        return check_call(i, n, len(self.sites) - 1)

    def scatter_updates(self, depth: int, st: ScatterStage, bound: dict[tuple[int, int], str],
                        env: dict[Expr, str]) -> Iterator[tuple[int, list[str], str]]:
        """Emit each update's condition, in the scatter's innermost loop; yield (depth, target
        index, value) for the caller to emit the addition.  Index dims are checked unless they
        are the injective parallel axis or a plain loop variable; `bound` holds (update, dim)
        indices already computed (and checked) outside the loops; `env`, values computed into
        locals before them."""
        for k, u in enumerate(st.updates):
            d0 = depth
            if not always(u.condition):
                self.emit(d0, f"if {top(self.expr(u.condition, env))}:")
                d0 += 1
            idx = [bound.get((k, d)) or self.scatter_index(st, u, d, env)
                   for d in range(len(u.index))]
            yield d0, idx, top(self.expr(u.value, env))

    def scatter_index(self, st: ScatterStage, u: ScatterUpdate, d: int,
                      env: dict[Expr, str] | None = None) -> str:
        """Index dim `d` of update `u`'s target, checked unless proven in bounds."""
        i = u.index[d]
        s = top(self.expr(i, env or {}))
        if scatter_dim_unproven(st, u, d):
            s = self.check(s, f"{self.tensor(st.tensor)}.shape[{d}]",
                           f"stage {st.name}: a scatter index is out of bounds: "
                           f"{st.tensor.name}[...] dim {d}, index `{expr_str(i)}`")
        return s



# -- helpers ------------------------------------------------------------------------------------------

def scatter_dim_unproven(st: ScatterStage, u: ScatterUpdate, d: int) -> bool:
    """A scatter's target index dim `d` must be checked (not proven inside the target)."""
    if d == st.parallel_dim and isinstance(u.index[d], IterVar):
        return False
    known = facts(u.condition)
    if dead(u.index, known):
        return False
    return dim_verdict(u.index[d], st.shape[d], known) is not Verdict.PROVEN


def read_site(r: Read, d: int, stage: str) -> str:
    """The error text of a run-time check of read `r` at dim `d`."""
    what = ("an index computed from tensor values" if any(isinstance(x, Read) for x in
                                                           walk(r.indices[d]))
            else "an index")
    return (f"stage {stage}: {what} is out of bounds: read {expr_str(r)} of tensor "
            f"{r.tensor.name!r}, dim {d}, index `{expr_str(r.indices[d])}`")


_LAZY_FROM = {Op.SELECT: 1, Op.AND: 1, Op.OR: 1}  # args from this position on are evaluated lazily


def _render_children(x: Expr, env: dict[Expr, str], recip: dict[Expr, str]) -> tuple[Expr, ...]:
    """The children that rendering `x` spells out (none for a bound name or a reduction)."""
    if x in env or isinstance(x, Reduce):
        return ()
    if isinstance(x, Call) and x.op is Op.DIV and x.args[1] in recip:
        return x.args[:1]
    return children(x)


def _postorder(e: Expr, env: dict[Expr, str], recip: dict[Expr, str],
               blocks: Collection[Expr] = ()) -> Iterator[Expr]:
    """Distinct nodes (structurally) of the rendered tree of `e`, children first; of a select in
    `blocks`, only the condition (its branches are rendered apart)."""
    done: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        x, ready = stack.pop()
        if x in done:
            continue
        if ready:
            done.add(x)
            yield x
            continue
        stack.append((x, True))
        kids = _render_children(x, env, recip)[:1] if x in blocks else _render_children(x, env, recip)
        stack.extend((c, False) for c in reversed(kids) if c not in done)


def _occurrences(e: Expr, env: dict[Expr, str], recip: dict[Expr, str]
                 ) -> tuple[set[Expr], dict[Expr, int]]:
    """Nodes of `e` evaluated on every path (strict), and how many parent edges reach each."""
    uses: dict[Expr, int] = {}
    strict: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(e, True)]
    seen: set[tuple[Expr, bool]] = set()
    while stack:
        x, st = stack.pop()
        if (x, st) in seen:
            continue
        first = (x, not st) not in seen
        seen.add((x, st))
        if st:
            strict.add(x)
        lazy = _LAZY_FROM.get(x.op, 99) if isinstance(x, Call) else 99
        for k, c in enumerate(_render_children(x, env, recip)):
            if first:
                uses[c] = uses.get(c, 0) + 1
            stack.append((c, st and k < lazy))
    return strict, uses


def np_dtype(dtype: str) -> str:
    return "bool_" if dtype == "bool" else dtype


def is_placeholder(t: Tensor) -> bool:
    from ..te.tensor import PlaceholderOp
    return isinstance(t.op, PlaceholderOp)


def is_atom(s: str) -> bool:
    return re.fullmatch(r"[A-Za-z_]\w*", s) is not None


def _tree(e: Expr) -> Iterator[Expr]:
    """Every occurrence in `e`, not deduplicated (walk() yields each node once)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def describe_stage(st: ComputeStage, joined: bool = False) -> str:
    """The comment heading a stage's code; `joined`: it runs in a loop an earlier stage opened."""
    c = st.cpu
    if joined:
        return "joined into the previous stage's prange" + ("; reduction" if reduce_groups(
            st.bodies) else "")
    if c is not None and c.contraction is not None:
        return c.contraction.describe()
    if c is not None and c.accumulate is not None:
        return c.accumulate.describe()
    loops = ("serial" if not st.parallel else
             f"prange over {' * '.join(a.name for a in st.order[: st.fused])}")
    red = "; reduction" if reduce_groups(st.bodies) else ""
    inl = f"; inlined {', '.join(st.inlined)}" if st.inlined else ""
    return f"{loops}{red}{inl}"


RenderPass.NODE_RULES = {For: RenderPass.for_node, Bind: RenderPass.bind_node,
                         Fold: RenderPass.fold_node, Store: RenderPass.store_node}

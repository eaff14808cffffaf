"""Expression nodes of the tensor-expression IR.

Semantics (every later stage relies on these choices):

* Index expressions are integer-valued; loop variables have dtype int32 and
  all index arithmetic is exact (evaluated in int64 by every backend).
* `floordiv`/`floormod` round toward negative infinity (Python semantics), so
  `x == floordiv(x, c) * c + floormod(x, c)` with `0 <= floormod(x, c) < c` for
  every integer `x` and constant `c > 0`.  `/` on two integers is `floordiv`.
* Reading a tensor outside its shape is an error.  A read guarded by
  `select`/`if_then_else` is evaluated only where its guard holds (both
  branches are lazy), which is how padding is written.  `a & b` and `a | b`
  on conditions short-circuit: `b` is evaluated only where `a` does not
  decide, so `in_range & (X[i] > 0)` is a valid guard.  On integers `&`, `|`, `^`, `~`
  are bitwise (TVM's bitwise_and/or/xor/not), never short-circuit.
* Reduction identities: sum 0, prod 1, max -inf (lowest value for ints),
  min +inf (highest value for ints); custom reducers carry their own.
* The simplifier never reassociates floating-point arithmetic except for
  folding constants and dropping neutral elements (x + 0, x * 1).
* Nodes are immutable values with structural equality and hashing, so they can
  key dicts.  Variables carry a unique id: two axes both named `k` never merge.
  `a == b` on expressions returns an `EqualOp` that acts as the IR comparison
  inside compute bodies and as the structural-equality truth value in Python
  (TVM's trick), so `te.if_then_else(j == 0, ...)` works as in TOPI.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

from ..errors import TexprError
from . import dtype as dt
from .ops import Op

if TYPE_CHECKING:
    from .tensor import Tensor

_uid = itertools.count(1)


def next_uid() -> int:
    return next(_uid)


class Expr:
    """Base of all expression nodes; Python operators build IR."""

    dtype: str
    __slots__ = ()

    # -- structural identity -------------------------------------------------
    def _key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)  # type: ignore[arg-type]

    def same_as(self, other: object) -> bool:
        """Structural equality, compared with an explicit stack (no recursion-depth limit)."""
        stack: list[tuple[object, object]] = [(self, other)]
        while stack:
            a, b = stack.pop()
            if a is b:
                continue
            if type(a) is not type(b):
                return False
            if isinstance(a, tuple):
                if len(a) != len(b):  # type: ignore[arg-type]
                    return False
                stack.extend(zip(a, b))  # type: ignore[call-overload]
            elif isinstance(a, Expr):
                ha, hb = a.__dict__.get("_h"), b.__dict__.get("_h")
                if ha is not None and hb is not None and ha != hb:
                    return False
                stack.extend(zip(a._key(), b._key()))  # type: ignore[attr-defined]
            elif not a == b:
                return False
        return True

    def __hash__(self) -> int:
        h = self.__dict__.get("_h")
        if h is None:
            for x in _unhashed_postorder(self):  # children first, so no recursion below
                object.__setattr__(x, "_h", hash((type(x).__name__, x._key())))
            h = self.__dict__["_h"]
        return h

    def __eq__(self, other: object) -> "EqualOp":  # type: ignore[override]
        return EqualOp(self, other, Op.EQ)

    def __ne__(self, other: object) -> "EqualOp":  # type: ignore[override]
        return EqualOp(self, other, Op.NE)

    # -- TVM compatibility: static shape entries read as ints (`int(X.shape[0])`) ------
    def __int__(self) -> int:
        raise NotConstantError(
            f"`{self}` is not a constant, so it has no int value (a symbolic dim is known only "
            "when the kernel runs); keep it as an expression, or use a static shape")

    __index__ = __int__

    def __float__(self) -> float:  # math.exp(x) too: name te's intrinsics
        raise NotConstantError(f"`{self}` is not a constant, so it has no float value; inside a "
                               f"compute body use te's intrinsics (te.exp, te.log, te.sqrt, "
                               f"te.floor, ...) instead of the math module's functions")

    def _no_builtin(self, fn: str, *_: Any) -> Any:
        raise dt.ExprTypeError(f"{fn}() cannot take the te expression `{self}`; inside a compute "
                               f"body use te.{fn}(x) (a float expression)")

    def __round__(self, *nd: Any) -> Any: return self._no_builtin("round")
    def __floor__(self) -> Any: return self._no_builtin("floor")
    def __ceil__(self) -> Any: return self._no_builtin("ceil")
    def __trunc__(self) -> Any: return self._no_builtin("trunc")

    def __bool__(self) -> bool:
        raise dt.ExprTypeError(
            f"cannot use the te expression `{self}` as a Python bool; inside a compute body "
            "use te.if_then_else(cond, a, b), te.all(...)/te.any(...) or & and | instead of "
            "`if`, `and`, `or`")

    # -- arithmetic ------------------------------------------------------------
    def __add__(self, o: Any) -> Expr: return binary(Op.ADD, self, o)
    def __radd__(self, o: Any) -> Expr: return binary(Op.ADD, o, self)
    def __sub__(self, o: Any) -> Expr: return binary(Op.SUB, self, o)
    def __rsub__(self, o: Any) -> Expr: return binary(Op.SUB, o, self)
    def __mul__(self, o: Any) -> Expr: return binary(Op.MUL, self, o)
    def __rmul__(self, o: Any) -> Expr: return binary(Op.MUL, o, self)
    def __truediv__(self, o: Any) -> Expr: return binary(Op.DIV, self, o)
    def __rtruediv__(self, o: Any) -> Expr: return binary(Op.DIV, o, self)
    def __floordiv__(self, o: Any) -> Expr: return binary(Op.FLOORDIV, self, o)
    def __rfloordiv__(self, o: Any) -> Expr: return binary(Op.FLOORDIV, o, self)
    def __mod__(self, o: Any) -> Expr: return binary(Op.FLOORMOD, self, o)
    def __rmod__(self, o: Any) -> Expr: return binary(Op.FLOORMOD, o, self)
    def __pow__(self, o: Any) -> Expr: return binary(Op.POW, self, o)
    def __rpow__(self, o: Any) -> Expr: return binary(Op.POW, o, self)
    def __lshift__(self, o: Any) -> Expr: return binary(Op.SHL, self, o)
    def __rshift__(self, o: Any) -> Expr: return binary(Op.SHR, self, o)
    def __neg__(self) -> Expr: return call(Op.NEG, self)
    def __pos__(self) -> Expr: return self
    def __abs__(self) -> Expr: return call(Op.ABS, self)  # abs(x), as np.abs and te.abs
    def __lt__(self, o: Any) -> Expr: return binary(Op.LT, self, o)
    def __le__(self, o: Any) -> Expr: return binary(Op.LE, self, o)
    def __gt__(self, o: Any) -> Expr: return binary(Op.GT, self, o)
    def __ge__(self, o: Any) -> Expr: return binary(Op.GE, self, o)
    def __and__(self, o: Any) -> Expr: return binary(Op.AND, self, o)
    def __rand__(self, o: Any) -> Expr: return binary(Op.AND, o, self)
    def __or__(self, o: Any) -> Expr: return binary(Op.OR, self, o)
    def __ror__(self, o: Any) -> Expr: return binary(Op.OR, o, self)
    def __xor__(self, o: Any) -> Expr: return binary(Op.BITWISE_XOR, self, o)
    def __rxor__(self, o: Any) -> Expr: return binary(Op.BITWISE_XOR, o, self)
    def __invert__(self) -> Expr: return call(Op.BITWISE_NOT if dt.is_int(self.dtype) else Op.NOT, self)

    def __array_ufunc__(self, ufunc: Any, method: str, *args: Any, **kw: Any) -> Any:
        """NumPy arithmetic with a te expression is te arithmetic (`np.float32(2) * x`); a NumPy
        function of one (`np.exp(x)`) is an error naming te's, not NumPy's object-loop message."""
        op = _NP_OPS.get(ufunc.__name__)
        if op is None or method != "__call__" or kw:
            raise dt.ExprTypeError(
                f"np.{ufunc.__name__} cannot take the te expression `{self}`; inside a compute "
                f"body use te's intrinsics (te.exp, te.log, te.sqrt, te.tanh, te.abs, "
                f"te.max(a, b), te.min(a, b), ...) and Python operators")
        if op in (Op.EQ, Op.NE):  # `==` as on te expressions (an EqualOp)
            return EqualOp(self, next(a for a in args if a is not self), op)
        return binary(op, *args) if len(args) == 2 else call(op, *args)

    def eq(self, o: Any) -> Expr:
        return binary(Op.EQ, self, o)

    def ne(self, o: Any) -> Expr:
        return binary(Op.NE, self, o)

    def astype(self, dtype: str) -> Expr:
        d = dt.check(dtype)
        return self if d == self.dtype else Call(Op.CAST, (self,), d)

    def __str__(self) -> str:
        from .printer import expr_str
        return expr_str(self)

    __repr__ = __str__


def _unhashed_postorder(e: Expr) -> list[Expr]:
    """Nodes below (and including) `e` without a cached hash, children before parents."""
    out: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(e, False)]
    seen: set[int] = set()
    while stack:
        x, ready = stack.pop()
        if ready:
            out.append(x)
            continue
        if id(x) in seen or "_h" in x.__dict__:
            continue
        seen.add(id(x))
        stack.append((x, True))
        for f in x._key():
            for c in (f if isinstance(f, tuple) else (f,)):
                if isinstance(c, Expr) and "_h" not in c.__dict__:
                    stack.append((c, False))
    return out


class EqualOp:
    """Result of `a == b` / `a != b` on expressions.

    Used inside a compute body it converts to the IR comparison; used as a
    Python truth value it is structural (in)equality, so dicts and sets of
    expressions keep working.
    """

    __slots__ = ("a", "b", "op")

    def __init__(self, a: Expr, b: object, op: Op) -> None:
        self.a, self.b, self.op = a, b, op

    def __bool__(self) -> bool:
        b = self.b
        if isinstance(b, (int, float)) and isinstance(self.a, Const):  # X.shape[0] == 1, as in TVM
            b = as_expr(b, self.a.dtype)
        same = isinstance(b, Expr) and self.a.same_as(b)
        return same if self.op is Op.EQ else not same

    def asexpr(self) -> Expr:
        return binary(self.op, self.a, self.b)

    # used as an operand of another expression
    def __and__(self, o: Any) -> Expr: return binary(Op.AND, self, o)
    def __rand__(self, o: Any) -> Expr: return binary(Op.AND, o, self)
    def __or__(self, o: Any) -> Expr: return binary(Op.OR, self, o)
    def __ror__(self, o: Any) -> Expr: return binary(Op.OR, o, self)
    def __invert__(self) -> Expr: return call(Op.NOT, self)

    def astype(self, dtype: str) -> Expr:
        return self.asexpr().astype(dtype)

    def __str__(self) -> str:
        return str(self.asexpr())

    __repr__ = __str__


class NotConstantError(TexprError, TypeError):
    """`int()`/`float()` of an expression that is not a constant (e.g. a symbolic dim)."""


@dataclass(frozen=True, eq=False, repr=False)
class Const(Expr):
    """A constant; like TVM's IntImm/FloatImm it has `.value` and converts with int()/float()."""

    value: int | float | bool
    dtype: str

    def __int__(self) -> int:
        return int(self.value)

    def __index__(self) -> int:
        if not (dt.is_int(self.dtype) or self.dtype == "bool"):
            raise NotConstantError(f"`{self}` is a {self.dtype} constant, not an integer")
        return int(self.value)

    def __float__(self) -> float:
        return float(self.value)

    def __round__(self, *nd: Any) -> Any: return round(self.value, *nd)
    def __floor__(self) -> int: return math.floor(self.value)
    def __ceil__(self) -> int: return math.ceil(self.value)
    def __trunc__(self) -> int: return math.trunc(self.value)

    def __post_init__(self) -> None:
        v = self.value
        if self.dtype == "bool":
            v = bool(v)
        elif dt.is_int(self.dtype):
            v = dt.check_literal(int(v), self.dtype)
        else:
            v = float(v)
        object.__setattr__(self, "value", v)


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a symbolic dimension (`te.var`) or a reducer argument."""

    name: str
    dtype: str = dt.INDEX
    uid: int = field(default_factory=next_uid)


@dataclass(frozen=True, eq=False, repr=False)
class IterVar(Expr):
    """A loop variable over [lo, lo + extent): a compute axis or a reduction axis."""

    name: str
    lo: Expr
    extent: Expr
    kind: str = "data"  # "data" | "reduce"
    uid: int = field(default_factory=next_uid)
    dtype: str = dt.INDEX

    @property
    def dom(self) -> tuple[Expr, Expr]:
        return (self.lo, self.extent)

    @property
    def var(self) -> IterVar:  # TVM spelling: axis.var
        return self


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """Application of a primitive `Op` to argument expressions."""

    op: Op
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Read(Expr):
    """`tensor[indices]`: a read of one element of a tensor."""

    tensor: "Tensor"
    indices: tuple[Expr, ...]
    dtype: str


class ReduceKind(str, Enum):
    """A reducer's kind: the four built-ins, or CUSTOM (`te.comm_reducer`).  A member is also
    its string value (equal to it, printed as it), so printed plans and JSON are unchanged."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    CUSTOM = "custom"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


@dataclass(frozen=True, eq=False, repr=True)
class CommReducer:
    """A commutative reducer: `combine(lhs, rhs)` elementwise over tuples, with `identity`.

    `kind` is the `ReduceKind` (SUM, PROD, MAX, MIN for the built-ins, CUSTOM otherwise).
    """

    kind: ReduceKind
    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[Expr, ...]
    identity: tuple[Expr, ...]
    name: str = ""

    def _key(self) -> tuple:
        return (self.kind, self.lhs, self.rhs, self.result, self.identity)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CommReducer) and bool(self._key() == other._key())

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """Reduction of `source` over `axis` with `combiner`, where `condition` holds.

    For tuple reducers (argmax) `source` has several entries and the node
    stands for entry `value_index` of the reduced tuple.  `init`, when given,
    replaces the identity as the starting value.
    """

    combiner: CommReducer
    source: tuple[Expr, ...]
    axis: tuple[IterVar, ...]
    condition: Expr
    value_index: int
    dtype: str
    init: tuple[Expr, ...] = ()

    @property
    def loop_key(self) -> tuple:
        """What identifies the loop computing this reduction: the values of one tuple reducer
        (argmax's index and value) differ only in `value_index`, so they share one loop."""
        return (self.combiner, self.source, self.axis, self.condition, self.init)


def always(e: Expr) -> bool:
    """Whether the condition `e` is the constant True (a reduction or update without one)."""
    return isinstance(e, Const) and e.value is True


def is_zero(e: Expr) -> bool:
    """Whether `e` is the constant zero (of a number type: not False)."""
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 0


# -- construction helpers --------------------------------------------------------

def const(value: int | float | bool, dtype: str | None = None) -> Const:
    """A constant; the dtype defaults to int32 / float32 / bool by the Python type."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
    return Const(value, dt.check(dtype))


def as_expr(x: object, like: str | None = None) -> Expr:
    """Convert a Python scalar (taking the dtype `like` where sensible) or an EqualOp."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, EqualOp):
        return x.asexpr()
    if isinstance(x, bool):
        return Const(x, "bool")
    if isinstance(x, int):
        return Const(x, like if like is not None and like != "bool" else "int32")
    if isinstance(x, float):
        return Const(x, like if like is not None and dt.is_float(like) else "float32")
    if hasattr(x, "asexpr"):  # a 0-dim te Tensor: its value (te/tensor.py)
        return x.asexpr()
    if hasattr(x, "dtype") and getattr(x, "shape", None) == ():  # NumPy scalar
        return Const(x.item(), dt.check(x.dtype))  # type: ignore[attr-defined]
    raise dt.ExprTypeError(f"cannot use {x!r} of type {type(x).__name__} in a te expression")


_BITWISE_OF = {Op.AND: Op.BITWISE_AND, Op.OR: Op.BITWISE_OR}
_BOOL_RESULT = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR}


# NumPy ufuncs that Python operators on te expressions spell (Expr.__array_ufunc__)
_NP_OPS = {"add": Op.ADD, "subtract": Op.SUB, "multiply": Op.MUL, "true_divide": Op.DIV,
           "divide": Op.DIV, "equal": Op.EQ, "not_equal": Op.NE,
           "floor_divide": Op.FLOORDIV, "remainder": Op.FLOORMOD, "power": Op.POW,
           "less": Op.LT, "less_equal": Op.LE, "greater": Op.GT, "greater_equal": Op.GE,
           "negative": Op.NEG, "absolute": Op.ABS, "left_shift": Op.SHL, "right_shift": Op.SHR}


def binary(op: Op, a: object, b: object) -> Expr:
    """Build a binary Call, converting Python scalars to the other operand's dtype."""
    if not isinstance(a, (Expr, EqualOp)):
        b = as_expr(b)
        a = as_expr(a, b.dtype)
    else:
        a = as_expr(a)
        b = as_expr(b, a.dtype)
    if op in _BITWISE_OF and dt.is_int(a.dtype) and dt.is_int(b.dtype):
        op = _BITWISE_OF[op]  # & and | on integers are bitwise, as in Python and TVM
    if op is Op.BITWISE_XOR and a.dtype == "bool" and b.dtype == "bool":
        return Call(Op.NE, (a, b), "bool")  # x ^ y on conditions
    if op in (Op.AND, Op.OR):
        for x in (a, b):
            if x.dtype != "bool":
                raise dt.ExprTypeError(f"`{op.name.lower()}` needs bool operands, got `{x}` of dtype {x.dtype}")
        return Call(op, (a, b), "bool")
    d = dt.promote(a.dtype, b.dtype)
    folded = _fold_ints(op, a, b, d)
    if folded is not None:
        return folded
    if op in (Op.SHL, Op.SHR, Op.BITWISE_XOR, *_BITWISE_OF.values()) and not dt.is_int(d):
        raise dt.ExprTypeError(f"`{op.name.lower()}` needs integer operands, got {a.dtype} and {b.dtype}")
    a, b = a.astype(d), b.astype(d)
    return Call(op, (a, b), "bool" if op in _BOOL_RESULT else d)


_INT_FOLD = {Op.ADD: lambda x, y: x + y, Op.SUB: lambda x, y: x - y, Op.MUL: lambda x, y: x * y,
             Op.FLOORDIV: lambda x, y: x // y, Op.FLOORMOD: lambda x, y: x % y, Op.DIV: lambda x, y: x // y}


def _fold_ints(op: Op, a: Expr, b: Expr, d: str) -> Expr | None:
    """`2 - 1` on integer constants folds at construction, as in TVM (index arithmetic)."""
    if (isinstance(a, Const) and isinstance(b, Const) and op in _INT_FOLD and dt.is_int(d)
            and not (op in (Op.FLOORDIV, Op.FLOORMOD, Op.DIV) and b.value == 0)):
        return Const(_INT_FOLD[op](int(a.value), int(b.value)), d)
    return None


def call(op: Op, *args: object, dtype: str | None = None) -> Expr:
    """Build a Call of a unary or n-ary op; result dtype follows the first float argument."""
    xs = tuple(as_expr(a) for a in args)
    return Call(op, xs, dtype or xs[0].dtype)


Substitution = Callable[[Expr], Expr | None]

"""The closed set of primitive operations of the IR, and the category sets
that the differentiator, scheduler and code generators ask about.

Every `Call` node carries one `Op`; no stage dispatches on name strings.
"""
from __future__ import annotations

from enum import Enum, auto


class Op(Enum):
    # arithmetic
    ADD = auto()
    SUB = auto()
    MUL = auto()
    DIV = auto()  # true division on floats; floor division on integers
    FLOORDIV = auto()
    FLOORMOD = auto()
    MIN = auto()
    MAX = auto()
    POW = auto()
    NEG = auto()
    # comparisons (result dtype bool)
    LT = auto()
    LE = auto()
    GT = auto()
    GE = auto()
    EQ = auto()
    NE = auto()
    # logic on bools
    AND = auto()
    OR = auto()
    NOT = auto()
    # integer bit shifts
    SHL = auto()
    SHR = auto()
    # bitwise ops on integers (`&`, `|`, `^`, `~` on integer operands; TVM's bitwise_*)
    BITWISE_AND = auto()
    BITWISE_OR = auto()
    BITWISE_XOR = auto()
    BITWISE_NOT = auto()
    # control and conversion
    SELECT = auto()  # select(cond, then, else), lazy in both branches
    CAST = auto()
    # math intrinsics (unary, float)
    EXP = auto()
    LOG = auto()
    LOG1P = auto()
    SQRT = auto()
    RSQRT = auto()
    TANH = auto()
    SIGMOID = auto()
    ERF = auto()
    SIN = auto()
    COS = auto()
    ATAN = auto()
    TAN = auto()
    SINH = auto()
    COSH = auto()
    ASIN = auto()
    ACOS = auto()
    ASINH = auto()
    ACOSH = auto()
    ATANH = auto()
    ATAN2 = auto()  # atan2(y, x), binary
    ISNAN = auto()  # float -> bool
    ABS = auto()
    FLOOR = auto()
    CEIL = auto()
    TRUNC = auto()
    ROUND = auto()  # half to even, as NumPy and PyTorch
    SIGN = auto()
    STOP_GRADIENT = auto()  # identity whose adjoint is zero (jax.lax.stop_gradient)


BINARY_ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.FLOORMOD,
                          Op.MIN, Op.MAX, Op.POW, Op.ATAN2})
COMPARE = frozenset({Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE})
LOGIC = frozenset({Op.AND, Op.OR, Op.NOT})
SHIFT = frozenset({Op.SHL, Op.SHR})
BITWISE = frozenset({Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR, Op.BITWISE_NOT})
UNARY_MATH = frozenset({Op.EXP, Op.LOG, Op.LOG1P, Op.SQRT, Op.RSQRT, Op.TANH, Op.SIGMOID,
                        Op.ERF, Op.SIN, Op.COS, Op.ATAN, Op.ABS, Op.FLOOR, Op.CEIL,
                        Op.TRUNC, Op.ROUND, Op.SIGN, Op.TAN, Op.SINH, Op.COSH, Op.ASIN, Op.ACOS,
                        Op.ASINH, Op.ACOSH, Op.ATANH, Op.ISNAN})
UNARY = UNARY_MATH | {Op.NEG, Op.NOT, Op.CAST, Op.STOP_GRADIENT, Op.BITWISE_NOT}
# integer-valued functions of real arguments: derivative exactly zero almost everywhere
PIECEWISE_CONST = frozenset({Op.FLOOR, Op.CEIL, Op.TRUNC, Op.ROUND, Op.SIGN, Op.FLOORDIV,
                             Op.FLOORMOD, Op.ISNAN}) | COMPARE | LOGIC | SHIFT | BITWISE
# operations allowed in affine index arithmetic
INDEX_ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.FLOORDIV, Op.FLOORMOD})
COMMUTATIVE = frozenset({Op.ADD, Op.MUL, Op.MIN, Op.MAX, Op.EQ, Op.NE, Op.AND, Op.OR,
                         Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR})

# Python spelling of infix binary operators, used by the printer and the CPU renderer
INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.FLOORDIV: "//",
         Op.FLOORMOD: "%", Op.POW: "**", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=",
         Op.EQ: "==", Op.NE: "!=", Op.AND: "&", Op.OR: "|", Op.SHL: "<<", Op.SHR: ">>",
         Op.BITWISE_AND: "&", Op.BITWISE_OR: "|"}
# binding strength, higher binds tighter (Python's table: compare < | < & < shifts < + < *)
PRECEDENCE = {Op.LT: 4, Op.LE: 4, Op.GT: 4, Op.GE: 4, Op.EQ: 4, Op.NE: 4, Op.OR: 5, Op.AND: 6,
              Op.BITWISE_OR: 5, Op.BITWISE_AND: 6,
              Op.SHL: 7, Op.SHR: 7, Op.ADD: 8, Op.SUB: 8, Op.MUL: 9, Op.DIV: 9,
              Op.FLOORDIV: 9, Op.FLOORMOD: 9, Op.POW: 11}
UNARY_PRECEDENCE = 10  # -x
ATOM_PRECEDENCE = 12

"""`texpr_ad.te`: the tensor-expression IR and its DSL (TVM `te` names and argument orders)."""
from . import dtype
from .dtype import ExprTypeError
from .dag import placeholders, topo_order
from .expr import (Call, CommReducer, Const, EqualOp, Expr, IterVar, Read, Reduce, ReduceKind, Var,
                   const)
from .interp import evaluate
from .intrin import (abs, acos, acosh, all, any, asin, asinh, atan, atan2, atanh, bitwise_and,
                     bitwise_not, bitwise_or, bitwise_xor, cast, ceil, cos, cosh, erf, exp, floor,
                     floordiv, floormod, if_then_else, indexdiv, indexmod, isnan, left_shift, log,
                     log1p, logical_not, pow, power, right_shift, round, rsqrt, select, sigmoid, sign,
                     sin, sinh, sqrt, stop_gradient, tan, tanh, trunc)
from .ops import Op
from .printer import expr_str, stage_str, tensor_str
from .reduce import Reducer, comm_reducer, max, max_value, min, min_value, prod, sum
from .tensor import (ComputeOp, PlaceholderOp, ScatterOp, ScatterUpdate, Tensor, TensorError, compute,
                     placeholder, reduce_axis, var)

__all__ = [
    "Call", "CommReducer", "ComputeOp", "Const", "EqualOp", "Expr", "ExprTypeError", "IterVar", "Op",
    "PlaceholderOp", "Read", "Reduce", "ReduceKind", "Reducer", "ScatterOp", "ScatterUpdate", "Tensor", "TensorError", "Var",
    "abs", "acos", "acosh", "all", "any", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_not", "bitwise_or", "bitwise_xor", "cast", "cosh", "isnan", "sinh", "tan", "ceil", "comm_reducer", "compute", "const", "cos",
    "dtype", "erf", "evaluate", "exp", "expr_str", "floor", "floordiv", "floormod",
    "if_then_else", "indexdiv", "indexmod", "left_shift", "log", "log1p", "logical_not", "max",
    "max_value", "min", "min_value", "placeholder", "placeholders", "pow", "power", "prod",
    "reduce_axis", "right_shift", "round", "rsqrt", "select", "sigmoid", "sign", "sin", "sqrt",
    "stage_str", "stop_gradient", "sum", "tanh", "tensor_str", "topo_order", "trunc", "var",
]

"""texpr_ad: tensor-expression automatic differentiation with generated kernels.

    from texpr_ad import te
    import texpr_ad as ta
    dA, dW = ta.grad(Y, [A, W], head=dY)     # adjoint te tensors
    bwd = ta.build([dA, dW], [A, W, dY])     # a compiled CPU kernel
    fwd, bwd = ta.vjp([Y], [A, W])           # forward with residuals, backward reading them
"""
from . import te
from .api import CustomOp, CustomOpError, build, custom_op
from .arrays import ArrayArgumentError, OpArgumentError
from .deriv import GradientError, NotDifferentiableError, grad, jvp
from .errors import TexprError
from .pullback import vjp
from .te.work import work

__version__ = "0.1.0"
__all__ = ["ArrayArgumentError", "CustomOp", "CustomOpError", "GradientError", "NotDifferentiableError",
           "OpArgumentError", "TexprError", "build", "custom_op", "grad", "jvp", "vjp", "te", "work"]

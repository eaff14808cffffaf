"""The differentiator: adjoint (reverse) and tangent (forward) index expressions."""
from .adjoint import grad
from .errors import GradientError, NotDifferentiableError
from .forward import jvp

__all__ = ["GradientError", "NotDifferentiableError", "grad", "jvp"]

"""Exceptions of the differentiator."""
from ..errors import TexprError


class NotDifferentiableError(TexprError, TypeError):
    """Asked for a derivative that does not exist or is not supported (names the op and tensor)."""


class GradientError(TexprError, ValueError):
    """A mistake in a gradient request: wrong head shape, integer output, ..."""

"""Exceptions of the differentiator."""


class NotDifferentiableError(TypeError):
    """Asked for a derivative that does not exist or is not supported (names the op and tensor)."""


class GradientError(ValueError):
    """A mistake in a gradient request: wrong head shape, integer output, ..."""

"""Imports every operator module so that each registers its operators (order = report order)."""
from . import elementwise, nn, nn_samples, shape, reduction, vision, losses  # noqa: F401

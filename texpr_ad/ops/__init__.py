"""The operator library (TOPI role) and its registry."""
from .registry import REGISTRY, OpEntry, Sample, get, register, register_no_compute, select

__all__ = ["REGISTRY", "OpEntry", "Sample", "get", "register", "register_no_compute", "select"]

"""The single registry of built-in operators and their metadata.

Each entry knows how to build a sample instance of the operator (te inputs and
outputs plus seeded NumPy arrays chosen away from non-differentiable points),
a NumPy reference forward, which inputs are differentiable, and its
conventions.  Operators without a compute form are registered with the reason,
so the coverage report can show them.
"""
from __future__ import annotations

import fnmatch
import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..te import Tensor


@dataclass(frozen=True)
class Sample:
    """One concrete instance of an operator."""

    inputs: tuple[Tensor, ...]          # placeholders, in call order
    outputs: tuple[Tensor, ...]
    arrays: tuple[np.ndarray, ...]      # one per input, dtypes matching the placeholders
    differentiable: tuple[bool, ...]    # one per input

    def __post_init__(self) -> None:
        assert len(self.inputs) == len(self.arrays) == len(self.differentiable)


@dataclass(frozen=True)
class OpEntry:
    name: str
    category: str                                   # "L1".."L5", "L10", "loss"
    sample: Callable[[str], Sample] | None          # float dtype -> Sample (seeded)
    reference: Callable[..., Sequence[np.ndarray]] | None  # arrays -> outputs
    notes: str = ""
    no_compute: str = ""                            # why there is no compute form
    tol: float = 1e-6                               # relative tolerance of float64 checks

    @property
    def has_compute(self) -> bool:
        return self.sample is not None


REGISTRY: dict[str, OpEntry] = {}


def rng_for(name: str) -> np.random.Generator:
    """A generator seeded by the operator name: samples are the same in every process."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def register(name: str, category: str, reference: Callable[..., Sequence[np.ndarray]], *,
             notes: str = "", tol: float = 1e-6
             ) -> Callable[[Callable[[str], Sample]], Callable[[str], Sample]]:
    """Decorator registering `sample(dtype) -> Sample` as operator `name`."""
    def deco(fn: Callable[[str], Sample]) -> Callable[[str], Sample]:
        if name in REGISTRY:
            raise ValueError(f"operator {name!r} is registered twice")
        REGISTRY[name] = OpEntry(name, category, fn, reference, notes, "", tol)
        return fn
    return deco


def register_no_compute(name: str, category: str, reason: str) -> None:
    if name in REGISTRY:
        raise ValueError(f"operator {name!r} is registered twice")
    REGISTRY[name] = OpEntry(name, category, None, None, "", reason)


def get(name: str) -> OpEntry:
    _load()
    if name not in REGISTRY:
        raise KeyError(f"no operator {name!r} in the registry; `texpr-ad coverage` lists them")
    return REGISTRY[name]


def select(pattern: str = "*") -> list[OpEntry]:
    """Entries whose name matches the glob (comma-separated globs allowed), in registry order."""
    _load()
    pats = [p.strip() for p in pattern.split(",") if p.strip()]
    return [e for e in REGISTRY.values() if any(fnmatch.fnmatchcase(e.name, p) for p in pats)]


def _load() -> None:
    from . import library  # noqa: F401  (registers every operator on import)

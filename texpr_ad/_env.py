"""Debug flags read from the environment, with a context manager for tests.

TEXPR_DEBUG levels: 1 prints derived adjoints, 2 adds kernel plans, 3 the generated source.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

_overrides: dict[str, int] = {}


def debug_level() -> int:
    if "debug" in _overrides:
        return _overrides["debug"]
    try:
        return int(os.environ.get("TEXPR_DEBUG", "0") or 0)
    except ValueError:
        return 0


@contextlib.contextmanager
def flags(debug: int | None = None) -> Iterator[None]:
    """Temporarily set debug flags: `with flags(debug=2): ...`."""
    old = dict(_overrides)
    if debug is not None:
        _overrides["debug"] = debug
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(old)

"""Checking the list arguments of the bridge's public functions.

A single name or tensor where a list is expected is a common slip: iterating a string gives its
characters, and a tensor is indexable forever.  `as_list` takes one item as a list of one (or
refuses it, where the function mirrors a TVM signature that wants a list), and refuses anything
else with an error naming the argument and what it takes.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any, Callable

from ..errors import TexprError


class BridgeArgumentError(TexprError, TypeError):
    """A bridge function got an argument of the wrong kind (names the argument and the fix)."""


def as_list(value: Any, what: str, is_item: Callable[[Any], bool], items: str,
            single: bool = True) -> list[Any]:
    """`value` as a list of items (`is_item`; `items` describes them, plural): one item is
    `[value]` (or refused, with `single=False`), any other iterable is listed and each element
    checked."""
    if is_item(value):
        if single:
            return [value]
        raise BridgeArgumentError(f"{what} must be a list of {items}; wrap a single one as [x]")
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        got = list(value)
        bad = [x for x in got if not is_item(x)]
        if not bad:
            return got
        value = bad[0]
    raise BridgeArgumentError(f"{what} takes {items}{' (or one alone)' if single else ''}, got "
                              f"{type(value).__name__} {_short(value)}")


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def is_index(v: Any) -> bool:
    """An integer position (not a bool)."""
    return isinstance(v, Integral) and not isinstance(v, bool)


def is_tvm_tensor(v: Any) -> bool:
    """A `tvm.te.Tensor`."""
    import tvm
    return isinstance(v, tvm.te.Tensor)


def is_te_tensor(v: Any) -> bool:
    """A texpr_ad `te` Tensor."""
    from ..te.tensor import Tensor
    return isinstance(v, Tensor)


__all__ = ["BridgeArgumentError", "as_list", "is_index", "is_te_tensor", "is_tvm_tensor"]

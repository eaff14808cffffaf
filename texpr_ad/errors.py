"""The root of texpr_ad's exceptions.

Every mistake the library reports derives from `TexprError` (and from the builtin that fits it,
`ValueError` or `TypeError`), so a caller can catch everything texpr_ad raises on purpose with
one clause, and a test can tell a reported mistake from a crash.
"""


class TexprError(Exception):
    """A mistake texpr_ad detected and explained (the message names the tensor, argument or op)."""


class TexprWarning(UserWarning):
    """Something texpr_ad worked around but you should know about (e.g. a damaged cache file)."""

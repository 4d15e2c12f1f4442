"""``jitorch.backends.mkldnn``: oneDNN, which jitorch does not use (its CPU kernels are its own code)."""

from __future__ import annotations

import sys

from . import flags as _flags


def is_available():
    """Whether oneDNN can be used: never, jitorch does not call it."""
    return False


class _MkldnnModule(_flags.FlagModule):
    enabled = _flags.Flag(True, "set_enabled_mkldnn", "Whether oneDNN may be used (no effect: it never is).")


sys.modules[__name__].__class__ = _MkldnnModule

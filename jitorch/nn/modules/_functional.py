"""``F``: ``jitorch.nn.functional`` looked up at call time.

nn.functional is written alongside the modules; binding it lazily lets
``jitorch.nn`` import even when functional cannot, and breaks any import cycle
between the two.
"""

from __future__ import annotations

import importlib


class _LazyFunctional:
    """Attribute access forwards to ``jitorch.nn.functional`` (imported on first use)."""

    __slots__ = ()

    def __getattr__(self, name):
        return getattr(importlib.import_module("jitorch.nn.functional"), name)


F = _LazyFunctional()

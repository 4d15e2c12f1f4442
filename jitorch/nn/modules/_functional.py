"""``F``: ``jitorch.nn.functional`` looked up at call time.

nn.functional is written alongside the modules; binding it lazily lets
``jitorch.nn`` import even when functional cannot, and breaks any import cycle
between the two.
"""

from __future__ import annotations

import importlib


class _LazyFunctional:
    """Attribute access forwards to ``jitorch.nn.functional``, imported on first use and then kept: every
    module's forward looks its function up here, and ``import_module`` costs more than a small op's kernel."""

    __slots__ = ()

    def __getattr__(self, name):
        global _MODULE
        if _MODULE is None:
            _MODULE = importlib.import_module("jitorch.nn.functional")
        return getattr(_MODULE, name)


_MODULE = None
F = _LazyFunctional()

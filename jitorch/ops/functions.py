"""The registry's generated functions as a module (``functions.zeros``, ``functions.where``, ...), for code
below the public namespace that is written in jitorch ops: derivative rules, composites, decompositions.
They import this instead of ``jitorch``, which sits above them; the functions exist once
`registry.install` has run (when ``jitorch`` is imported), before any of them is called."""

from __future__ import annotations

from .registry import FUNCTIONS


def __getattr__(name):
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise AttributeError(f"no op function {name!r} in the registry") from None

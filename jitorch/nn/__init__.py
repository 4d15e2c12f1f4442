"""Neural-network building blocks: modules, layers, losses, ``functional``, ``init`` and ``utils``.

``functional`` is imported on first access (``jitorch.nn.functional``), so
that the module system imports even while functional cannot.
"""

import importlib

from . import init, utils  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Parameter  # noqa: F401

__all__ = ["Parameter", "init", "utils", "functional", "parallel", *_modules_all]


def __getattr__(name):
    # parallel loads jitorch.distributed, which needs the whole library
    if name in ("functional", "parallel"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

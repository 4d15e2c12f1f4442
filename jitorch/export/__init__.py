"""Export compiled graphs: `jitorch.export(fn, args)` gives an `ExportedProgram` that saves to one
file, loads back without the source (`load`), and builds a C library (`ExportedProgram.to_c_library`).

This package is itself callable: ``jitorch.export(fn, args, kwargs=None, dynamic_shapes=None)``.
"""

from __future__ import annotations

import sys
import types

from .capture import export
from .dynamic import Dim
from .errors import ExportError
from .archive import FORMAT
from .program import ExportedModule, ExportedProgram, load
from ..serialization import register_format

register_format(FORMAT, load)  # jitorch.load of an exported program


class _CallableModule(types.ModuleType):
    """``jitorch.export`` is both this package and the `export` function."""

    def __call__(self, fn, args, kwargs=None, dynamic_shapes=None):
        return export(fn, args, kwargs, dynamic_shapes)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Dim", "ExportError", "ExportedModule", "ExportedProgram", "export", "load"]

"""TraceError, and finding the user's line a trace stopped at."""

from __future__ import annotations

import linecache
import os
import sys

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TraceError(RuntimeError):
    """A function cannot be traced into a graph (it reads tensor data in Python,
    or calls an op whose output shape depends on the data). The message names
    the operation and the user's file and line."""


class StateWriteError(TraceError):
    """A traced function stored a tensor it computed in Python state (``self.mask = ...`` in a module's
    ``forward``). The stored tensor is taken back; the call runs eagerly, which stores a real one, and the
    next call traces again."""


def _in_jitorch(frame):
    name = frame.f_code.co_filename
    # generated op wrappers are named "<jitorch op ...>"
    return name.startswith("<jitorch") or os.path.abspath(name).startswith(_PACKAGE + os.sep)


def user_frame(skip=1):
    """(frame, the jitorch function it called) for the innermost frame outside jitorch."""
    frame = sys._getframe(skip)
    inner = None
    while frame is not None and _in_jitorch(frame):
        inner = frame.f_code.co_name
        frame = frame.f_back
    return frame, inner


# How the user's call looks, by the name of the jitorch function it entered.
CALLS = {
    "__bool__": "bool()", "__int__": "int()", "__float__": "float()", "__index__": "using a tensor as an index",
    "__array__": "conversion to a NumPy array", "__format__": "formatting", "__getitem__": "indexing",
    "getitem": "indexing",  # (``Tensor.__getitem__`` is `ops.indexing.getitem` itself)
    "__setitem__": "index assignment", "__iter__": "iteration", "__len__": "len()", "data": "assigning to .data",
}


def describe_call(name):
    """``bool()``, ``.item()``, ``nonzero()``: the user's call, from the jitorch function it entered."""
    if name in CALLS:
        return CALLS[name]
    return f".{name}()" if name in ("item", "tolist", "numpy") else f"{name}()"


def where(frame):
    """``file:line: source`` of a frame, for messages."""
    if frame is None:
        return "<unknown location>"
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" + (f": `{line}`" if line else "")


def trace_error(op_name, why):
    """A TraceError naming the user's call (and the op inside it that failed, if another),
    where it was made, and ``why`` it cannot be traced."""
    frame, inner = user_frame(2)
    called = describe_call(inner) if inner else f"{op_name}()"
    via = f" (in its {op_name} op)" if inner and inner != op_name else ""
    return TraceError(f"{called}{via} at {where(frame)}: {why}")

"""The error of exporting and loading."""

from __future__ import annotations

from ..serialization import SerializationError


class ExportError(SerializationError):
    """A function that cannot be exported, or a file that is not a loadable exported program.

    The message says what is wrong: the op, the dim, the member of the file,
    what was expected and what was found. A `SerializationError` (and so a
    RuntimeError): whatever ``jitorch.load`` refuses is one.
    """

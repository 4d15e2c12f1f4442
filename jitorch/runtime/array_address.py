"""An array's data pointer, for native code that reads or writes the array in place.

Read from the array object itself (``PyArrayObject_fields.data``, the first field after the object header, which
NumPy's ``PyArray_DATA`` reads): 0.16 µs, where ctypes' view of the buffer took 0.5, ``__array_interface__`` 1.0
and ``a.ctypes.data`` 1.0-2 (eager kernels pass three to six addresses per call). A NumPy whose array objects are
laid out otherwise (checked once, at import) gets ``a.ctypes.data``.
"""

from __future__ import annotations

import ctypes

import numpy as np

_DATA_OFFSET = object.__basicsize__
_word = ctypes.c_void_p.from_address


def data_address(a):
    """The address of ``a``'s first element (an int; NumPy's ``PyArray_DATA``, which ``__array_interface__``
    gives), for any array: strided, read-only or empty."""
    return _word(id(a) + _DATA_OFFSET).value or 0


_probe = np.empty(4)
if data_address(_probe[1:]) != _probe[1:].ctypes.data:  # (a NumPy of another layout: the slow, public way)
    def data_address(a):  # noqa: F811 - chosen once, at import
        """The address of ``a``'s first element (``a.ctypes.data``)."""
        return a.ctypes.data

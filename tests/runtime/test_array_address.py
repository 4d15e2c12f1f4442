"""`runtime.array_address.data_address`: an array's data pointer read from the array object, NumPy's
``PyArray_DATA`` (what ``__array_interface__`` gives), for every kind of array."""

import numpy as np
import pytest

from jitorch.runtime import array_address


@pytest.mark.parametrize("make", [
    lambda: np.arange(12, dtype=np.float32),
    lambda: np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],
    lambda: np.arange(12, dtype=np.float64).reshape(3, 4)[1:, 1:],
    lambda: np.arange(12, dtype=np.int8)[::-3],
    lambda: np.broadcast_to(np.float32(1), (4,)),
    lambda: np.empty(0, np.float32),
    lambda: np.zeros((), np.float64),
    lambda: np.arange(4, dtype=np.int64).view("datetime64[s]"),
    lambda: np.frombuffer(bytes(16), np.uint8)[4:],  # (read-only memory of another object)
])
def test_data_address_is_numpys_data_pointer(make):
    a = make()
    assert array_address.data_address(a) == a.__array_interface__["data"][0]


def test_data_address_reads_the_array_object_on_this_numpy():
    # (the probe at import found the field: the fast reader, not the public fallback, serves this NumPy)
    assert "ctypes" not in array_address.data_address.__code__.co_names

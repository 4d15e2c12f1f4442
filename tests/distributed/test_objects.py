"""The object collectives' encoding: JSON that gives back each value as the type it left as, never pickle."""

import enum
import math

import numpy as np
import pytest

from jitorch.distributed import objects


@pytest.mark.parametrize("value", [None, True, 0, -2 ** 70, 1.5, "naïve", [], (), {}, b"\x00\xff",
                                   [1, (2, 3.0), {"a": [None, False]}], {1: "one", (2, "x"): [b"b"], None: 0.5,
                                                                          "tuple": {"dict": 1}}, ((),)])
def test_values_come_back_equal_and_of_the_same_types(value):
    back = objects.decode(objects.encode(value))
    assert back == value and repr(back) == repr(value)


def test_nan_and_infinities_travel():
    back = objects.decode(objects.encode([math.nan, math.inf, -math.inf]))
    assert math.isnan(back[0]) and back[1:] == [math.inf, -math.inf]


class Colour(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [{1, 2}, Colour.RED, np.float64(1.0), [object()], {"k": bytearray(b"x")}])
def test_a_type_that_would_arrive_as_another_raises_before_sending(value):
    with pytest.raises(TypeError, match="jitorch sends objects as JSON, never pickled"):
        objects.encode(value, "all_gather_object")


@pytest.mark.parametrize("data", [b'{"set": [1]}', b'{"tuple": [], "dict": []}', b'{"dict": [[[1], 2]]}',
                                  b'{"bytes": "!!"}'])
def test_bytes_no_encoder_made_are_refused(data):
    with pytest.raises((ValueError, TypeError)):
        objects.decode(data)

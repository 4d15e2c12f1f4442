"""isin of a number beside a tensor, against torch."""

import pytest
import torch

import jitorch


@pytest.mark.parametrize("call", [
    lambda T: T.isin(T.tensor([0, 255, 3], dtype=T.uint8), -1),
    lambda T: T.isin(T.tensor([0, 255, 3], dtype=T.uint8), 256),
    lambda T: T.isin(-1, T.tensor([255, 1], dtype=T.uint8)),
    lambda T: T.isin(T.tensor([0.1, 0.2]), 0.1),
    lambda T: T.isin(0.1, T.tensor([0.1])),
    lambda T: T.isin(T.tensor([1, 2]), 2.5),
    lambda T: T.isin(T.tensor([0.1, 0.2], dtype=T.float64), 0.1),
])
def test_isin_of_a_number_wraps_it_into_the_result_type_as_torch_seed_7964168(call):
    """Fuzz seed 7964168 (``isin(x.to(uint8), -1)``): jitorch compared the number's own value, torch the number in
    the result type with the tensor (-1 beside uint8 is 255; 0.1 beside float32 is float32's 0.1, so
    ``isin(float32 [0.1], 0.1)`` was False)."""
    assert call(jitorch).tolist() == call(torch).tolist()

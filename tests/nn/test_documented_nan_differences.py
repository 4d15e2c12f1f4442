"""Two answers that differ from torch's CPU kernels on infinite and NaN inputs, as
docs/differences-from-torch.md says: gelu(+inf), and max_pool's index of a window holding NaN."""

import math

import torch

import jitorch as jt


def test_gelu_of_plus_inf_is_inf_where_torch_gives_nan():
    x = [math.inf, -math.inf, 3.0]
    got = jt.nn.functional.gelu(jt.tensor(x)).tolist()
    expected = torch.nn.functional.gelu(torch.tensor(x)).tolist()
    assert got[0] == math.inf and math.isnan(expected[0])
    assert math.isnan(got[1]) and math.isnan(expected[1])
    assert math.isclose(got[2], expected[2], rel_tol=1e-6)


def test_max_pool_index_of_a_window_holding_nan_is_its_first_nan():
    x = [[[[math.nan, 1.0], [math.nan, 2.0]]]]
    values, indices = jt.nn.functional.max_pool2d(jt.tensor(x), 2, return_indices=True)
    t_values, t_indices = torch.nn.functional.max_pool2d(torch.tensor(x), 2, return_indices=True)
    assert math.isnan(values.item()) and math.isnan(t_values.item())
    assert (indices.item(), t_indices.item()) == (0, 2)

"""cat's eager shortcut (`shape_ops._cat_fast`) leaves to NumPy's concatenate the tests of dims and sizes: what
NumPy refuses (numbers of dims that differ, a 0-d tensor, sizes that differ off the dim, a 1-D empty tensor
among tensors of more dims, which torch skips) goes to the general path, which gives torch's result or error;
what it joins is torch's result, in a new contiguous tensor."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops import shape_ops

CASES = [
    ([(2, 3), (2, 4)], 1, True),
    ([(2, 3), (4, 3)], 0, True),
    ([(2, 3), (4, 3)], -2, True),
    ([(0,), (3,)], 0, True),  # (1-D empties among 1-D tensors add nothing, as skipped)
    ([(3,), (0,)], -1, True),
    ([(0,), (0,)], 0, True),
    ([(0,), (2, 3)], 0, False),  # (skipped by torch: the general path)
    ([(2, 3), (0,)], 0, False),
    ([(0,), (2, 3)], 1, False),
    ([(2, 3), (2,)], 0, False),  # (torch's "Tensors must have same number of dimensions")
    ([(), (2,)], 0, False),  # (torch's zero-dimensional error)
    ([(2,), ()], 0, False),
    ([(2, 3), (2, 4)], 0, False),  # (torch's "Sizes of tensors must match")
    ([(2, 3)], 2, False),  # (dim out of range)
]


@pytest.mark.parametrize("shapes, dim, served", CASES)
def test_cat_shortcut_serves_what_numpy_joins_and_the_general_path_the_rest(shapes, dim, served):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs = [jt.tensor(a) for a in arrays]
    fast = shape_ops._cat_fast((xs, dim))
    assert (fast is not None) == served
    try:
        want = torch.cat([torch.tensor(a) for a in arrays], dim)
    except Exception as e:  # noqa: BLE001 (torch's error is what jitorch must raise)
        with pytest.raises(type(e)):
            jt.cat(xs, dim)
        return
    got = jt.cat(xs, dim)
    assert tuple(got.shape) == tuple(want.shape) and got.is_contiguous()
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    if served:
        np.testing.assert_array_equal(fast.numpy(), want.numpy())
        assert fast.stride() == got.stride()


def test_cat_shortcut_leaves_tensors_that_require_grad_to_the_general_path():
    x = jt.ones(2, 3, requires_grad=True)
    y = jt.ones(2, 3)
    assert shape_ops._cat_fast(([y, x], 0)) is None
    out = jt.cat([y, x], 0)
    assert out.grad_fn is not None
    with jt.no_grad():
        assert shape_ops._cat_fast(([y, x], 0)) is not None

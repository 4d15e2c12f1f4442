"""In-place ops through a view whose dims run across several dims of its base (``flatten``, ``view(-1)``),
against torch: the write reaches the base's history (`ops.views.compact_window` merges the base's dims that
are adjacent in memory), and the gradients of the base's leaf and of the written values are torch's.

Fuzz seed 2200491: ``T.flatten(x1, end_dim=1).index_put_((idx,), vals, True)`` on a float16 clone of a
leaf raised "an in-place operation through a view that reaches memory outside its base".
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops.views import compact_window

INDEX = [0, 3, 7, 6, 2, 4, 1]


def _index_put(T, base, values, accumulate):
    T.flatten(base, end_dim=1).index_put_((T.tensor(INDEX),), values, accumulate)


CASES = {
    "flatten index_put_ accumulate": (lambda T, b, v: _index_put(T, b, v, True), (2, 4), (7,)),
    "flatten index_put_": (lambda T, b, v: _index_put(T, b, v, False), (2, 4), (7,)),
    "view(-1) add_": (lambda T, b, v: b.view(-1).add_(v), (2, 4), (8,)),
    "partial flatten mul_": (lambda T, b, v: b.flatten(1).mul_(v), (2, 3, 4), (12,)),
    "flatten of a row range copy_": (lambda T, b, v: b[1:].flatten().copy_(v), (3, 4), (8,)),
    "flatten of a flatten sub_": (lambda T, b, v: b.flatten(1).flatten()[2:9].sub_(v), (2, 3, 2), (7,)),
}


def _run(T, case, dtype):
    write, shape, value_shape = CASES[case]
    dt = getattr(T, dtype)
    rng = np.random.default_rng(sum(map(ord, case)))
    leaf = T.tensor(rng.uniform(-2, 2, shape).astype(np.float32)).to(dt).requires_grad_()
    values = T.tensor(rng.uniform(-2, 2, value_shape).astype(np.float32)).to(dt).requires_grad_()
    base = leaf.clone()
    write(T, base, values * 1)
    weight = T.tensor(rng.uniform(-1, 1, shape).astype(np.float32)).to(dt)
    (base * base * weight).sum().backward()
    return [t.detach().float().numpy() for t in (base, leaf.grad, values.grad)]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_in_place_through_a_view_across_base_dims_matches_torch(case, dtype):
    got, want = _run(jt, case, dtype), _run(torch, case, dtype)
    tol = 1e-2 if dtype == "float16" else 1e-5
    for name, g, w in zip(("values", "leaf grad", "values grad"), got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{case} {dtype}: {name}")


def test_compact_window_of_a_flatten_walks_the_merged_base_dims():
    base = jt.arange(24.0).reshape(2, 3, 4)
    assert compact_window(base, base.flatten()) == ((1,), 0)
    assert compact_window(base, base.flatten(1)[1, 3:9]) == ((1,), 15)
    assert compact_window(base, base.view(6, 4).t()) == ((1, 4), 0)
    strided = jt.arange(15.0)
    strided.as_strided_((2, 3), (6, 2), 1)  # every other element: 1, 3, ..., 11
    assert compact_window(strided, strided.as_strided((3,), (4,), 1)) == ((2,), 0)
    column_major = jt.arange(8.0)
    column_major.as_strided_((4, 2), (1, 4))  # memory order is no row-major order of the base
    assert compact_window(column_major, column_major.as_strided((8,), (1,), 0)) is None


def test_in_place_across_base_dims_out_of_index_order_is_refused_before_writing():
    leaf = jt.arange(8.0).reshape(2, 4).requires_grad_()
    base = leaf.t().clone()  # column-major: a flatten of its memory is no window of its row-major layout
    flat = base.t().view(-1)
    with pytest.raises(RuntimeError, match="memory order is not their index order"):
        flat.add_(1)
    assert base.tolist() == leaf.t().tolist()

"""Strides of copies, casts and ``_like`` factories (torch's preserve_format, empty_like's rule: the input's own
strides where it is non-overlapping and dense, else dense strides in its order), eager and compiled, against torch.
Inputs whose size-1 or empty dims have other strides than contiguous ones (``ones(1, 5).t()``) are drawn by
tests/ops/test_trust46.py."""

import pytest
import torch

import jitorch

INPUTS = {
    "permuted": lambda L: L.ones(2, 3, 4).permute(2, 0, 1),
    "transposed": lambda L: L.ones(3, 4).t(),
    "channels-last image": lambda L: L.ones(2, 4, 5, 3).permute(0, 3, 1, 2),
    "expanded": lambda L: L.ones(3, 1).expand(3, 4),
    "sliced with a step": lambda L: L.ones(4, 6)[:, ::2],
    "a size-1 dim of a non-dense slice": lambda L: L.ones(3, 8, 4)[:, :1, :],
    "a column of a wider matrix": lambda L: L.ones(5, 7)[:, :1],
    "empty, contiguous": lambda L: L.ones(0, 3),
}
COPIES = {
    "clone": lambda L, x: x.clone(),
    "contiguous": lambda L, x: x.contiguous(),
    "empty_like": lambda L, x: L.empty_like(x),
    "zeros_like": lambda L, x: L.zeros_like(x),
    "full_like": lambda L, x: L.full_like(x, 2.0),
    "to(float64)": lambda L, x: x.to(L.float64),
    "half()": lambda L, x: x.half(),
    "type_as(int32)": lambda L, x: x.type_as(L.zeros(1, dtype=L.int32)),
}


@pytest.mark.parametrize("copy", COPIES)
@pytest.mark.parametrize("case", INPUTS)
def test_copies_casts_and_like_factories_take_torchs_strides_eager_and_compiled(case, copy):
    make, op = INPUTS[case], COPIES[copy]
    want = op(torch, make(torch)).stride()
    x = make(jitorch)
    assert op(jitorch, x).stride() == want
    compiled = jitorch.compile(lambda t: op(jitorch, t))
    for _ in range(2):  # the tracing call, then the compiled entry's
        assert compiled(x).stride() == want

"""cdist of half-type tensors against torch: torch's kernel has no half types, but runs only where there are
distances to compute from elements, so empty operands give torch's empty or zero result."""

import itertools

import pytest
import torch

import jitorch as jt

SHAPES = [((1, 0), (1, 0)), ((0, 3), (0, 3)), ((0, 3), (2, 3)), ((2, 3), (0, 3)), ((2, 0), (3, 0)), ((2, 3), (2, 3)),
          ((2, 1, 0), (2, 4, 0))]


def _outcome(T, a, b, p, dtype="float16"):
    try:
        r = T.cdist(T.zeros(a, dtype=getattr(T, dtype)), T.zeros(b, dtype=getattr(T, dtype)), p)
        return tuple(r.shape), str(r.dtype).split(".")[-1], r.tolist()
    except Exception as e:
        return type(e).__name__, str(e)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("shapes,p", list(itertools.product(SHAPES, [1.0, 2.0, 0.0, float("inf"), -1.0])))
def test_cdist_of_empty_half_tensors_as_torch_seed_8400604(shapes, p, dtype):
    """Seed 8400604 of 40 statements: ``T.cdist(v6, v6, 1.0)`` of a float16 [1, 0] tensor raised jitorch's
    ``"cdist" not implemented for 'Half'``; torch returns [[0.]] (its kernel is not reached), and checks p first.
    With no columns and p = inf (any dtype) jitorch's max of nothing raised where torch gives zeros."""
    assert _outcome(jt, *shapes, p, dtype) == _outcome(torch, *shapes, p, dtype)

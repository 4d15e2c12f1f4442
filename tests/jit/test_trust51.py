"""Compiled calls against eager and torch where session 50's mechanisms meet unusual returns and layouts."""

import numpy as np
import pytest
import torch

import jitorch as jt

SPLITS = {"unbind": lambda t: t.unbind(0), "split": lambda t: t.split(2), "chunk": lambda t: t.chunk(2, 1),
          "split sizes": lambda t: t.split([1, 3], 1)}


@pytest.mark.parametrize("name", list(SPLITS))
def test_compiled_unbind_split_and_chunk_return_a_tuple_as_eager(name):
    """The tracer's multi-view ops (`Tracer.record_view`) returned a list, so a compiled call gave a list where eager
    jitorch and torch give a tuple (``f(x) + (y,)`` raised, ``f(x) == eager`` was False)."""
    fn = SPLITS[name]
    x = jt.arange(12.0).view(3, 4)
    compiled = jt.compile(fn)
    for got in (compiled(x), compiled(x)):  # (the traced call's result and the warm call's)
        want = fn(torch.arange(12.0).view(3, 4))
        assert type(got) is tuple and type(fn(x)) is tuple and type(want) is tuple
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.numpy(), w.numpy())

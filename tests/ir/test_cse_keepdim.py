"""CSE of reductions that differ only in ``keepdim`` (`jitorch.ir.passes.cse`): the later one becomes a view
of the earlier one's result, so its kernel does not read the whole input again (a batch norm's backward took
the mean of the convolution's output with ``keepdim=True`` that its forward had taken without)."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch.ir.passes import cse
from tests.ir.test_passes import graph_of, text


def test_mean_with_keepdim_is_a_view_of_the_mean_without():
    g = graph_of("""
        graph(%x: f32[4, 3, 5]):
          %0 : f32[3] = mean(%x, dim=[0, 2])
          %1 : f32[1, 3, 1] = mean(%x, dim=[0, 2], keepdim=True)
          %2 : f32[4, 3, 5] = sub(%x, %1)
          return (%0, %2)
    """)
    assert cse.run(g) == 1
    assert str(g) == text("""
        graph(%x: f32[4, 3, 5]):
          %0 : f32[3] = mean(%x, dim=[0, 2])
          %3 : f32[1, 3, 1] = view(%0, size=[1, 3, 1])
          %2 : f32[4, 3, 5] = sub(%x, %3)
          return (%0, %2)
    """)


def test_sum_without_keepdim_after_one_with_it_and_a_dtype():
    g = graph_of("""
        graph(%x: f32[4, 3]):
          %0 : f64[4, 1] = sum(%x, dim=[1], keepdim=True, dtype=f64)
          %1 : f64[4] = sum(%x, dim=[1], keepdim=False, dtype=f64)
          %2 : f64[4] = exp(%1)
          return (%0, %2)
    """)
    assert cse.run(g) == 1
    assert [n.op.name for n in g.nodes] == ["sum", "view", "exp"]


def test_a_returned_reduction_is_not_made_a_view_of_another_returned_one():
    """The call's outputs are fresh tensors: two returned results may not share memory."""
    g = graph_of("""
        graph(%x: f32[4, 3]):
          %0 : f32[4, 1] = sum(%x, dim=[1], keepdim=True)
          %1 : f32[4] = sum(%x, dim=[1])
          return (%0, %1)
    """)
    assert cse.run(g) == 0


@pytest.mark.parametrize("second", [
    "f32[1, 5] = mean(%x, dim=[0], keepdim=True)",                            # other dims
    "f32[3, 1] = sum(%x, dim=[1], keepdim=True)",                              # another op
    "f64[3, 1] = mean(%x, dim=[1], keepdim=True, dtype=f64)",        # another dtype
])
def test_reductions_that_differ_otherwise_are_kept(second):
    g = graph_of(f"""
        graph(%x: f32[3, 5]):
          %0 : f32[3] = mean(%x, dim=[1])
          %1 : {second}
          return (%0, %1)
    """)
    assert cse.run(g) == 0


def test_merged_keepdim_mean_gives_the_same_elements_compiled():
    def f(x):
        return x.mean((0, 2)) * 2, x - x.mean((0, 2), keepdim=True)
    x = jt.randn(4, 3, 5, generator=jt.Generator().manual_seed(0))
    a, b = jt.compile(f)(x)
    ea, eb = f(x)
    assert jt.equal(b, x - (a / 2).reshape(1, 3, 1))  # the kept-dims mean is the other's, element for element
    np.testing.assert_allclose(a.numpy(), ea.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), eb.numpy(), rtol=1e-6, atol=1e-6)

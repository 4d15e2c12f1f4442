"""An in-place write into an integer or bool tensor records nothing, as torch's, even from values that require
grad, and asks nothing of the views it goes through: a compiled gradient run refused ``v1[0:] = v3`` into a view
of an expanded bool input (jitorch's in-place-through-a-view error), which eager ran (fuzz seed 5590744 of
``--edges 0.4 --out-views 0.4 --regions 0.2``)."""

import pytest
import torch

import jitorch as jt


def _program(lib):
    def fn(x0, x1, x2):
        v0 = lib.concat([x2, x0, x2], 0)
        v1 = x1.narrow(0, 0, 1)
        v1[0:] = v0[-2:-1:1]
        return x1 * 1
    return fn


@pytest.mark.parametrize("dtype", ["bool", "int64"])
def test_a_write_into_a_view_of_an_expanded_nondifferentiable_input_compiles_as_eager_runs(dtype):
    results = []
    for lib, compiled in ((torch, False), (jt, False), (jt, True)):
        x0, x2 = lib.arange(5.0).requires_grad_(), (lib.arange(5.0) - 2.5).requires_grad_()
        x1 = lib.tensor([0], dtype=getattr(lib, dtype)).expand(5)
        fn = jt.compile(_program(lib)) if compiled else _program(lib)
        out = fn(x0, x1, x2)
        assert not out.requires_grad and not x1.requires_grad
        results.append((out.tolist(), x1.tolist()))
    assert results[0] == results[1] == results[2]


def test_an_integer_target_written_from_values_requiring_grad_has_no_history():
    x = jt.arange(3.0).requires_grad_()
    for dtype in (jt.int64, jt.bool):
        target = jt.zeros(3, dtype=dtype)
        target.copy_(x * 2)
        assert target.grad_fn is None and not target.requires_grad

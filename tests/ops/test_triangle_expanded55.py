"""triu_/tril_ of an expanded tensor write their zeros through the shared memory as torch's do (fuzz seed 5592928
of ``--edges``: ``x0.triu_(2)`` of an expanded input raised the overlap error torch does not); with history the
write is made and backward raises torch's error, and a compiled function runs such a write eagerly."""

import numpy as np
import pytest
import torch

import jitorch as jt


def _written(lib, shape, expanded, op, diagonal):
    base = lib.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    view = base.expand(*expanded)
    getattr(view, op)(diagonal)
    return base.tolist(), view.tolist()


@pytest.mark.parametrize("shape,expanded", [((1, 4), (4, 4)), ((4, 1), (4, 4)), ((1, 3, 1), (2, 3, 5)),
                                            ((2, 1, 4), (2, 3, 4)), ((1, 1), (3, 3))])
@pytest.mark.parametrize("op", ["triu_", "tril_"])
def test_a_triangle_written_into_an_expanded_tensor_leaves_torchs_memory(shape, expanded, op):
    for diagonal in (-2, -1, 0, 1, 2):
        assert _written(jt, shape, expanded, op, diagonal) == _written(torch, shape, expanded, op, diagonal)


def test_with_history_the_write_is_made_and_backward_raises_torchs_error():
    for lib in (jt, torch):
        view = (lib.arange(1.0, 5.0).reshape(1, 4).requires_grad_() * 1).expand(4, 4)
        view.triu_(1)
        assert view.tolist() == [[0.0] * 4] * 4
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            view.sum().backward()


def test_a_compiled_function_runs_the_write_eagerly_with_eagers_result():
    def f(b):
        x = b.expand(4, 4)
        x.triu_(1)
        return x * 2
    base, expected_base = jt.arange(1.0, 5.0).reshape(1, 4), torch.arange(1.0, 5.0).reshape(1, 4)
    with pytest.warns(UserWarning, match="running f eagerly: triu_ writes into an expanded tensor"):
        got = jt.compile(f)(base)
    assert got.tolist() == f(expected_base).tolist() and base.tolist() == expected_base.tolist()

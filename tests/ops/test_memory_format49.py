"""Session 49: ``Tensor.contiguous/clone/to``, ``empty`` and the ``_like`` factories with ``memory_format=`` against
torch (values, strides, ``is_contiguous`` in each format, aliasing, torch's errors), eager and compiled; pointwise
results and ``cat`` of channels-last operands."""

import numpy as np
import pytest
import torch

import jitorch
from tests.runtime.test_channels_last49 import CASES, FORMATS, _both, _same

COPIES = {
    "contiguous": lambda L, x, f: x.contiguous(memory_format=f),
    "clone": lambda L, x, f: x.clone(memory_format=f),
    "to": lambda L, x, f: x.to(memory_format=f),
    "to(float64)": lambda L, x, f: x.to(L.float64, memory_format=f),
    "to(dtype=int32, copy)": lambda L, x, f: x.to(dtype=L.int32, copy=True, memory_format=f),
    "to(cpu)": lambda L, x, f: x.to("cpu", memory_format=f),
    "float()": lambda L, x, f: x.float(memory_format=f),
    "double()": lambda L, x, f: x.double(memory_format=f),
    "empty_like": lambda L, x, f: L.empty_like(x, memory_format=f).fill_(1.5),
    "zeros_like": lambda L, x, f: L.zeros_like(x, memory_format=f),
    "ones_like": lambda L, x, f: L.ones_like(x, dtype=L.float64, memory_format=f),
    "full_like": lambda L, x, f: L.full_like(x, 2.5, memory_format=f),
    "rand_like": lambda L, x, f: L.rand_like(x, memory_format=f).mul(0),
    "randn_like": lambda L, x, f: L.randn_like(x, memory_format=f).mul(0),
    "randint_like": lambda L, x, f: L.randint_like(x, 1, memory_format=f),
    "randint_like.low": lambda L, x, f: L.randint_like(x, 3, 4, memory_format=f),
}


def _outcome(call):
    try:
        return call(), None
    except (RuntimeError, TypeError) as e:
        return None, (type(e), str(e).replace("torch.", "jitorch."))


@pytest.mark.parametrize("copy", list(COPIES))
@pytest.mark.parametrize("fmt", FORMATS)
def test_copies_in_a_memory_format_are_torchs(copy, fmt):
    for shape, order, sliced in CASES[::3]:
        t, j = _both(shape, order, sliced)
        expected, error = _outcome(lambda: COPIES[copy](torch, t, getattr(torch, fmt)))
        got, got_error = _outcome(lambda: COPIES[copy](jitorch, j, getattr(jitorch, fmt)))
        assert got_error == error, (shape, order, sliced)
        if error is None:
            _same(expected, got)
            assert (got is j) == (expected is t), (shape, order, sliced)
            for name in FORMATS[:3]:
                assert got.is_contiguous(memory_format=getattr(jitorch, name)) == expected.is_contiguous(
                    memory_format=getattr(torch, name))


@pytest.mark.parametrize("copy", ["contiguous", "clone", "to(float64)", "zeros_like", "full_like"])
def test_copies_in_a_memory_format_compile_to_eagers_strides(copy):
    for shape, order, sliced in CASES[::4]:
        _, j = _both(shape, order, sliced)
        for fmt in (jitorch.contiguous_format, jitorch.channels_last, jitorch.channels_last_3d):
            if len(shape) != {jitorch.channels_last: 4, jitorch.channels_last_3d: 5}.get(fmt, len(shape)):
                continue
            fn = (lambda f: lambda x: COPIES[copy](jitorch, x, f) * 2)(fmt)
            eager, compiled = fn(j), jitorch.compile(fn)(j)
            assert compiled.stride() == eager.stride()
            np.testing.assert_array_equal(compiled.numpy(), eager.numpy())


def test_a_channels_last_format_of_another_rank_raises_torchs_error():
    for L in (torch, jitorch):
        x3, x4 = L.zeros(2, 3, 4), L.zeros(2, 3, 4, 5)
        for call, rank, name in [(lambda: x3.contiguous(memory_format=L.channels_last), 4, "channels_last"),
                                 (lambda: x3.clone(memory_format=L.channels_last), 4, "channels_last"),
                                 (lambda: x4.to(L.float64, memory_format=L.channels_last_3d), 5, "channels_last_3d"),
                                 (lambda: L.zeros_like(x3, memory_format=L.channels_last), 4, "channels_last"),
                                 (lambda: L.empty(2, 3, memory_format=L.channels_last), 4, "channels_last"),
                                 (lambda: L.empty(2, 3, 4, 5, memory_format=L.channels_last_3d), 5, "channels_last_3d")]:
            with pytest.raises(RuntimeError, match=f"^required rank {rank} tensor to use {name} format$"):
                call()
        assert x3.is_contiguous(memory_format=L.channels_last) is False


def test_memory_formats_torch_refuses_raise_its_errors():
    for L in (torch, jitorch):
        x = L.zeros(2, 3, 4, 5).transpose(1, 2)
        with pytest.raises(RuntimeError, match="^preserve memory format is unsupported by the contiguous operator$"):
            x.contiguous(memory_format=L.preserve_format)
        assert L.zeros(2, 3).contiguous(memory_format=L.preserve_format).stride() == (3, 1)
        with pytest.raises(RuntimeError, match="^unsupported memory format Preserve$"):
            L.empty(2, 3, memory_format=L.preserve_format)
        for call, name in [(lambda: x.contiguous(memory_format=1), "contiguous"),
                           (lambda: x.clone(memory_format="channels_last"), "clone"),
                           (lambda: x.is_contiguous(memory_format=1), "is_contiguous"),
                           (lambda: L.zeros_like(x, memory_format=0), "zeros_like")]:
            with pytest.raises(TypeError, match=f"^{name}\\(\\): argument 'memory_format' must be "
                                                f"{L.__name__}.memory_format, not"):
                call()
    with pytest.raises(TypeError, match="zeros\\(\\) got an unexpected keyword argument 'memory_format'"):
        jitorch.zeros(2, 3, 4, 5, memory_format=jitorch.channels_last)


POINTWISE = {
    "x + 1": lambda L, x, y: x + 1,
    "exp": lambda L, x, y: x.exp(),
    "relu": lambda L, x, y: L.relu(x),
    "x + y": lambda L, x, y: x + y,
    "y + x": lambda L, x, y: y + x,
    "x * y.float64": lambda L, x, y: x * y.double(),
    "x + bias": lambda L, x, y: x + L.ones(x.shape[1], *([1] * (x.ndim - 2))),
    "where": lambda L, x, y: L.where(x > 0, x, y),
    "cat dim 1": lambda L, x, y: L.cat([x, x], 1),
    "cat x, y": lambda L, x, y: L.cat([x, y], 0),
}


@pytest.mark.parametrize("op", list(POINTWISE))
@pytest.mark.parametrize("shape, fmt", [((2, 3, 4, 5), "channels_last"), ((2, 3, 1, 1), "channels_last"),
                                        ((2, 3, 2, 3, 4), "channels_last_3d"), ((1, 3, 4, 1), "channels_last")])
def test_pointwise_and_cat_of_channels_last_operands_are_laid_out_as_torchs(op, shape, fmt):
    data = np.random.RandomState(0).randn(*shape).astype(np.float32)
    results = []
    for L in (torch, jitorch):
        x = L.tensor(data).contiguous(memory_format=getattr(L, fmt))
        y = L.tensor(data[::-1].copy())
        results.append(POINTWISE[op](L, x, y))
    _same(*results, rtol=1e-6)
    x = jitorch.tensor(data).contiguous(memory_format=getattr(jitorch, fmt))
    y = jitorch.tensor(data[::-1].copy())
    fn = lambda a, b: POINTWISE[op](jitorch, a, b)  # noqa: E731
    compiled = jitorch.compile(fn)(x, y)
    assert compiled.stride() == results[1].stride()
    np.testing.assert_allclose(compiled.numpy(), results[1].numpy(), rtol=1e-6)


def test_cat_of_channels_last_inputs_is_channels_last_without_the_contiguous_fast_path():
    # cat's fast path made every result contiguous: torch's is channels-last where all inputs suggest it
    for L in (torch, jitorch):
        x = L.zeros(2, 3, 4, 5).contiguous(memory_format=L.channels_last)
        assert L.cat([x, x], 1).stride() == (120, 1, 30, 6)
        assert L.cat([x, L.zeros(2, 3, 4, 5)], 1).stride() == (120, 20, 5, 1)
        assert L.cat([L.zeros(2, 3, 4, 5), x], 1).stride() == (120, 20, 5, 1)


def test_resize_in_a_memory_format_restrides_as_torch():
    for L in (torch, jitorch):
        x = L.zeros(2, 3, 4, 5)
        assert x.resize_(2, 3, 4, 5, memory_format=L.channels_last).stride() == (60, 1, 15, 3)
        assert L.zeros(2, 3).resize_(3, 3, 4, 5, memory_format=L.channels_last).stride() == (60, 1, 15, 3)
        assert L.zeros(1).resize_(2, 3, 2, 2, 2, memory_format=L.channels_last_3d).stride() == (24, 1, 12, 6, 3)
        like = L.zeros(2, 3, 4, 5).contiguous(memory_format=L.channels_last)
        assert L.zeros(2, 3, 4, 5).resize_as_(like).stride() == (60, 20, 5, 1)
        assert L.zeros(2, 3, 4, 5).resize_as_(like, memory_format=L.channels_last).stride() == (60, 1, 15, 3)
        with pytest.raises(RuntimeError, match="^required rank 4 tensor to use channels_last format$"):
            L.zeros(2, 3).resize_(2, 3, memory_format=L.channels_last)
        with pytest.raises(RuntimeError, match="^Unsupported memory formatPreserve$"):
            L.zeros(2, 3).resize_(2, 3, memory_format=L.preserve_format)

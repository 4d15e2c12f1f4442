"""Run one call in torch and in jitorch and compare: values, gradients, a compiled run and errors.

A call is written once as ``fn(F, *tensors)`` (``F`` is torch's or jitorch's ``nn.functional``), so
the two libraries see the same arguments.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import jitorch as jt
import jitorch.nn.functional as JF
from tests.support import assert_close


def _leaves(lib, arrays, grad):
    """Tensors of ``lib`` (torch or jitorch) from NumPy arrays; floating ones require grad when ``grad``."""
    return [lib.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _seeded_grads(outs, lib):
    """A fixed cotangent per floating output, so that every output element's gradient path is checked."""
    total = 0
    for i, o in enumerate(outs):
        if o.dtype.is_floating_point and o.requires_grad:
            weights = np.cos(np.arange(o.numel(), dtype=np.float64) + i).reshape(tuple(o.shape)) + 1.5
            total = total + (o * lib.tensor(weights.astype(np.float64)).to(o.dtype)).sum()
    return total


def check(fn, *arrays, grad=True, atol=1e-5, rtol=1e-5, compiled=False):
    """``fn(F, *tensors)`` in jitorch equals torch's, and so do the gradients of its floating inputs.

    With ``compiled``, ``jitorch.compile(fn)`` equals jitorch's eager result too (values and gradients).
    Returns jitorch's outputs.
    """
    arrays = [np.asarray(a) for a in arrays]
    t_in, j_in = _leaves(torch, arrays, grad), _leaves(jt, arrays, grad)
    t_out, j_out = _outputs(fn(TF, *t_in)), _outputs(fn(JF, *j_in))
    assert len(t_out) == len(j_out)
    for t, j in zip(t_out, j_out):
        assert_close(j, t.detach().numpy(), atol=atol, rtol=rtol)
    loss = _seeded_grads(t_out, torch)
    if grad and isinstance(loss, torch.Tensor):
        loss.backward()
        _seeded_grads(j_out, jt).backward()
        for t, j in zip(t_in, j_in):
            if t.requires_grad:
                assert (t.grad is None) == (j.grad is None)
                if t.grad is not None:
                    assert_close(j.grad, t.grad.numpy(), atol=atol, rtol=rtol)
    if compiled:
        check_compiled(fn, *arrays, grad=grad, atol=atol, rtol=rtol)
    return j_out


def check_compiled(fn, *arrays, grad=True, atol=1e-5, rtol=1e-5):
    """``jitorch.compile`` of ``fn`` (and of its backward) equals jitorch eager, twice (the cached graph)."""
    def run(F, *xs):
        outs = _outputs(fn(F, *xs))
        loss = _seeded_grads(outs, jt)
        if grad and isinstance(loss, jt.Tensor):
            loss.backward()
        return tuple(o.detach() for o in outs)

    step = jt.compile(lambda *xs: run(JF, *xs))
    for _ in range(2):
        e_in, c_in = _leaves(jt, arrays, grad), _leaves(jt, arrays, grad)
        for e, c in zip(run(JF, *e_in), step(*c_in)):
            assert_close(c, e.numpy(), atol=atol, rtol=rtol)
        for e, c in zip(e_in, c_in):
            if e.grad is not None:
                assert_close(c.grad, e.grad.numpy(), atol=atol, rtol=rtol)


def same_error(fn, *arrays):
    """``fn`` raises in torch, and jitorch raises the same exception type with the same message (its first
    line, the library's name aside)."""
    with pytest.raises(Exception) as expected:
        fn(TF, *(torch.tensor(np.asarray(a)) for a in arrays))
    with pytest.raises(type(expected.value)) as got:
        fn(JF, *(jt.tensor(np.asarray(a)) for a in arrays))
    mine, theirs = (str(e.value).split("\n")[0] for e in (got, expected))
    assert mine.replace("jitorch", "torch") == theirs, f"jitorch: {mine}\n  torch: {theirs}"


def normal(shape, key=0):
    """Standard normal float64 values of ``shape``, the same for the same shape and ``key`` whichever tests ran
    before (each call seeds its own generator)."""
    return np.random.default_rng([139, key, *shape]).standard_normal(shape)


def uniform(shape, key=0):
    """Uniform [0, 1) values of ``shape``, reproducible as `normal`."""
    return np.random.default_rng([139, key, *shape]).random(shape)

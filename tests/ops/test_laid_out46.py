"""`registry.laid_out` restrides a fresh result whose wanted strides differ only in size-1 dims (the same
memory: torch's size-1 strides for pointwise results, session 46, cost no copy), and copies otherwise."""

import numpy as np

import jitorch as jt
from jitorch.ops import registry


def _fresh(shape):
    return jt.Tensor._fresh(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), jt.float32)


def test_only_size_one_strides_differ_restrides_the_same_storage():
    t = _fresh((2, 1, 3))
    out = registry.laid_out(t, (3, 1, 1))
    assert out._storage is t._storage and out.stride() == (3, 1, 1)
    assert np.array_equal(out.numpy(), t.numpy())


def test_strides_of_a_dim_with_elements_differing_copy_into_new_memory():
    t = _fresh((2, 3))
    out = registry.laid_out(t, (1, 2))
    assert out._storage is not t._storage and out.stride() == (1, 2)
    assert np.array_equal(out.numpy(), t.numpy())


def test_a_pointwise_result_of_an_input_with_odd_size_one_strides_has_torchs_strides():
    import torch
    base = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = jt.tensor(base)[:, 1:2, :]
    tx = torch.tensor(base)[:, 1:2, :]
    for f in (lambda a: a.exp(), lambda a: a + a, lambda a: -a):
        r, tr = f(x), f(tx)
        assert r.stride() == tr.stride()
        np.testing.assert_allclose(r.numpy(), tr.numpy(), rtol=1e-6)

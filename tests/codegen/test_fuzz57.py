"""Session 57's fuzz findings in code generation (``python -m tests.fuzz`` with the flags each test names)."""

import numpy as np
import pytest

import torch

import jitorch as jt


@pytest.mark.parametrize("keepdim", [False, True])
def test_a_reduction_kernel_evaluates_an_epilogue_value_an_input_side_output_reads_seed_5710675(keepdim):
    """Fuzz seed 5710675 of ``--edges 0.4``: ``x1.sum(0) - x0.atan()`` beside ``x1 <= x0.atan()`` (an in-place
    ``sub_`` and ``le_``) raised KeyError: %x0 in the reduction kernel: ``atan(x0)``, read by the epilogue, is the
    epilogue's, so ``x0`` was no leaf of the loop over the input, where the output beside the sum evaluates it
    again. One kernel computes both, as torch's values."""
    def fn(L, x0, x1):
        a = x0.exp()
        return x1.sum(0, keepdim=keepdim) + a, x1 + a

    x0 = np.array([0.5, -1.0, 0.25], np.float32)
    x1 = np.arange(12.0, dtype=np.float32).reshape(4, 3) / 4
    want = fn(torch, torch.tensor(x0), torch.tensor(x1))
    compiled = jt.compile(lambda a, b: fn(jt, a, b))
    got = compiled(jt.tensor(x0), jt.tensor(x1))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)
    assert len(compiled.lower(jt.tensor(x0), jt.tensor(x1)).kernels) == 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("source", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(3, 4, 3, 1), (9, 70000)])
def test_a_compiled_reduction_to_a_half_dtype_rounds_each_element_to_it_first_seed_5770222(dtype, source, shape):
    """torch's sum casts its input to its ``dtype=`` before reducing (then adds in float32): a compiled float64
    ``sum(dtype=float16)`` added the unrounded elements (-11.734375 where eager and torch give -11.7421875);
    torch's mean of a half dtype reads float32 instead. The large shape's full sum is split in parts."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal(shape) * 3).astype(source)
    half = getattr(jt, dtype)
    fns = {"sum": lambda lib, t: t.sum(dtype=getattr(lib, dtype)),
           "row sums": lambda lib, t: t.sum(-1, dtype=getattr(lib, dtype)),
           "nansum": lambda lib, t: t.nansum(0, dtype=getattr(lib, dtype)),
           "mean": lambda lib, t: t.mean(0, dtype=getattr(lib, dtype))}
    for name, fn in fns.items():
        want = fn(torch, torch.from_numpy(a)).float().numpy()
        got = jt.compile(lambda t: fn(jt, t))(jt.tensor(a))
        assert got.dtype is half
        np.testing.assert_array_equal(got.float().numpy(), fn(jt, jt.tensor(a)).float().numpy(), err_msg=name)
        np.testing.assert_allclose(got.float().numpy(), want, rtol=1e-2, err_msg=name)

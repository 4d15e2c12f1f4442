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

"""The attention kernels' paths of session 56 (jitorch/codegen/attention.py): the forward hints each row block's
rows of the weights and of the output into L1 for writing before its products write them
(`_Tile.prefetch_written`); in a compiled GPT step those are memory no kernel has touched since the step
before. The hints change no value: the kernels' outputs stay torch's within tolerance and the same on any
number of threads (test_attention.py, test_attention45.py)."""

import re

import numpy as np
import pytest

from jitorch.codegen import attention as kernels
from tests.codegen.test_attention import TOLERANCE, _arrays, _kernel_ir, _ours, _torch

_WRITE_HINT = re.compile(r'call void @"llvm\.prefetch\.p0"\([^,]+, i32 1, i32 3, i32 1\)')


@pytest.mark.parametrize("D", [32, 64, 16])
def test_the_forward_hints_a_row_blocks_weights_and_output_rows_for_writing(monkeypatch, D):
    """One write hint per vector of a row of the output (D long) and one in a loop over the vectors of a row of
    the weights (S long, a run-time length), emitted once in the row-block loop's body (session 57: the rows
    past the last whole block are that block's, no second body); the backward writes its gradients with
    none."""
    w = kernels.VECTOR_BYTES // 4
    forward = _kernel_ir(monkeypatch, "forward", "float32", D, True)
    assert len(_WRITE_HINT.findall(forward)) == 1 + -(-D // w)
    assert not _WRITE_HINT.findall(_kernel_ir(monkeypatch, "backward", "float32", D, True))


def test_a_gpt_tile_with_the_hints_matches_torch():
    """GPT's tile (64 x 64 x 32, 8-row blocks), causal, against torch eager: output and gradients."""
    arrays = _arrays(((2, 2, 64, 32), (2, 2, 64, 32)), "float32", seed=56)
    want = _torch(arrays, True, 0.125)
    got, out = _ours(arrays, True, 0.125, False)
    assert out.grad_fn.name() == "AttentionBackward0"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **TOLERANCE["float32"])

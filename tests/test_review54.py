"""Session 54's review: the new eager pick of nll_loss and the folded bias on inputs that are not contiguous, start
at an offset or broadcast, against torch; a target out of range raises torch's error before anything is written."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.jit.test_bias_products54 import biased, executable


def _layouts(array):
    """``array`` (2-D) as a contiguous tensor, a transposed view and a view at an offset, each with torch's twin."""
    rows, cols = array.shape
    base = np.zeros((rows + 1, cols + 3), array.dtype)
    base[1:, 2:2 + cols] = array
    return [(jt.tensor(array), torch.tensor(array)),
            (jt.tensor(np.ascontiguousarray(array.T)).t(), torch.tensor(np.ascontiguousarray(array.T)).t()),
            (jt.tensor(base)[1:, 2:2 + cols], torch.tensor(base)[1:, 2:2 + cols])]


@pytest.mark.parametrize("layout", range(3))
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_eager_pick_reads_strided_and_offset_logits_as_torch(layout, reduction):
    rng = np.random.default_rng(4)
    logits, target = rng.standard_normal((7, 5)).astype(np.float32), rng.integers(0, 5, 7)
    x, tx = _layouts(logits)[layout]
    x.requires_grad_(True)
    tx.requires_grad_(True)
    loss = jt.nn.functional.nll_loss(x, jt.tensor(target), reduction=reduction)
    want = torch.nn.functional.nll_loss(tx, torch.tensor(target), reduction=reduction)
    assert loss.grad_fn.name() == "NllLossBackward0"
    # (the composition's bits: what the same call gives where nothing records a gradient)
    np.testing.assert_array_equal(loss.detach().numpy(),
                                  jt.nn.functional.nll_loss(x.detach(), jt.tensor(target), reduction=reduction).numpy())
    np.testing.assert_allclose(loss.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-7)
    g = np.linspace(-1, 1, 7).astype(np.float32) if reduction == "none" else np.float32(0.75)
    loss.backward(jt.tensor(g))
    want.backward(torch.tensor(g))
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_an_eager_pick_of_a_target_out_of_range_raises_torchs_error():
    x = jt.zeros(3, 4, requires_grad=True)
    with pytest.raises(IndexError) as got, torch.no_grad():
        torch.nn.functional.nll_loss(torch.zeros(3, 4, requires_grad=True), torch.tensor([0, 4, 1]))
    with pytest.raises(type(got.value), match="out of bounds"):
        jt.nn.functional.nll_loss(x, jt.tensor([0, 4, 1]))
    assert x.grad is None


@pytest.mark.parametrize("layout", range(3))
def test_a_folded_bias_reads_strided_and_offset_operands_as_eager_and_torch(layout):
    """The product's input transposed or at an offset, the bias a stepped view: the compiled call folds the bias and
    gives eager's bits and torch's values."""
    rng = np.random.default_rng(5)
    x, tx = _layouts(rng.standard_normal((40, 64)).astype(np.float32))[layout]
    w, z = (rng.standard_normal(s).astype(np.float32) for s in ((48, 64), (48, 24)))
    b_base = rng.standard_normal(96).astype(np.float32)
    b, tb = jt.tensor(b_base)[::2], torch.tensor(b_base)[::2]

    def fn(x, w, b, z):
        return (x @ w.t() + b) @ z
    args = (x, jt.tensor(w), b, jt.tensor(z))
    assert biased(executable(fn, *args))
    got = jt.compile(fn)(*args)
    np.testing.assert_array_equal(got.numpy(), fn(*args).numpy())
    want = fn(tx, torch.tensor(w), tb, torch.tensor(z))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("field, value", [("strides", [-4]), ("example_strides", [1.5]), ("offset", -1)])
def test_an_output_view_with_a_negative_or_fractional_stride_fails_to_load(tmp_path, field, value):
    """A manifest's output views (`jitorch.export.views`) are counts: a file whose view has a negative or fractional
    stride is refused at load with the library's ExportError, not left to fail (or read elsewhere) at a call."""
    from jitorch.export import ExportError
    from tests.export.helpers import rewrite

    def fn(x):
        x.mul_(2)
        return x[::2]
    path = tmp_path / "program.jitorch"
    jt.export(fn, (jt.zeros(6),)).save(path)

    def damage(m):
        (view,) = m["graph"]["input_views"]
        view[field] = value
    bad = rewrite(path, tmp_path / "bad.jitorch", manifest=damage)
    with pytest.raises(ExportError, match="counts"):
        jt.load(bad)
    assert jt.load(path)(jt.ones(6)).tolist() == [2.0, 2.0, 2.0]


def test_the_fuzzers_warm_mode_recompiles_in_a_fresh_process_from_the_disk_cache():
    """``python -m tests.fuzz --warm`` (README): two programs compiled here, then again in a child process on the same
    kernel cache: the child reads kernels and code objects from disk (hits counted) and agrees with eager."""
    from tests.fuzz.generator import op_table
    from tests.fuzz.oracle import _guarded, run_mode
    from tests.fuzz.warm import _program, check_warm
    batch, options = [(11, 6), (12, 6)], {}
    for seed, statements in batch:  # (this process's compiled mode fills the cache, as the fuzzer's own run does)
        _guarded(run_mode, _program(seed, statements, options, op_table(False)), "compiled")
    found, hits = check_warm(batch, options)
    assert found == {} and hits > 0

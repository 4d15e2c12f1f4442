"""The scatter-add of rows (jitorch/codegen/scatter.py): index_add's kernel, eagerly and in compiled steps
(an embedding's backward written into its arena buffer, from zeros the call does not fill)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit.executor import EagerStep
from jitorch.ops import indexing


def _values(rng, shape, dtype):
    """Floats over 16 decades, so that the order of the adds shows in the bits; signed zero, inf and NaN first."""
    a = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)).astype(dtype)
    a.flat[:3] = [-0.0, np.nan, np.inf]
    return a


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_kernel_adds_rows_in_index_order_with_np_add_ats_bits_at_any_thread_count(dtype, threads):
    """Each row's values in the index's order, one rounding per add: np.add.at's bits, whether the threads
    split the columns or not; rows of a wider table (a row stride past the columns) and a skewed index."""
    kernel = indexing.SCATTER_ROWS_KERNEL(np.dtype(dtype).name)
    assert kernel is not None
    rng = np.random.default_rng(threads)
    saved = jt.get_num_threads()
    jt.set_num_threads(threads)
    try:
        for rows, n, cols, skew in ((65, 768, 128, 0), (7, 300, 96, 200), (3, 1, 64, 0)):
            table = _values(rng, (rows, cols + 5), dtype)
            out, values = table[:, :cols], _values(rng, (n, cols), dtype)
            idx = rng.integers(0, rows, n)
            idx[:skew] = 2
            expected = out.copy()
            np.add.at(expected, idx, values)
            kernel(out, idx.astype(np.int64), values)
            assert np.array_equal(out.view(np.uint8), expected.view(np.uint8))
    finally:
        jt.set_num_threads(saved)


def test_index_add_takes_the_kernel_where_rows_are_long_and_numpy_elsewhere(monkeypatch):
    """Long contiguous rows go through the kernel; rows along another dim (strided) and short ones do not;
    all give np.add.at's bits, alpha 1 (no multiply: signed zeros kept) and 2 alike."""
    calls = []
    registered = indexing.SCATTER_ROWS_KERNEL

    def counted(dtype):
        calls.append(dtype)
        return registered(dtype)

    monkeypatch.setattr(indexing, "SCATTER_ROWS_KERNEL", counted)
    rng = np.random.default_rng(0)
    x, src = _values(rng, (40, 64), np.float32), _values(rng, (100, 64), np.float32)
    idx = rng.integers(0, 40, 100)
    for alpha in (1, 2):
        expected = x.copy()
        np.add.at(expected, idx, src * np.float32(alpha) if alpha != 1 else src)
        got = jt.from_numpy(x).index_add(0, jt.from_numpy(idx), jt.from_numpy(src), alpha=alpha).numpy()
        assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))
    assert calls == ["float32"] * 2
    calls.clear()
    xt, idx_t = np.ascontiguousarray(x.T), rng.integers(0, 40, 100)
    got = jt.from_numpy(xt).index_add(1, jt.from_numpy(idx_t), jt.from_numpy(np.ascontiguousarray(src.T)))
    expected = torch.from_numpy(xt).index_add(1, torch.from_numpy(idx_t), torch.from_numpy(np.ascontiguousarray(src.T)))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    jt.from_numpy(x[:, :8].copy()).index_add(0, jt.from_numpy(idx), jt.from_numpy(src[:, :8].copy()))
    assert calls == []


def _training_step(lib, emb, head, opt, tokens, targets):
    loss = lib.nn.functional.cross_entropy(head(emb(tokens)).reshape(-1, 11), targets.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


def _model(lib, padding_idx):
    lib.manual_seed(0)
    emb, head = lib.nn.Embedding(70, 96, padding_idx=padding_idx), lib.nn.Linear(96, 11)
    return emb, head, lib.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.5)


def _copy_params(ours, theirs):
    for a, b in zip(ours[:2], theirs[:2]):
        for p, q in zip(a.parameters(), b.parameters()):
            p.data.copy_(jt.from_numpy(q.detach().numpy().copy()))


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_a_compiled_embedding_backward_adds_into_its_arena_buffer_from_unfilled_zeros(padding_idx):
    """In a compiled training step the embedding's gradient (index_add into zeros of the table's shape, 70 x 96
    > the folding limit), which the optimizer reads, is written by the scatter into its arena buffer, whose
    zeros the call does not fill first; the table after two steps is eager's bit for bit and torch's to
    rounding, the padding row unchanged."""
    compiled_model, eager_model, torch_model = _model(jt, padding_idx), _model(jt, padding_idx), \
        _model(torch, padding_idx)
    _copy_params(compiled_model, torch_model)
    _copy_params(eager_model, torch_model)
    rng = np.random.default_rng(1)
    tokens, targets = rng.integers(0, 70, (6, 20)), rng.integers(0, 11, (6, 20))
    tokens[0, :4] = 3
    data = jt.from_numpy(tokens), jt.from_numpy(targets)
    compiled = jt.compile(_training_step)
    ex = compiled.lower(jt, *compiled_model, *data).executable
    adds = [(s, n) for s in ex.steps if isinstance(s, EagerStep) for n in s.nodes if n.op.name == "index_add"]
    assert len(adds) == 1
    (step, node), = adds
    assert node.outputs[0] in step.into_arena and node.args[0] in step.unfilled
    assert "new_zeros" not in {name for name, _ in ex.profiled_steps()}
    padding_row = compiled_model[0].weight.detach().numpy()[3].copy()
    for _ in range(2):
        compiled(jt, *compiled_model, *data)
        _training_step(jt, *eager_model, *data)
        _training_step(torch, *torch_model, torch.from_numpy(tokens), torch.from_numpy(targets))
    got, expected = compiled_model[0].weight.detach().numpy(), eager_model[0].weight.detach().numpy()
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))
    np.testing.assert_allclose(got, torch_model[0].weight.detach().numpy(), rtol=1e-4, atol=1e-6)
    if padding_idx is not None:
        assert np.array_equal(got[3], padding_row)


def test_a_compiled_index_add_with_a_bad_index_raises_torchs_error_before_writing():
    """An index past the dim raises gather's RuntimeError (torch's CPU message) before anything is written:
    the in-place update leaves its input as it was."""
    def update(x, idx, src):
        x.index_add_(0, idx, src)
        return x.sum()

    x = jt.zeros(50, 64)
    src = jt.ones(40, 64)
    compiled = jt.compile(update)
    compiled(x, jt.arange(40), src)
    assert x.sum().item() == 40 * 64
    before = x.numpy().copy()
    bad = jt.arange(40)
    bad[7] = 50
    with pytest.raises(RuntimeError, match="index 50 is out of bounds for dimension 0 with size 50"):
        compiled(x, bad, src)
    with pytest.raises(RuntimeError, match="index 50 is out of bounds for dimension 0 with size 50"):
        torch.zeros(50, 64).index_add_(0, torch.from_numpy(bad.numpy()), torch.ones(40, 64))
    assert np.array_equal(x.numpy(), before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_add_of_many_values_takes_the_kernel_with_np_add_ats_bits(monkeypatch, dtype):
    """scatter_add (a gather's backward) of at least `KERNEL_FROM_VALUES` values into a float self adds each
    value as a row of one element, in C order: np.add.at's bits (values over 16 decades, repeated positions),
    along the last dim, the first and a middle one, with an expanded (stride 0) index and a smaller index
    than self; fewer values, and integers, go through np.add.at."""
    calls = []
    registered = indexing.SCATTER_ROWS_KERNEL

    def counted(name):
        kernel = registered(name)

        def run(*args):
            calls.append(name)
            return kernel(*args)
        return run

    monkeypatch.setattr(indexing, "SCATTER_ROWS_KERNEL", counted)
    rng = np.random.default_rng(3)
    cases = (((8, 3, 600), 2, (8, 1, 900), (8, 3, 900)), ((50, 40, 7), 0, (60, 30, 7), None),
             ((6, 40, 30), 1, (5, 70, 20), None))
    for shape, d, index_shape, expand in cases:
        x = _values(rng, shape, dtype)
        idx = rng.integers(0, shape[d], index_shape)
        full = np.broadcast_to(idx, expand) if expand else idx
        src = _values(rng, full.shape, dtype)
        expected = x.copy()
        coords = list(np.indices(full.shape, sparse=True))
        coords[d] = full
        np.add.at(expected, tuple(coords), src)
        index = jt.from_numpy(idx).expand(*expand) if expand else jt.from_numpy(idx)
        got = jt.from_numpy(x).scatter_add(d, index, jt.from_numpy(src)).numpy()
        assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))
        theirs = torch.from_numpy(x).scatter_add(d, torch.from_numpy(full.copy()), torch.from_numpy(src)).numpy()
        assert np.array_equal(np.isnan(got), np.isnan(theirs))
    assert calls == [np.dtype(dtype).name] * 3
    calls.clear()
    few = jt.from_numpy(np.ones((4, 10), dtype))
    jt.zeros_like(few).scatter_add(1, jt.zeros(4, 10, dtype=jt.int64), few)
    whole = jt.ones(100, 100, dtype=jt.int64)
    assert jt.zeros_like(whole).scatter_add(1, jt.zeros_like(whole), whole)[:, 0].tolist() == [100] * 100
    assert calls == []

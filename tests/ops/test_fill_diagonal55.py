"""``fill_diagonal_`` of an expanded tensor writes the diagonal through the shared memory, as torch's (trust55)."""

import warnings

import pytest
import torch

import jitorch as jt

# (base shape, expanded shape, wrap): a dim broadcast either way, a wide row, the diagonal itself overlapping, a tall
# wrapped matrix, a cube
CASES = [((1, 1), (1, 4), False), ((4, 1), (4, 4), False), ((1, 4), (4, 4), False), ((1, 1), (4, 4), False),
         ((7, 1), (7, 3), True), ((1, 3), (7, 3), True), ((1, 1, 1), (3, 3, 3), False)]


def _fill(T, base_shape, shape, wrap):
    base = T.arange(float(torch.Size(base_shape).numel())).reshape(base_shape)
    base.expand(*shape).fill_diagonal_(-2.0, wrap=wrap)
    return base.tolist()


@pytest.mark.parametrize("base_shape, shape, wrap", CASES)
def test_fill_diagonal_of_an_expanded_tensor_writes_its_memory_as_torch_seed_5560333(base_shape, shape, wrap):
    # (eager raised torch's "more than one element of the written-to tensor refers to a single memory location",
    # which torch's fill_diagonal_ never checks: fuzz seed 5560333 of --edges 0.5, an input of [1, 4] expanded)
    assert _fill(jt, base_shape, shape, wrap) == _fill(torch, base_shape, shape, wrap)


def test_compiled_fill_diagonal_of_an_expanded_input_runs_eagerly_not_as_a_whole_scatter():
    # (traced, the graph scattered the whole filled result into the input's memory, each row's unfilled elements
    # over the diagonal written by another: base [0, 1, 2, -2] for torch's all -2)
    compiled = jt.compile(lambda x: (x.fill_diagonal_(-2.0), x.sum())[1])
    base = jt.arange(4.0).reshape(4, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        total = compiled(base.expand(4, 4))
    want = torch.arange(4.0).reshape(4, 1)
    want_total = want.expand(4, 4).fill_diagonal_(-2.0).sum()
    assert base.tolist() == want.tolist() and total.item() == want_total.item()
    (entry,) = compiled.cache.values()
    assert entry.graph is None and "fill_diagonal_ writes into an expanded tensor" in entry.eager_reason
    assert any("running <lambda> eagerly" in str(w.message) for w in caught)
    # (an expanded fill_ writes every element alike: still one graph)
    filled = jt.compile(lambda x: (x.fill_(3.0), x.sum())[1])
    assert filled(jt.zeros(4, 1).expand(4, 4)).item() == 48.0
    (entry,) = filled.cache.values()
    assert entry.graph is not None

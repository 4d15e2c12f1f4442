"""Session 46's trust checks on ops: the strides of copies, casts, ``_like`` factories and pointwise results of
inputs whose size-1 (and empty) dims have strides other than the contiguous ones, against torch's, eager and
compiled; ``histogramdd``'s edges where only the weight requires grad."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitorch

COPIES = {
    "clone": lambda L, x: x.clone(),
    "contiguous": lambda L, x: x.contiguous(),
    "empty_like": lambda L, x: L.empty_like(x),
    "zeros_like": lambda L, x: L.zeros_like(x),
    "ones_like": lambda L, x: L.ones_like(x),
    "full_like": lambda L, x: L.full_like(x, 2.0),
    "rand_like": lambda L, x: L.rand_like(x),
    "randn_like": lambda L, x: L.randn_like(x),
    "randint_like": lambda L, x: L.randint_like(x, 5),
    "to(float64)": lambda L, x: x.to(L.float64),
    "half()": lambda L, x: x.half(),
    "x + 1": lambda L, x: x + 1,
    "x * 0-d tensor": lambda L, x: x * L.tensor(2.0),
    "exp": lambda L, x: x.exp(),
    "x * x": lambda L, x: x * x,
    "x + contiguous": lambda L, x: x + L.ones(x.shape),
    "x + float64 contiguous": lambda L, x: x + L.ones(x.shape, dtype=L.float64),
    "x + last row": lambda L, x: x + L.ones(x.shape[-1:]),
    "x > 0": lambda L, x: x > 0,
    "where": lambda L, x: L.where(x > 0, x, x),
}
# (random values are jitorch's own; their layout is torch's)
RANDOM = {"rand_like", "randn_like", "randint_like", "empty_like"}


@st.composite
def odd_layouts(draw, sizes=(1, 1, 2, 3), empty=False):
    """A shape with size-1 dims (and, with ``empty``, a dim of size 0) and a way to lay it out: a permutation of
    a contiguous buffer, optionally sliced or with size-1 dims expanded (stride 0)."""
    nd = draw(st.integers(1, 4))
    shape = draw(st.lists(st.sampled_from(sizes + ((0,) if empty else ())), min_size=nd, max_size=nd))
    perm = draw(st.permutations(range(nd)))
    expand = draw(st.lists(st.booleans(), min_size=nd, max_size=nd))
    sliced = draw(st.booleans())
    return shape, perm, expand, sliced


def build(L, layout):
    shape, perm, expand, sliced = layout
    inv = [perm.index(i) for i in range(len(shape))]
    stored = [shape[p] for p in perm]
    if sliced:  # every dim a slice of one twice as long: strides of a wider buffer
        x = L.zeros([2 * n for n in stored])[tuple(slice(0, n) for n in stored)]
    else:
        x = L.zeros(stored)
    x = x.permute(*inv)
    return x.expand(*[3 if e and n == 1 else n for n, e in zip(shape, expand)])


def _compare(layout, name):
    op = COPIES[name]
    tx, jx = build(torch, layout), build(jitorch, layout)
    assert jx.stride() == tx.stride()
    want = op(torch, tx).stride()
    assert op(jitorch, jx).stride() == want, (tuple(tx.shape), tx.stride())
    if name not in RANDOM:
        compiled = jitorch.compile(lambda t: op(jitorch, t))
        for _ in range(2):  # the tracing call, then the compiled entry's
            assert compiled(jx).stride() == want, (tuple(tx.shape), tx.stride())


@pytest.mark.parametrize("name", COPIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=odd_layouts())
def test_size_one_dim_strides_of_copies_likes_and_pointwise_results_are_torchs(name, layout):
    """Copies, casts and ``_like`` factories keep a non-overlapping dense input's strides, size-1 dims' too
    (torch's empty_like in preserve_format); pointwise results follow TensorIterator's fast setups (operands of
    one shape: contiguous, channels-last, shared dense strides) or its order (jitorch gave contiguous strides
    to inputs contiguous but for their size-1 dims, and compiled calls did not see those strides)."""
    _compare(layout, name)


@pytest.mark.parametrize("name", ["clone", "zeros_like", "to(float64)", "x + 1", "exp", "x + last row"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=odd_layouts(empty=True))
def test_empty_dim_strides_of_copies_and_pointwise_results_are_torchs(name, layout):
    """An empty input keeps its strides through a copy (torch takes it as contiguous, so dense); a pointwise
    result of an empty operand takes TensorIterator's strides, which step by the size 0 (0 outside it) unless
    its order is row-major."""
    _compare(layout, name)


@pytest.mark.parametrize("name", ["clone", "x + 1", "exp", "to(float64)"])
def test_a_compiled_call_keys_inputs_by_the_strides_of_their_size_one_dims(name):
    """One compiled function called on (5, 1) tensors laid out contiguously and as ``ones(1, 5).t()`` gives each
    call torch's strides: the two layouts are two cache entries, not one."""
    op = COPIES[name]
    compiled = jitorch.compile(lambda t: op(jitorch, t))
    for make in (lambda L: L.ones(5, 1), lambda L: L.ones(1, 5).t(), lambda L: L.ones(5, 1)):
        want = op(torch, make(torch)).stride()
        assert compiled(make(jitorch)).stride() == want
    assert len(compiled.cache) == 2


def test_channels_last_operands_give_a_channels_last_result_as_torch():
    """Four-dim operands of one shape, each channels-last by torch's test (size-1 dims not looked at), give a
    channels-last result: ``(1, 2, 1, 3)`` with strides (2, 1, 2, 2) gives (6, 1, 6, 2), not the input's own."""
    for L in (torch, jitorch):
        x = L.zeros(3, 1, 1, 2).permute(1, 3, 2, 0)
        assert x.stride() == (2, 1, 2, 2)
        assert (x + x).stride() == (6, 1, 6, 2) and x.exp().stride() == (6, 1, 6, 2)
        assert (x * 2).stride() == (2, 1, 2, 2) and x.clone().stride() == (2, 1, 2, 2)


def test_histogramdd_edges_of_bin_counts_require_grad_for_a_weight_that_does_as_torch():
    """torch's ``_histogramdd_bin_edges`` takes the weight, so the edges it makes require grad where only the
    weight does, and a backward or tangent through them raises naming it (jitorch's edges did not require grad);
    edges given as tensors come back as they are."""
    for L in (torch, jitorch):
        x = L.tensor([[0.5, 1.0], [-1.0, 2.0], [0.25, 0.0]], dtype=L.float64)
        w = L.tensor([1.0, 2.0, 3.0], dtype=L.float64, requires_grad=True)
        hist, edges = L.histogramdd(x, [3, 2], weight=w)
        assert hist.requires_grad and all(e.requires_grad for e in edges)
        with pytest.raises(RuntimeError, match="derivative for aten::_histogramdd_bin_edges is not implemented"):
            edges[0].sum().backward()
        with pytest.raises(NotImplementedError, match="forward AD with aten::_histogramdd_bin_edges"):
            L.func.jvp(lambda v: L.histogramdd(x, [3, 2], weight=v)[1][0], (w.detach(),),
                       (L.ones(3, dtype=L.float64),))
        given = [L.tensor([-1.0, 0.0, 1.0], dtype=L.float64, requires_grad=True), L.tensor([0.0, 2.0], dtype=L.float64)]
        hist, edges = L.histogramdd(x, given, weight=w.detach())
        assert hist.requires_grad and edges[0] is given[0] and edges[1] is given[1]
    compiled = jitorch.compile(lambda x, w: jitorch.histogramdd(x, [3, 2], weight=w)[1][0] * 2)
    x = jitorch.tensor([[0.5, 1.0], [-1.0, 2.0], [0.25, 0.0]], dtype=jitorch.float64)
    w = jitorch.tensor([1.0, 2.0, 3.0], dtype=jitorch.float64, requires_grad=True)
    out = compiled(x, w)
    assert out.requires_grad
    with pytest.raises(RuntimeError, match="derivative for aten::_histogramdd_bin_edges is not implemented"):
        out.sum().backward()


def test_lu_unpack_reads_no_pivots_where_min_m_n_is_0_as_torch():
    """torch's kernel reads no pivot where ``min(m, n)`` is 0 and checks no pivots' shape: P is the identity of
    LU's batch (fuzz seed 9131043: jitorch raised its pivots-shape error for a (1, 0) LU and (1, 1) pivots)."""
    for lu_shape, pivots in [((1, 0), [[0]]), ((3, 0), [5]), ((0, 2), [1, 1]), ((2, 0, 2), [[1, 1]]),
                             ((2, 3, 0), [1, 1, 1, 1, 1])]:
        got, want = [L.lu_unpack(L.zeros(lu_shape), L.tensor(pivots, dtype=L.int32)) for L in (jitorch, torch)]
        for g, w in zip(got, want):
            assert tuple(g.shape) == tuple(w.shape) and g.tolist() == w.tolist()
    with pytest.raises(RuntimeError, match="Expected LU_pivots.size"):  # (a pivot to read: its shape checked)
        jitorch.lu_unpack(jitorch.eye(2), jitorch.tensor([1, 2, 2], dtype=jitorch.int32))

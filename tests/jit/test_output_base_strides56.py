"""The base a compiled call returns for new memory that several output leaves view has eager's strides, those of
its size-1 dims too."""

import jitorch


def _negated_into_a_buffer(x0):
    v1 = x0[None].expand(3, 1, 1, 3).transpose(0, -1)
    v6 = jitorch.zeros((3, 1, 1, 3), dtype=jitorch.int32)
    jitorch.negative(v1, out=v6)
    return v6, v6.unsqueeze(2)


def test_interpreter_returns_an_out_buffer_and_its_view_with_eager_strides_seed_5601810():
    """Fuzz seed 5601810 of ``--edges 0.4 --out-views 0.4 --regions 0.2``: the trace makes ``negative(v1,
    out=v6)`` the graph's ``negative(v1)``, whose interpreted result of a transposed expand has strides (3, 9, 9, 1)
    at shape (3, 1, 1, 3); returned with a view of it, that base kept them, where eager's ``zeros`` buffer has
    (3, 3, 3, 1) (`jit.results._contiguous_base`)."""
    x0 = jitorch.tensor([[[1, 2, 3]]], dtype=jitorch.int32)
    want = _negated_into_a_buffer(x0)
    assert [t.stride() for t in want] == [(3, 3, 3, 1), (3, 3, 3, 3, 1)]
    for backend in ("interpreter", "llvm"):
        got = jitorch.compile(_negated_into_a_buffer, backend=backend)(x0)
        assert [t.stride() for t in got] == [t.stride() for t in want]
        assert got[1]._base is got[0] and got[0].tolist() == want[0].tolist()

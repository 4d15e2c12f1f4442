"""A call's outputs over memory it made, returned as a base and views of it (`jit.results.returned_aliases`) (trust55)."""

import torch

import jitorch as jt


def _min_out_of_an_empty_slice(T, x0):
    v1 = T.zeros((1, 1, 3))
    T.expm1(x0, out=v1)
    v3 = v1[None, 1:-1]
    v5 = T.zeros((1, 0, 1, 3))
    T.min(v1, v3, out=v5)
    return v5.ravel(), v5


def test_interpreter_gives_an_empty_out_buffer_returned_with_a_view_of_it_eagers_strides_seed_5200262():
    # (the base of the returned views was the interpreter's own minimum(v1, v3) made contiguous, and contiguous()
    # keeps an empty tensor's strides: (0, 3, 0, 1) for the out= buffer's (3, 3, 3, 1))
    want = [tuple(t.stride()) for t in _min_out_of_an_empty_slice(torch, torch.zeros(1, 1, 3))]
    assert want == [(1,), (3, 3, 3, 1)]
    eager = [tuple(t.stride()) for t in _min_out_of_an_empty_slice(jt, jt.zeros(1, 1, 3))]
    for backend in ("interpreter", "llvm"):
        compiled = jt.compile(lambda x: _min_out_of_an_empty_slice(jt, x), backend=backend)
        for _ in range(2):
            flat, base = compiled(jt.zeros(1, 1, 3))
            assert [tuple(flat.stride()), tuple(base.stride())] == want == eager
            assert flat._storage is base._storage and base.shape == (1, 0, 1, 3)
        (entry,) = compiled.cache.values()
        # (the buffer is the graph's output base, the ravel a view of it: the path the fix is on)
        assert entry.graph.output_aliases[1] == (("output", 1), None)
        assert entry.graph.output_aliases[0][0] == ("output", 1)

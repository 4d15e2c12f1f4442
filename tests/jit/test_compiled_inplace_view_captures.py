"""In-place view ops on a captured tensor (``c.as_strided_``, ``c.t_()``, ``c.resize_``, ``c.set_``) across
several calls: each call starts from the geometry the last one left, which the compiled and interpreted calls
must see as eager does (a new trace where the geometry moved, or eager where a graph cannot hold the memory it
addresses or give the capture another geometry)."""

import warnings

import numpy as np
import pytest

import jitorch

PROGRAMS = {
    # fuzz seed 7610840: the second call's capture is a [1, 1] view at offset 1 of 15 elements, which
    # as_strided addresses past its own elements (a graph holds only those: the call runs eagerly)
    "as_strided_offset": lambda c: c.as_strided_([1, 1], [3, 3], storage_offset=c.contiguous().storage_offset() + 1),
    "as_strided_same": lambda c: c.as_strided_([5, 3], [3, 1]),
    "t_": lambda c: c.t_(),
    "transpose_": lambda c: c.transpose_(0, 1),
    "squeeze_unsqueeze_": lambda c: c.unsqueeze_(0).squeeze_(0),
    "swapdims_then_add_": lambda c: c.swapdims_(0, 1).add_(1),
    "resize_same": lambda c: c.resize_(c.shape),
    # a resize to another shape, a set_ onto a slice: the graph of the first call held the capture at the
    # geometry the trace left it, and its later calls neither resized it again nor read it as eager
    "resize_other": lambda c: c.resize_(2, 3) if c.numel() > 6 else c.resize_(3, 2),
    "set_slice": lambda c: c.set_(c[1:]),
}


def _run(mode, program, calls=3):
    c = jitorch.arange(15, dtype=jitorch.int64).reshape(5, 3)

    def fn(x):
        PROGRAMS[program](c)
        return x + c.sum()

    f = fn if mode == "eager" else jitorch.compile(fn, backend=mode)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the calls that run eagerly say so)
        for _ in range(calls):
            out = f(jitorch.zeros(2, dtype=jitorch.int64))
            seen.append((tuple(c.shape), tuple(c.stride()), c.storage_offset(), c.tolist(), out.tolist()))
    return seen


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("mode", ["llvm", "interpreter"])
def test_inplace_view_ops_on_a_capture_agree_with_eager_over_calls(program, mode):
    assert _run(mode, program) == _run("eager", program)


def test_as_strided_past_a_captures_elements_runs_eagerly_seed_7610840():
    c = jitorch.arange(15, dtype=jitorch.int64).reshape(5, 3)
    f = jitorch.compile(lambda x: (PROGRAMS["as_strided_offset"](c), x + 1)[1])
    x = jitorch.zeros(2)
    f(x)
    with pytest.warns(UserWarning, match="as_strided.*does not fill it"):
        f(x)
    assert (tuple(c.shape), c.storage_offset(), c.untyped_storage().nbytes()) == ((1, 1), 2, 120)
    assert np.array_equal(c.numpy(), [[2]])

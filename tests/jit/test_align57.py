"""Every buffer a compiled step's memory plan gives out starts a cache line (64 bytes): the arena's slots, a split
reduction's partials, an attention output written in its reader's layout, a copy laid out for a kernel to read
in place, and the caching allocator's large buffers; NumPy's malloc gave 16-byte alignment, and the attention
kernels ran 4-9% slower on such arrays. The arena grows by under 64 bytes per buffer (63 each), and the plan's
sharing of slots is unchanged."""

from __future__ import annotations

import gc

import numpy as np

import jitorch as jt
from jitorch.jit import executor
from jitorch.jit.executor import KernelStep
from jitorch.runtime import allocator
from tests.jit.test_attention_layout import _attention_steps, _block, _weights

LINE = 64


def _address(arr):
    return arr.__array_interface__["data"][0]


def test_every_arena_buffer_and_kernel_argument_of_a_training_step_starts_a_cache_line(monkeypatch):
    qualifies, writer = executor._WRITERS_LAID_OUT["_attention"]
    outputs = []  # the attention outputs' addresses, written in new memory in their reader's layout
    monkeypatch.setitem(executor._WRITERS_LAID_OUT, "_attention",
                        (qualifies, lambda out, *a: outputs.append(out.data_ptr()) or writer(out, *a)))
    compiled = jt.compile(lambda *a: _block(jt, *a))
    args = _weights()
    loss = compiled(*args)
    loss = compiled(*args)
    assert len(outputs) == 2 and all(p % LINE == 0 for p in outputs)
    ex = compiled.lower(*args).executable
    (step,) = _attention_steps(ex)
    assert step.laid_out  # (the attention's output is written in new memory in its reader's layout)
    plan = ex.plan
    assert len(plan.slot_bytes) < len(plan.slots)  # (values still share slots)
    for arena in ex._arenas:
        assert all(_address(b) % LINE == 0 for b in arena.buffers)
        assert all(arena.address(v) % LINE == 0 for v in plan.slots)
        for s, a in arena.args.items():
            planned = [i for i, v in enumerate((*s.inputs, *s.outputs)) if v in plan.slots]
            assert all(a[i] % LINE == 0 for i in planned)
        # growth: each buffer's memory is at most LINE - 1 bytes longer than its slot
        assert [b.nbytes for b in arena.buffers[:len(plan.slot_bytes)]] == plan.slot_bytes
        assert all(b.base.nbytes - b.nbytes == LINE - 1 for b in arena.buffers)
    xe, we, pe = _weights()
    np.testing.assert_allclose(loss.item(), _block(jt, xe, we, pe).item(), rtol=1e-5)


def test_a_split_reductions_partials_start_a_cache_line():
    x = jt.tensor(np.arange(1 << 20, dtype=np.float32))
    compiled = jt.compile(lambda t: t.sum())
    assert compiled(x).item() == float(np.arange(1 << 20, dtype=np.float64).sum())
    ex = compiled.lower(x).executable
    (kernel,) = [s for s in ex.steps if isinstance(s, KernelStep)]
    assert kernel.kernel.source.split is not None
    for arena in ex._arenas:
        partials = arena.buffers[-1]
        assert _address(partials) % LINE == 0 and arena.args[kernel][len(kernel.inputs)] == _address(partials)


def test_the_pools_buffers_start_a_cache_line_and_are_reused():
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    sizes = [(1 << 18) + 3, (1 << 19) + 5]  # float32 elements: over MIN_BYTES, not whole lines
    first = []
    for n in sizes:
        arr, buf = allocator.empty((n,), np.float32)
        assert _address(arr) % LINE == 0 and arr.base is buf and buf.nbytes == arr.nbytes + LINE - 1
        t = jt.Tensor._from_array(arr, jt.float32)
        allocator.track(t._storage, buf)
        first.append(t.data_ptr())
        del t, arr, buf
    gc.collect()
    assert allocator.cached_bytes() == sum(sizes) * 4
    for n, address in zip(sizes, first):
        arr, buf = allocator.empty((n,), np.float32)
        assert _address(arr) == address
    assert allocator.cached_bytes() == 0
    f = jt.compile(lambda t: t * 2)  # a compiled call's large result comes from the pool
    assert f(jt.ones(sizes[1])).data_ptr() % LINE == 0


def test_a_copy_laid_out_for_a_kernel_to_read_in_place_starts_a_cache_line():
    # (`executor._strided`: an eager view a kernel reads through its strides, copied where it does not lie so)
    t = jt.arange(35.0).reshape(5, 7).t()
    for _ in range(4):
        out = executor._strided(t, (1, 7), 3, 38)
        assert out.untyped_storage().data_ptr() % LINE == 0 and out.stride() == (1, 7) and out.storage_offset() == 3
        np.testing.assert_array_equal(out.numpy(), t.numpy())

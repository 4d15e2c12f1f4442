"""The caching allocator: large buffers are reused after their tensor dies, never while referenced."""

import gc
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import jitorch as jt
from jitorch.runtime import allocator


def make(n=1 << 19):
    arr, buf = allocator.empty((n,), np.float32)
    t = jt.Tensor._from_array(arr, jt.float32)
    allocator.track(t._storage, buf)
    return t


def test_a_dead_tensors_buffer_is_reused():
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    t = make()
    address = t.data_ptr()
    del t
    gc.collect()
    assert allocator.cached_bytes() == (1 << 19) * 4
    again = make()
    assert again.data_ptr() == address
    assert allocator.cached_bytes() == 0


def test_a_buffer_still_seen_through_numpy_is_not_reused():
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    t = make()
    view = t.numpy()
    del t
    gc.collect()
    fresh = make()
    assert fresh.data_ptr() != view.__array_interface__["data"][0]
    view[0] = 7.0  # still the old buffer, untouched by the new tensor
    assert fresh.numpy()[0] != 7.0 or fresh.data_ptr() != view.__array_interface__["data"][0]


def test_small_buffers_bypass_the_pool_and_the_pool_is_capped(monkeypatch):
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    arr, buf = allocator.empty((10,), np.float32)
    assert buf is None and arr.shape == (10,)
    monkeypatch.setattr(allocator, "MAX_CACHED_BYTES", 1 << 20)
    t1, t2 = make(), make()  # 2 MiB each: over the cap
    del t1, t2
    gc.collect()
    assert allocator.cached_bytes() == 0


def test_compiled_outputs_reuse_buffers_across_calls():
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    f = jt.compile(lambda x: x * 2)
    x = jt.ones(1 << 19)
    first = f(x).data_ptr()
    gc.collect()
    assert f(x).data_ptr() == first
    kept = f(x)
    assert f(x).data_ptr() != kept.data_ptr()


_FAULTS = """
import resource, numpy as np, jitorch
a = np.ones(1 << 20, np.float32); del a   # the first one faults its pages in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(1 << 20, np.float32); del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(env):
    out = subprocess.run([sys.executable, "-c", _FAULTS], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True)
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's malloc")
def test_freed_memory_is_reused_without_page_faults():
    # a 4 MiB temporary freed and allocated again reuses its pages after `import jitorch`; glibc's defaults
    # (kept by JITORCH_KEEP_FREED_MEMORY=0) unmap it, and each of the 20 allocations faults pages in again
    assert _faults({"JITORCH_KEEP_FREED_MEMORY": "1"}) < 5
    assert _faults({"JITORCH_KEEP_FREED_MEMORY": "0"}) >= 20
    assert allocator.keep_freed_memory()


@pytest.mark.parametrize("make_zeros", [lambda: jt.zeros(700, 1000), lambda g: g.new_zeros((700, 1000)),
                                        lambda: jt.zeros_like(jt.empty(1000, 700).t()), lambda: jt.ones(700, 1000)],
                         ids=["zeros", "new_zeros", "zeros_like", "ones"])
def test_large_eager_factories_reuse_a_dead_tensors_buffer_never_a_live_ones(make_zeros):
    # (an eager nll_loss's gradient: a large zero tensor each step, which came from fresh pages every few steps)
    make = (lambda: make_zeros(jt.ones(1))) if make_zeros.__code__.co_argcount else make_zeros
    gc.collect()  # (tensors of earlier tests that die in a collection would go to the pool after it)
    allocator.empty_cache()
    t = make()
    value = float(t.reshape(-1)[0])
    address = t.data_ptr()
    t.fill_(7.0)
    del t
    gc.collect()
    pooled = {allocator._aligned(b, 700 * 1000 * 4).ctypes.data for b in allocator._pool.get(700 * 1000 * 4, [])}
    assert address in pooled
    again = make()
    assert again.data_ptr() in pooled
    address = again.data_ptr()
    assert np.all(again.numpy() == value)  # (filled anew)
    seen = again.numpy()  # a NumPy view that outlives its tensor keeps the buffer from the next one
    del again
    gc.collect()
    other = make()
    assert other.data_ptr() != address
    other.fill_(3.0)
    assert np.all(seen == value)

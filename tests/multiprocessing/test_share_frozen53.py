"""share_memory_ after gc.freeze(): the tensors and reinterpretations a freeze put in the collector's permanent
generation forget the old buffer too (gc.get_referrers does not search that generation; a reinterpretation made
before the freeze kept reading the private copy: silently stale values)."""

import gc

import numpy as np

import jitorch as jt


def test_a_frozen_reinterpretation_reads_the_shared_buffer():
    a = jt.zeros(4)
    c = a.view(jt.int32)
    a.numpy(), c.numpy()
    kept = [a]  # a container the collector tracks: where it is after the call says where the user's freeze went
    gc.freeze()
    a.share_memory_()
    a.add_(1)
    one = np.float32(1).view(np.int32)
    assert a.view(jt.int32).tolist() == [one] * 4
    assert c.tolist() == [one] * 4
    assert a.tolist() == [1.0] * 4
    assert not any(o is kept for o in gc.get_objects())  # what the user froze stays frozen


def test_a_frozen_view_of_a_shared_storage_sees_later_writes():
    a = jt.arange(6.0)
    v = a[2:]
    v.numpy()
    storage = a.untyped_storage()
    gc.freeze()
    storage.share_memory_()
    a.mul_(2)
    assert a.is_shared() and v.is_shared()
    # a view made after the move reads the shared buffer: the frozen tensors' writes must have gone there
    assert a[:].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert v.tolist() == [4.0, 6.0, 8.0, 10.0]

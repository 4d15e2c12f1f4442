"""The NCCL backend: its logic on a fake NCCL (tests/distributed/fake_nccl.py) over the fake CUDA driver, with
ranks as threads (one fake device each), every collective against NumPy; and the real libnccl's ABI where the
nvidia-nccl wheel is installed (no GPU needed for those calls). The real collectives run only on a GPU machine:
``python -m jitorch.cuda.selftest`` checks them there."""

import numpy as np
import pytest

import jitorch as jt
from jitorch.distributed import nccl, threads

from . import fake_nccl


@pytest.fixture
def fake(monkeypatch):
    driver, fake = fake_nccl.install(monkeypatch, devices=4)
    with nccl.use_library(fake.library()):
        yield fake
    assert not fake.errors


def on_device(array, rank):
    return jt.from_numpy(np.ascontiguousarray(array)).to(f"cuda:{rank}")


def test_all_reduce_sum_on_two_ranks(fake):
    def body(pg):
        r = pg.rank()
        jt.cuda.set_device(r)
        x = on_device(np.arange(4, dtype=np.float32) + r, r)
        jt.distributed.all_reduce(x, group=pg)
        return x.cpu().numpy()
    out = threads.run(2, body, timeout=60)
    for o in out:
        np.testing.assert_array_equal(o, 2 * np.arange(4) + 1)

"""Fixtures of the export tests."""

from __future__ import annotations

import pytest

from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend

from .helpers import small_program


@pytest.fixture
def saved(tmp_path):
    """(path of a saved small program, its example inputs, the expected outputs as arrays)."""
    f, args, ep = small_program()
    path = tmp_path / "small.jtx"
    ep.save(path)
    return path, args, [t.numpy() for t in f(*args)]


@pytest.fixture
def fake():
    """CUDA tensors on a fake device in host memory (jitorch.backends.cuda.fake) for the test's duration."""
    with use_backend(FakeBackend()) as backend:
        yield backend


@pytest.fixture
def saved_cuda(fake, tmp_path):
    """(path of a saved small program on CUDA inputs, its example inputs, the expected outputs as arrays)."""
    f, args, ep = small_program("cuda")
    path = tmp_path / "small-cuda.jtx"
    ep.save(path)
    return path, args, [t.cpu().numpy() for t in f(*args)]

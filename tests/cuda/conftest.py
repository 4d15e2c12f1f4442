"""Fixtures for CUDA tests: a fake device in host memory (jitorch.backends.cuda.fake)."""

import pytest

from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend


@pytest.fixture
def fake():
    """CUDA tensors on a fake device for the test's duration; ``fake.launches`` and ``fake.copies`` record
    what the real device would have been asked to do."""
    with use_backend(FakeBackend()) as backend:
        yield backend

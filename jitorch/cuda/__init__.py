"""jitorch.cuda: CUDA device queries. The CUDA runtime arrives with the CUDA layer;
until then no device is ever available and CUDA tensors raise a clear RuntimeError."""


def is_available() -> bool:
    """Whether a CUDA device can be used (False until the CUDA runtime exists)."""
    return False


def device_count() -> int:
    """Number of usable CUDA devices."""
    return 0

"""The error every CUDA request gives on a machine without a usable CUDA driver or device."""


def no_cuda():
    """Raise the RuntimeError that says CUDA is unavailable (and why, when the driver says)."""
    from . import cuda_driver
    reason = cuda_driver.unavailable_reason()
    raise RuntimeError(
        "CUDA is not available: jitorch found no CUDA GPU or driver on this machine "
        f"(jitorch.cuda.is_available() is False{': ' + reason if reason else ''})"
    )

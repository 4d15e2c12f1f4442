"""What a CUDA request does until the CUDA runtime exists: a clear RuntimeError."""


def no_cuda():
    raise RuntimeError(
        "CUDA is not available: jitorch found no CUDA driver or device on this machine "
        "(jitorch.cuda.is_available() is False)"
    )

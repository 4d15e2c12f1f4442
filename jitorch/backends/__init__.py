"""Device backends: what runs ops and kernels on a device whose memory is not the host's, and torch.backends'
switches.

Each backend registers itself for its device type (``runtime.device.DEVICE_BACKENDS``) when imported;
``import jitorch`` imports them all. `cuda` is the one there is; it also holds ``torch.backends.cuda``'s
``matmul`` switches. `cudnn`, `mps`, `cpu`, `mkl`, `mkldnn` and `openmp` answer torch.backends' questions for
jitorch, `flags` holds the switches' machinery and `use_deterministic_algorithms`.
"""

from . import cpu, cuda, cudnn, flags, mkl, mkldnn, mps, openmp  # noqa: F401

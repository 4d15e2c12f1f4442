"""Casts and copies between dtypes and devices.

Values convert by the one cast table, `runtime.casts` (torch's results on x86).
"""

from __future__ import annotations

from ..runtime.casts import copy_into
from ..runtime.device import to_device
from .creation import dense_like
from .registry import TensorSpec, defop, preserved_strides


def _to_copy_meta(x, dtype, device):
    device = x.device if device is None else to_device(device)
    if x.device.type == "meta" and device.type != "meta":
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")
    return TensorSpec(x.shape, dtype or x.dtype, device)


def _to_copy_cpu(spec, x, dtype, device):
    out = dense_like(x, spec.dtype.np)  # torch's preserve_format (NumPy's order "K" differs when expanded)
    copy_into(out, x)
    return out


defop("_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
      meta=_to_copy_meta, cpu=_to_copy_cpu, kind="cast", variants=("function",), cross_device=True,
      layout=preserved_strides,
      doc="A copy of ``self`` with another dtype and/or device (what ``Tensor.to`` calls).")

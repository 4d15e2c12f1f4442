"""Casts and copies between dtypes and devices."""

from __future__ import annotations

from ..runtime.device import to_device
from .registry import TensorSpec, defop


def _to_copy_meta(x, dtype, device):
    return TensorSpec(x.shape, dtype or x.dtype, to_device(device) if device is not None else x.device)


def _to_copy_cpu(spec, x, dtype, device):
    return x.astype(spec.dtype.np, copy=True)


defop("_to_copy(Tensor self, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
      meta=_to_copy_meta, cpu=_to_copy_cpu, kind="cast", variants=("function",),
      doc="A copy of ``self`` with another dtype and/or device (what ``Tensor.to`` calls).")

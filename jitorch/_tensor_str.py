"""Tensor printing, in the style of torch's repr."""

from __future__ import annotations

import numpy as np

from .runtime import dtypes as _dt


def tensor_repr(t):
    suffix = []
    if t.device.type != "cpu":
        suffix.append(f"device='{t.device}'")
    if t.device.type == "meta":
        body = "..."
        suffix.append(f"size={tuple(t.shape)}")
    else:
        arr = np.asarray(t._array())
        if t.dtype in (_dt.float16, _dt.bfloat16):
            arr = arr.astype(np.float32)
        body = np.array2string(arr, separator=", ", prefix="tensor(")
    if t.dtype not in (_dt.get_default_dtype(), _dt.int64, _dt.bool):
        suffix.append(f"dtype={t.dtype}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{type(t.grad_fn).__name__}>")
    elif t.requires_grad:
        suffix.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + s for s in suffix) + ")"

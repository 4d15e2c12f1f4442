"""The IR's values and their types: `Value` (an SSA value, defined once) and `TensorType` (shape, dtype,
device), with the dtype codes the printed IR spells types with (``f32[64, 128]``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime import dtypes as _dt
from ..runtime.device import device as _device_cls

DTYPE_CODES = {
    "bool": "bool", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "uint16": "u16", "uint32": "u32", "uint64": "u64",
}
CODE_DTYPES = {code: getattr(_dt, name) for name, code in DTYPE_CODES.items()}


@dataclass(frozen=True)
class TensorType:
    """The type of a value: shape, dtype and device (``f32[64, 128]``, ``i64[]@cuda:0``)."""

    shape: tuple
    dtype: _dt.dtype
    device: _device_cls

    @property
    def ndim(self):
        return len(self.shape)

    def __str__(self):
        text = f"{DTYPE_CODES[self.dtype.name]}[{', '.join(str(n) for n in self.shape)}]"
        return text if self.device.type == "cpu" else f"{text}@{self.device}"


class Value:
    """One SSA value: defined once (by an input, a constant or a node output)."""

    __slots__ = ("name", "type", "node", "index", "requires_grad")

    def __init__(self, name, type, node=None, index=0, requires_grad=False):
        self.name = name
        self.type = type
        self.node = node      # the defining Node, or None for inputs and constants
        self.index = index    # which output of ``node``
        self.requires_grad = requires_grad

    def __repr__(self):
        return f"%{self.name}"

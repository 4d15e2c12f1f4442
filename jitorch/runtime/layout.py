"""Memory layouts: jitorch's tensors are all strided (torch's sparse and mkldnn layouts do not apply)."""

from __future__ import annotations


class layout:
    """A tensor's memory layout, printed as ``jitorch.strided``."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "jitorch." + self.name

    def __reduce__(self):
        return "strided"


strided = layout("strided")

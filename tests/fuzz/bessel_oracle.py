"""torch's modified Bessel functions of narrower floats taken from its float64 ones, for the oracle's torch runs.

torch's CPU kernels evaluate ``i0``, ``special.i0e``, ``special.i1`` and ``special.i1e`` of float32 (and of the
half types and integers) in float32: about half of all results are an ulp or more off the float64 value
rounded, and ``i0(0)`` and ``i0e(0)`` are ``1 - 2**-24`` where the exact value is 1. jitorch evaluates the same
Cephes series in float64 and rounds once (docs/differences-from-torch.md). An ulp is within the fuzzer's
tolerances, but a program can turn it into much more: ``sqrt(1 - i0(x))`` at ``x = 0`` is 0 in jitorch and
``2**-12`` in torch (fuzz seed 7950305, 40 statements). `Float64Bessel`, a dispatch mode for the oracle's
torch runs, makes torch's result its own float64 result rounded to the result's dtype: the more accurate of
its two answers, so that the comparison checks jitorch's values against it rather than skipping them.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# each form's packet (``i0_`` is a packet of its own) and its function
OPS = {aten.i0: aten.i0.default, aten.i0_: aten.i0.default, aten.special_i0e: aten.special_i0e.default,
       aten.special_i1: aten.special_i1.default, aten.special_i1e: aten.special_i1e.default}


class Float64Bessel(TorchDispatchMode):
    """While active, `OPS` (function, in-place and ``out=`` forms) whose result is not float64 give torch's
    float64 result rounded to the result's dtype; torch's own call still runs first, for its errors, its
    ``out=`` resizing and its result's dtype. ``calls`` counts the results replaced."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        function = OPS.get(func.overloadpacket)
        if function is None or not isinstance(args[0], torch.Tensor):
            return func(*args, **kwargs)
        # (from the operand as it is before the call: an in-place form, or an out= on it, writes it)
        wide = function(args[0].to(torch.float64))
        result = func(*args, **kwargs)
        if result.dtype != torch.float64 and result.shape == wide.shape:
            self.calls += 1
            result.copy_(wide)
        return result


def float64_bessel(T):
    """A context for running a program on library ``T``: `Float64Bessel` for torch, nothing for jitorch."""
    return Float64Bessel() if T is torch else contextlib.nullcontext()

"""``jitorch.backends.cpu``: what the CPU backend compiles for."""

from __future__ import annotations

_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq"})
_AVX2 = frozenset({"avx2", "fma"})


def get_cpu_capability():
    """The vector instruction set jitorch's compiled CPU kernels use, in torch's names: "AVX512", "AVX2" or
    "DEFAULT", from the machine they are compiled for (the host, or the one ``JITORCH_CPU`` selects)."""
    from ..codegen.machine import selected
    features = selected().required()
    if _AVX512 <= features:
        return "AVX512"
    return "AVX2" if _AVX2 <= features else "DEFAULT"

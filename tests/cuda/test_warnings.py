"""CUDA calls give their ops' meta-rule warnings once per call, eager or compiled, as CPU calls do
(the host fallback of an op the device does not compute warned a second time)."""

import pytest

import jitorch as jt
from tests.jit.test_compiled_warnings import PROGRAMS, _input, warned


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_cuda_calls_warn_once_per_call(fake, program, compiled):
    fn = (lambda x: program(jt, x))
    step = jt.compile(fn) if compiled else fn
    x = _input(jt, program, device="cuda")
    assert [warned(step, x) for _ in range(3)] == [1, 1, 1]

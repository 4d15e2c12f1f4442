"""torch's order of errors where an in-place or out= result has no kernel for its dtype and cannot be cast into
the tensor written (its TensorIterator checks the cast first), and ``round`` of integers given ``decimals``:
the same exception type and message as torch, eagerly and compiled, with nothing written."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt

CASES = {
    "bitwise_and_ by a float number": lambda L, x: x.bitwise_and_(2.5),
    "bitwise_or_ by a float tensor": lambda L, x: x.bitwise_or_(L.tensor([0.5, 1.0])),
    "bitwise_xor_ by a float number": lambda L, x: x.bitwise_xor_(1.5),
    "bitwise_left_shift_ by a float tensor": lambda L, x: x.bitwise_left_shift_(L.tensor([0.5, 1.0])),
    "gcd_ by a float tensor": lambda L, x: x.gcd_(L.tensor([1.0, 2.0])),
    "lcm out= of a float tensor": lambda L, x: L.lcm(x, L.tensor([1.0, 2.0]), out=x),
    "bitwise_and out= of a float number": lambda L, x: L.bitwise_and(x, 2.5, out=x),
    # kernels that refuse the dtype before any cast, in torch too
    "bitwise_and of a float number into a float out=": lambda L, x: L.bitwise_and(x, 2.5, out=L.zeros(2)),
    "lerp_ by a number weight": lambda L, x: x.lerp_(x.clone(), 0.5),
    "round of integers with decimals=0": lambda L, x: L.round(x, decimals=0),
    "round_ of integers with decimals=0": lambda L, x: x.round_(decimals=0),
    "round of integers with decimals=1": lambda L, x: x.round(decimals=1),
}


def _error(lib, case, dtype, compiled=False):
    x = lib.tensor([1, 2], dtype=getattr(lib, dtype))
    fn = CASES[case]
    call = jt.compile(lambda t: fn(lib, t)) if compiled else (lambda t: fn(lib, t))
    with pytest.raises(Exception) as caught:
        call(x)
    assert x.tolist() == [1, 2] or dtype == "bool" and x.tolist() == [True, True]
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
@pytest.mark.parametrize("case", list(CASES))
def test_an_uncastable_result_without_a_kernel_raises_torchs_error(case, dtype):
    """jitorch looked for the kernel first: ``int_tensor.bitwise_and_(2.5)`` raised NotImplementedError
    ('"bitwise_and_cpu" not implemented for 'Float'') where torch raises RuntimeError ("result type Float can't
    be cast to the desired output type Long"); ``round(int_tensor, decimals=0)`` computed where torch raises."""
    expected = _error(torch, case, dtype)
    assert _error(jt, case, dtype) == expected
    if dtype == "int64":  # (the trace takes the same path for every dtype)
        assert _error(jt, case, dtype, compiled=True) == expected


@pytest.mark.parametrize("dtype", ["int64", "uint8", "float32"])
def test_round_without_decimals_keeps_integers_and_float_rounding_stays_a_kernel(dtype):
    """Only ``round`` without ``decimals`` takes integers (torch's overload without it); a float ``round`` with
    ``decimals=0`` or none is still lowered into the compiled kernel."""
    values = np.array([0.5, 1.5, -2.5, 3.0], dtype=dtype if dtype == "float32" else "int64")
    if dtype == "uint8":
        values = np.abs(values)
    for lib in (torch, jt):
        t = lib.tensor(values).to(getattr(lib, dtype))
        assert lib.round(t).tolist() == torch.round(torch.tensor(values).to(getattr(torch, dtype))).tolist()
    f = jt.compile(lambda t: (t.round() * 2, t.round(decimals=0) + 1) if t.is_floating_point() else t.round() * 2)
    t = jt.tensor(values).to(getattr(jt, dtype))
    got = f(t)
    want = (torch.tensor(values).round() * 2, torch.tensor(values).round() + 1) if dtype == "float32" else \
        torch.tensor(values).to(getattr(torch, dtype)).round() * 2
    if dtype == "float32":
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        steps = f.lower(t).executable.steps
        assert not any(hasattr(s, "reason") for s in steps)
    else:
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("shapes", [((2, 2), (2, 2)), ((2, 2, 2), (2, 2)), ((2, 2), (2, 2, 2)), ((2,), (2, 2, 2)),
                                    ((), (2, 2, 2)), ((2, 2, 2), ()), ((2, 2, 2, 2), (2, 2, 2)),
                                    ((2, 2, 2), (2, 2, 2, 2))])
@pytest.mark.parametrize("name", ["addbmm", "baddbmm"])
def test_addbmm_and_baddbmm_of_operands_not_3d_raise_torchs_error(name, shapes):
    """torch reads ``batch2.size(2)`` and ``batch1``'s sizes before it checks for 3-D operands, so a 2-D batch2
    raises IndexError ("Dimension out of range ..."); jitorch raised RuntimeError ("batch1 must be a 3D tensor")."""
    errors = []
    for lib in (torch, jt):
        with pytest.raises(Exception) as caught:
            getattr(lib, name)(lib.ones(2, 2), lib.ones(shapes[0]), lib.ones(shapes[1]))
        errors.append((type(caught.value), str(caught.value)))
    assert errors[1] == errors[0]

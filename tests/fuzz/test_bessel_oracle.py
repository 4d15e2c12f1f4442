"""The oracle's torch runs take i0, i0e, i1 and i1e of narrower floats from torch's float64 results."""

import numpy as np
import pytest
import torch

from tests.fuzz.bessel_oracle import Float64Bessel
from tests.fuzz.generator import generate, op_table
from tests.fuzz.oracle import CPU_MODES, check

X = torch.tensor([0.0, 0.5, -1.25, 3.0, 9.0, -40.0])


@pytest.mark.parametrize("fn", [torch.i0, torch.special.i0, torch.special.i0e, torch.special.i1, torch.special.i1e])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_bessel_function_of_a_narrow_float_is_its_float64_value_rounded(fn, dtype):
    x = X.to(dtype)
    with Float64Bessel() as mode:
        got = fn(x)
    assert got.dtype == dtype and mode.calls == 1
    assert torch.equal(got, fn(x.double()).to(dtype))


def test_torchs_float32_i0_of_zero_is_below_one_and_the_mode_makes_it_one():
    """The documented difference the mode takes away (docs/differences-from-torch.md)."""
    assert torch.i0(torch.zeros(1)).item() == 1 - 2 ** -24
    assert np.i0(0.0) == 1.0 and torch.i0(torch.zeros(1, dtype=torch.float64)).item() == 1.0
    with Float64Bessel():
        assert torch.i0(torch.zeros(1)).item() == 1.0


def test_out_and_in_place_forms_and_integer_operands_are_replaced_too():
    with Float64Bessel() as mode:
        out = torch.empty(0)
        torch.special.i1(X, out=out)
        inplace = X.clone().i0_()
        ints = torch.i0(torch.tensor([0, 3], dtype=torch.uint8))
    assert mode.calls == 3
    assert torch.equal(out, torch.special.i1(X.double()).float())
    assert torch.equal(inplace, torch.i0(X.double()).float())
    assert ints.dtype == torch.float32 and torch.equal(ints, torch.i0(torch.tensor([0.0, 3.0]).double()).float())


def test_float64_and_torchs_errors_are_left_alone():
    with Float64Bessel() as mode:
        torch.i0(X.double())
        with pytest.raises(RuntimeError, match="can't be cast"):
            torch.i0(X, out=torch.empty(6, dtype=torch.int64))
    assert mode.calls == 0


def test_the_gradient_of_i0_is_torchs_float64_i1_rounded():
    x = X.clone().requires_grad_()
    with Float64Bessel():
        torch.i0(x).sum().backward()
    assert torch.equal(x.grad, torch.special.i1(X.double()).float())


def test_sqrt_of_one_minus_i0_of_a_zero_is_zero_against_torch_seed_7950305():
    """Fuzz seed 7950305 (40 statements): ``T.i0(x0, out=v2)`` of a uint8 zero, then ``T.sqrt(1 - v2)``: torch's
    float32 ``i0(0)`` is ``1 - 2**-24``, so its square root was ``2**-12`` where jitorch's is 0."""
    program, _ = generate(7950305, 40, table=op_table())
    assert "T.i0(" in "\n".join(line for s in program.body for line in s.lines)
    assert not check(program, CPU_MODES).mismatches

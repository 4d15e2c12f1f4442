"""The program generator's rule for divisors (session 47's campaigns): fixed seeds."""

import warnings

from tests.fuzz.generator import generate
from tests.fuzz.oracle import CPU_MODES, check


def test_no_computed_divisor_about_zero_seed_47100012():
    """Fuzz seed 47100012 (``--nets 0.3 --losses 0.2``, found at ``JITORCH_CPU=x86-64-v2``, one thread; it fails at
    the default target too): ``v4.addcdiv_(x0, v2)`` with ``v2`` a layer norm's output times its input, at an element
    equal to its row's mean: eager's layer norm gave an exact 0 there (the quotient inf), torch's 5.5e-8 (4e8), each
    right to its rounding. The generator now draws no division by a computed divisor within 1e-3 of 0 in programs
    with network patterns (`generator._divisor_checked`), and the seed's program runs alike."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program, _ = generate(47100012, losses=0.2, nets=0.3)
        assert not any(s.tag.startswith("addcdiv") for s in program.body)
        assert not check(program, CPU_MODES).mismatches

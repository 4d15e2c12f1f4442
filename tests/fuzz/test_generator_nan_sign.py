"""The generator's rules for what a program's later call reads: a NaN's sign bit, which no library defines, and
a captured tensor that a statement after an exact read of it writes inexactly."""

import torch

from tests.fuzz.generator import (DISCONTINUOUS, NAN_SIGN_READERS, Facts, Generator, Var, generate,
                                  nan_sign_cleared, op_table)
from tests.fuzz.oracle import CPU_MODES, check

TABLE = op_table()


def test_nan_sign_readers_read_float_operands_with_their_nan_signs_cleared():
    """Every float operand of a NaN-sign reader is wrapped, whatever its values now: a later call may hold a NaN
    there (an integer or a literal is left as it is)."""
    env = {"f": Var("f", torch.tensor([1.0, -2.0]), Facts()),
           "i": Var("i", torch.tensor([1, -2]), Facts())}
    assert nan_sign_cleared(env, "f") == "T.where(f.isnan(), f.abs(), f)"
    assert nan_sign_cleared(env, "i") == "i" and nan_sign_cleared(env, "-1.5") == "-1.5"
    assert NAN_SIGN_READERS == {"signbit": 0, "copysign": 1} and "signbit" in DISCONTINUOUS


def test_an_inexact_write_into_a_captured_tensor_read_exactly_before_is_refused():
    """`Generator._breaks_exact_reads`: once a discontinuous statement read captured group ``t0`` as exact, an
    update marking ``t0`` (or a view in its group) inexact is refused; another group's is kept."""
    g = Generator(0, table=TABLE)
    g.exact_read = {"t0"}
    assert g._breaks_exact_reads({"M.t0": Facts(False, True, "t0", "buffer")})
    assert not g._breaks_exact_reads({"M.t1": Facts(False, True, "t1", "buffer")})
    assert not g._breaks_exact_reads({"M.t0": Facts(True, True, "t0", "buffer")})


def test_signbit_of_a_buffer_written_by_log2_in_the_previous_call_seed_8401518():
    """Seed 8401518 of 40 statements: ``v0 = M.t0.signbit(); M.t0.log2_()``: the second call's signbit read the
    NaNs that the first call's log2_ of negatives made, whose sign bit differs between eager (NumPy's: negative)
    and torch and the kernels (positive). signbit now reads its operand with NaN signs cleared, and the log2_,
    an inexact write into a buffer a discontinuous op read as exact, is refused."""
    program, _ = generate(8401518, 40, table=TABLE)
    reads = [line for s in program.body for line in s.lines if "signbit" in line]
    assert reads and all("T.where(M.t0.isnan(), M.t0.abs(), M.t0)" in line for line in reads)
    assert not [line for s in program.body for line in s.lines if line.strip().startswith("M.t0.log2_")]
    assert not check(program, CPU_MODES).mismatches

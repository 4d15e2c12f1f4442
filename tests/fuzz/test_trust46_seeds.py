"""Seeds session 46's fuzz bursts failed on (program fuzzer, ``--namespaced``), as regression cases."""

import warnings

from tests.fuzz.generator import generate, op_table
from tests.fuzz.oracle import CPU_MODES, check


def test_lu_unpack_of_an_empty_lu_reads_no_pivots_seed_9131043():
    """Seed 9131043 (``--namespaced``): ``lu_unpack`` of a (1, 0) LU with (1, 1) pivots, which torch's kernel never
    reads (min(m, n) is 0) and whose shape it does not check: P is the identity of LU's batch. jitorch raised its
    pivots-shape error (tests/ops/test_trust46.py)."""
    program, _ = generate(9131043, table=op_table(True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check(program, CPU_MODES).mismatches

"""benchmarks/emulator.py: its hand-written tree reduction (a barrier per halving of a shared tile) gives each
block's sum, launch after launch."""

from pathlib import Path

import numpy as np
import pytest

from jitorch.backends.cuda import emulator
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "emulator.py"

pytestmark = pytest.mark.skipif(not emulator.available(), reason="the kernel emulator needs Linux on x86-64 or "
                                                                 "AArch64")


def test_the_tree_sum_kernel_sums_each_blocks_thread_indices():
    bench = load_script(SCRIPT, "emulator_benchmark")
    kernel = bench.tree_sum(64)
    assert not kernel.serial
    out = np.zeros(3, np.int64)
    bench.measured(lambda: kernel([out.ctypes.data], (3,), 64), repeat=2)
    np.testing.assert_array_equal(out, np.full(3, 64 * 63 // 2))

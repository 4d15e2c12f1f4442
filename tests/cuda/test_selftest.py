"""jitorch/cuda/selftest.py: the emulated kernel check's smaller input still checks the GPU run's kernels.
(The selftest itself runs in tests/cuda/test_no_driver.py, emulated, and tests/cuda/test_driver.py, on the
fake driver.)"""

import re

import numpy as np
import pytest

import jitorch as jt
from jitorch.cuda import selftest


def _kernel(fn, rows):
    x = jt.tensor(np.zeros((rows, 257), np.float32))
    (k,) = jt.compile(fn).lower(x, device="cuda").executable.kernels
    return k


@pytest.mark.parametrize("case", selftest.KERNEL_CASES)
def test_emulated_rows_give_the_kernels_of_the_gpu_rows_up_to_constants(case):
    fn = selftest.KERNEL_CASES[case]
    gpu, emulated = _kernel(fn, selftest.ROWS), _kernel(fn, selftest.EMULATED_ROWS)
    assert (emulated.name, emulated.mode, emulated.grid()[1]) == (gpu.name, gpu.mode, gpu.grid()[1])
    assert (emulated.source.split is None) == (gpu.source.split is None)
    assert re.sub(r"\d+", "N", emulated.llvm_ir) == re.sub(r"\d+", "N", gpu.llvm_ir)

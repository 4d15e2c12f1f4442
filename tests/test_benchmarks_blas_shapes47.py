"""benchmarks/blas_shapes.py at its --quick sizes: each product shape of a step timed under OpenBLAS, MKL whole and in
its parts, and torch; the per-step tables under the three routings (mkl, openblas, rule). It needs MKL chosen."""

from pathlib import Path

import numpy as np
import pytest

from jitorch.ops import linalg
from jitorch.runtime import blas_calls, blas_library
from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "blas_shapes.py"
pytestmark = pytest.mark.skipif(blas_library.chosen() != blas_library.MKL, reason="MKL is not chosen here")


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT, "blas_shapes_benchmark")


def test_each_routing_runs_its_library_and_is_undone(bench):
    """1024x4096x128 float32 with ``a`` transposed: the rule's OpenBLAS, the "mkl" routing's MKL parts (8 by work
    alone, as the last stop split), the "openblas" routing's NumPy matmul; each undo restores the rule."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4096, 1024)).astype(np.float32).T, rng.standard_normal((4096, 128)).astype(np.float32)
    bits = {}
    for routing in bench.ROUTINGS:
        undo = bench.routed(routing)
        try:
            before = blas_calls.counters["part calls"]
            bits[routing] = linalg.array_product(a, b).tobytes()
            assert blas_calls.counters["part calls"] - before == (8 if routing == "mkl" else 0), routing
        finally:
            undo()
    assert bits["rule"] == bits["openblas"] == np.matmul(a, b).tobytes()
    assert not blas_library.mkl_shape(a.dtype, 1024, 4096, 128, True, False) and linalg.MKL_PART_MIN == 256


def test_the_shape_and_step_tables_print(bench, capsys):
    bench.main(["--models", "gpt-1x32", "--quick", "--rounds", "1", "--layouts"])
    out = capsys.readouterr().out
    assert "mkl/ob" in out and {" NN ", " NT ", " TN ", " TT "} <= {f" {w} " for line in out.splitlines()[2:]
                                                                  for w in line.split()[4:5]}
    bench.main(["--models", "gpt-1x32", "--quick", "--rounds", "1", "--steps", "1,2"])
    out = capsys.readouterr().out
    assert "1 thread: products' thread CPU ms" in out and "2 threads: products' wall ms" in out
    assert sum(line.startswith("gpt-1x32") for line in out.splitlines()) == 2
    bench.main(["--models", "gpt-1x32", "--quick", "--rounds", "1", "--steps", "1", "--whole-steps"])
    assert "whole compiled step" in capsys.readouterr().out

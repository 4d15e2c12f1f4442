"""Failures of the differential fuzzer (tests/fuzz/oracle.py) found in session 45's trust bursts."""

import warnings

import torch

import jitorch
from tests.fuzz.generator import Generator, generate, op_table
from tests.fuzz.oracle import CPU_MODES, check


def test_matmul_of_a_vector_by_a_matrix_writes_no_out_view_seed_8490215():
    """Main fuzz seed 8490215 (``--namespaced --out-views 0.5``): ``T.matmul(v4, m, out=v1)`` with ``v4`` a vector and
    ``v1`` a view of a strided input. torch resizes an out of the result's own shape [4] to [1, 4] (its resize
    warning) and back, which gives the view contiguous strides: it wrote the elements between the view's (the
    input's sentinel 7 became -1.625). jitorch writes the view's own elements. The generator asks torch whether it
    resizes an out of the result's shape (`Generator.resizes_its_shape`) and writes no view with such a call."""
    def written(T):
        base = T.full((10,), 7.0)
        T.matmul(T.tensor([2.0]), T.tensor([[1.0, -1.0, 0.75, 0.0]]), out=base[::2][1:])
        return base.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert written(torch)[3] == -2.0  # (torch's write between the view's elements)
        assert written(jitorch) == [7.0, 7.0, 2.0, 7.0, -2.0, 7.0, 1.5, 7.0, 0.0, 7.0]
        program, _ = generate(8490215, table=op_table(True), out_views=0.5)
        assert any("T.matmul(" in line and "out=" in line for s in program.body for line in s.lines)
        assert not check(program, CPU_MODES).mismatches

    g = Generator(0)
    vector, matrix = g.evaluate({}, "T.ones(1)"), g.evaluate({}, "T.ones(1, 4)")
    assert vector is not None and matrix is not None
    entry = next(e for e in op_table() if e.name == "matmul" and e.call == "matmul")
    env = {name: type("V", (), {"value": value})() for name, value in (("a", vector), ("b", matrix))}
    assert g.resizes_its_shape(env, entry, "a, b", (4,), "float32")
    env["a"].value = torch.ones(2, 1)
    assert not g.resizes_its_shape(env, entry, "a, b", (2, 4), "float32")

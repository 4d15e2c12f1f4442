"""An exported program keeps the checks of values its graph holds (`jitorch.ops.value_checks`): loaded again,
it raises eager's error for a bad value."""

from __future__ import annotations

import io

import numpy as np
import pytest

import jitorch as jt


def _loss(x, t, i):
    x.index_select(0, i)  # dead: its check stays
    p = x.sigmoid()
    return jt.nn.functional.cross_entropy(x, t) + jt.nn.functional.binary_cross_entropy(p, p)


def _inputs(t=(0, 1, 2, 3), i=(0, 1)):
    x = jt.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5))
    return x, jt.tensor(list(t)), jt.tensor(list(i))


def test_a_loaded_program_keeps_its_checks_and_raises_eagers_errors():
    ep = jt.export(_loss, _inputs())
    buf = io.BytesIO()
    ep.save(buf)
    buf.seek(0)
    back = jt.export.load(buf)
    assert str(back.graph) == str(ep.graph)
    rules = {n.args[1] for n in back.graph.nodes if n.op.name == "_check_values"}
    assert rules == {"class_targets", "probabilities"}  # (the dead index_select is still a node: optimised at load)
    np.testing.assert_allclose(back(*_inputs()).numpy(), _loss(*_inputs()).numpy(), rtol=1e-6)
    with pytest.raises(IndexError, match="^Target 5 is out of bounds.$"):
        back(*_inputs(t=(0, 5, 1, 1)))
    with pytest.raises(IndexError, match="^index out of range in self$"):
        back(*_inputs(i=(0, 4)))
    with pytest.raises(RuntimeError, match="^all elements of input should be between 0 and 1$"):
        x, t, i = _inputs()
        back(x * np.nan, t, i)  # (a NaN probability is outside [0, 1], as in torch's check)

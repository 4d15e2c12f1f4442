"""Exported programs whose outputs view an input exported on an expanded (stride 0) example (trust55)."""

import pytest

import jitorch
from jitorch.export import ExportError
from tests.export.helpers import round_trip, shares


def test_exporting_a_view_of_an_expanded_input_does_not_divide_by_its_stride_0_seed_5580050(tmp_path):
    # (the output views' index steps were found by dividing offsets by the example's strides: ZeroDivisionError at
    # export for x1[5:] of an x1 expanded from one element; fuzz seed 5580050 of --export --edges 0.4)
    def fn(x0, x1):
        return x1[5:], x1, x0 * 2

    x0 = jitorch.tensor(1.5)
    expanded = jitorch.tensor([3], dtype=jitorch.uint8).expand(2)
    program = round_trip(fn, (x0, expanded), tmp_path)
    plain = jitorch.tensor([3, 4], dtype=jitorch.uint8)
    for x1 in (expanded, plain):
        empty, itself, doubled = program(x0, x1)
        assert empty.shape == (0,) and doubled.item() == 3.0
        # (the input itself is the caller's tensor in any layout, as eager's: seed 5580144)
        assert itself.tolist() == x1.tolist() and shares(itself, x1) and itself.stride() == x1.stride()


def test_a_view_of_an_input_exported_expanded_has_eagers_values_in_another_layout_seed_5580146(tmp_path):
    # (x.expand(2, 3) of an x of stride 0 has strides (0, 0), which say no steps over x's indices: a view of the
    # caller's x in the example's layout, new memory of the same values in another, docs/differences-from-torch.md)
    def fn(x):
        return x.expand(2, 3), x + 1

    expanded = jitorch.tensor([5], dtype=jitorch.int16).expand(3)
    program = round_trip(fn, (expanded,), tmp_path)
    view, _ = program(expanded)
    assert view.tolist() == [[5] * 3] * 2 and shares(view, expanded) and view.stride() == (0, 0)
    plain = jitorch.tensor([1, 2, 3], dtype=jitorch.int16)
    view, bumped = program(plain)
    assert view.tolist() == [[1, 2, 3]] * 2 and bumped.tolist() == [2, 3, 4]


def _write_row(x):
    x[:, -4] = 0.25
    return x * 2


def test_an_exported_program_refuses_to_write_into_an_input_called_expanded_seed_5580745(tmp_path):
    # (its write-back is the input's whole new value, which over memory the rows share left the unwritten rows' old
    # values where eager's write shows in every row; fuzz seed 5580745 of --export --edges 0.4)
    program = round_trip(_write_row, (jitorch.arange(20.0).reshape(1, 4, 5),), tmp_path)
    assert program.graph.mutations
    base = jitorch.arange(5.0).reshape(1, 1, 5)
    with pytest.raises(RuntimeError, match=r"writes into input 0 \(\[1, 4, 5\]\), which is expanded"):
        program(base.expand(1, 4, 5))
    assert base.tolist() == [[[0.0, 1.0, 2.0, 3.0, 4.0]]]  # (refused before any write)
    x = jitorch.arange(20.0).reshape(1, 4, 5)
    assert program(x)[0, 0].tolist() == [0.5] * 5 and x[0, 0].tolist() == [0.25] * 5


def test_exporting_a_write_into_an_expanded_example_raises_seed_5580760():
    # (the graph wrote on the example's shared memory: called on a plain input, x[-1] = -1 wrote every element)
    with pytest.raises(ExportError, match=r"writes into input 0 \(\[1, 4, 5\]\), expanded \(strides \[5, 0, 1\]\)"):
        jitorch.export(_write_row, (jitorch.arange(5.0).reshape(1, 1, 5).expand(1, 4, 5),))

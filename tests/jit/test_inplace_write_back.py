"""A compiled call that writes part of an input in place: the values read before the write stay the old ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitorch as jt

A = np.array([0.5, -1.0, 2.0, 0.25], np.float32)


def _strided():
    base = jt.zeros(8)
    base[::2] = jt.tensor(A)
    return base[::2]


PROGRAMS = {
    "slice_mul_": lambda x: (lambda v: (x[::3].mul_(2), v - x)[1])(x + 0),
    "setitem_then_fmax": lambda x: (lambda v: (x.__setitem__(slice(None, None, 3), 0.125), v - x)[1])(x.fmax(x * 0)),
    "copy_": lambda x: (lambda v: (x[::3].copy_(jt.tensor([3.0, 4.0])), v - x)[1])(x.clone()),
}


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_a_value_read_before_a_partial_write_of_a_strided_input_keeps_the_old_values(program, layout):
    """Fuzz seed 7701876: ``v = x + 0; x[::3].mul_(2); return v - x`` on a strided ``x`` gave zeros compiled. The
    write goes through the input's compact copy (its written-back value is an ``as_strided`` view of the
    scattered span), and the last kernel, fusing ``x + 0`` with that view and the subtraction, was planned to
    store the view into the copy it also read ``x`` from: the view reached it first. Such a view is no longer
    written in place; the input after the call is eager's too."""
    fn = PROGRAMS[program]
    make = _strided if layout == "strided" else (lambda: jt.tensor(A))
    eager_x, compiled_x = make(), make()
    want = fn(eager_x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jt.compile(fn)(compiled_x)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(compiled_x.numpy(), eager_x.numpy())

"""Ops over uint16, uint32 and uint64. Where torch 2.13 has a CPU kernel for them the result is torch's;
where it has none (add, comparisons, max, floor division, shifts, ...) jitorch computes with unsigned
wrap-around as it does for uint8, checked against NumPy's unsigned arithmetic."""

import numpy as np
import pytest
import torch

import jitorch as jt

NEW = ("uint16", "uint32", "uint64")


def values(name):
    """Edge values of ``name`` (0, 1, the top bit, the maximum) and ordinary ones, as a list of ints."""
    hi = int(np.iinfo(np.dtype(name)).max)
    return [0, 1, 7, hi, hi - 1, hi // 2 + 1, hi // 2, 300, 12345, 5]


def pair(m, name):
    """(a, b) of module ``m`` (jitorch or torch): the edge values and them reversed."""
    v = values(name)
    return m.tensor(v, dtype=getattr(m, name)), m.tensor(v[:1] + v[:0:-1], dtype=getattr(m, name))


def _plain(r):
    """A result as Python data with its dtype's name, comparable between jitorch and torch."""
    if hasattr(r, "tolist"):
        return str(r.dtype).split(".")[-1], r.tolist()
    return str(r).replace("jitorch", "torch")


def assigned(x, key, value):
    x[key] = value
    return x


# ops torch 2.13 runs on these dtypes on the CPU: jitorch must give its results
TORCH_OPS = {
    "mul": lambda m, a, b: a * b,
    "mul_by_wrapping_number": lambda m, a, b: a * (2 ** 32 + 3),
    "eq": lambda m, a, b: a == b,
    "ne_number": lambda m, a, b: a != 7,
    "sum_is_int64": lambda m, a, b: a.sum(),
    "sum_dim": lambda m, a, b: a.reshape(2, 5).sum(1),
    "prod": lambda m, a, b: a.prod(),
    "cumsum": lambda m, a, b: a.cumsum(0),
    "sort": lambda m, a, b: a.sort(stable=True),
    "argsort": lambda m, a, b: a.argsort(stable=True, descending=True),
    "bitwise": lambda m, a, b: ((a & b) | (a ^ 3)),
    "true_divide": lambda m, a, b: a / (b | 1),
    "divide_by_float": lambda m, a, b: a / 2.5,
    "add_float": lambda m, a, b: a + 1.5,
    "where": lambda m, a, b: m.where(a == b, a, b),
    "cat_stack": lambda m, a, b: m.stack([m.cat([a, b])[::3], m.cat([b, a])[::3]]),
    "views": lambda m, a, b: a.view(2, 5).t().contiguous().reshape(-1)[1::2],
    "index": lambda m, a, b: a[m.tensor([1, 3, 3])],
    "mask": lambda m, a, b: a[a == b],
    "setitem": lambda m, a, b: assigned(a.clone(), slice(0, 3), b[:3]),
    "copy_": lambda m, a, b: m.zeros(10, dtype=a.dtype).copy_(b),
    "roll_repeat": lambda m, a, b: a.roll(2).repeat(2),
    "unique": lambda m, a, b: m.unique(a),
    "any_all": lambda m, a, b: (a.any(), a.all()),
    "tolist_item": lambda m, a, b: (a.tolist(), a[3].item()),
    "repr": lambda m, a, b: repr(a.view(2, 5)),
    "to_float": lambda m, a, b: (a.float(), a.double(), a.half(), a.bfloat16(), a.long(), a.to(m.uint8)),
    "zeros_ones_full": lambda m, a, b: (m.zeros(2, dtype=a.dtype), m.ones(2, dtype=a.dtype),
                                        m.full((2,), -1, dtype=a.dtype)),
}


@pytest.mark.parametrize("name", NEW)
def test_ops_torch_runs_match_torch(name):
    for op, fn in TORCH_OPS.items():
        got, expected = fn(jt, *pair(jt, name)), fn(torch, *pair(torch, name))
        if not isinstance(expected, tuple):
            got, expected = (got,), (expected,)
        assert [_plain(g) for g in got] == [_plain(e) for e in expected], op


# ops torch has no unsigned kernel for: NumPy's unsigned arithmetic (wrapping, like uint8's) is the oracle
WRAPPING_OPS = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "add_number": (lambda a, b: a + 9, lambda a, b: a + np.array(9, a.dtype)),
    "rsub_number": (lambda a, b: 3 - a, lambda a, b: np.array(3, a.dtype) - a),
    "neg": (lambda a, b: -a, lambda a, b: -a),
    "abs": (lambda a, b: a.abs(), lambda a, b: a),
    "lt": (lambda a, b: a < b, np.less),
    "ge_number": (lambda a, b: a >= 300, lambda a, b: a >= 300),
    "floor_divide": (lambda a, b: a // (b | 1), lambda a, b: a // (b | 1)),
    "remainder": (lambda a, b: a % (b | 1), lambda a, b: a % (b | 1)),
    "shifts": (lambda a, b: (a << 3) ^ (a >> 5), lambda a, b: (a << 3) ^ (a >> 5)),
    "maximum": (lambda a, b: jt.maximum(a, b), np.maximum),
    "clamp": (lambda a, b: a.clamp(3, 300), lambda a, b: np.clip(a, 3, 300)),
    "pow": (lambda a, b: a ** 2, lambda a, b: a * a),
    "max_argmax": (lambda a, b: jt.stack([a.max(), a.argmax().to(a.dtype)]),
                   lambda a, b: np.array([a.max(), a.argmax()], a.dtype)),
    "min_dim": (lambda a, b: a.view(2, 5).min(1).values, lambda a, b: a.reshape(2, 5).min(1)),
}


@pytest.mark.parametrize("name", NEW)
def test_ops_torch_lacks_wrap_as_numpys_unsigned_arithmetic(name):
    a, b = pair(jt, name)
    for op, (fn, ref) in WRAPPING_OPS.items():
        with np.errstate(over="ignore"):
            expected = np.asarray(ref(a.numpy(), b.numpy()))
        got = fn(a, b)
        assert got.dtype is (jt.bool if expected.dtype == np.bool_ else a.dtype), op
        np.testing.assert_array_equal(got.numpy(), expected, err_msg=op)


def test_unsigned_division_by_zero_raises_as_for_uint8():
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jt.tensor([5], dtype=jt.uint32) // jt.tensor([0], dtype=jt.uint32)


def test_random_of_uint64_draws_over_its_whole_range():
    # the default range [0, 2**64) was drawn as int64: NumPy's ValueError "high is out of bounds for int64"
    jt.manual_seed(0)
    x = jt.empty(2000, dtype=jt.uint64).random_()
    assert x.dtype is jt.uint64 and (x > 2 ** 63).any() and (x < 2 ** 63).any()
    small = jt.empty(2000, dtype=jt.uint16).random_(3, 9)
    assert set(small.tolist()) == set(range(3, 9))

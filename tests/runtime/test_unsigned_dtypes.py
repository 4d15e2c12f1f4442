"""uint16, uint32 and uint64: the dtypes themselves, torch's promotion of them (refused with any other
bool or integer dtype), their creation and conversion to and from NumPy, and the cast table's route
from floats into them, all against torch 2.13 as the oracle."""

import numpy as np
import pytest
import torch

import jitorch as jt

NEW = ("uint16", "uint32", "uint64")
NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64") + NEW
PAIRS = [(a, b) for a in NAMES for b in NAMES if a in NEW or b in NEW]


def _outcome(fn):
    """(result, None) or (None, (exception type name, message)) of ``fn()``, with the module prefix of
    dtypes dropped so jitorch's and torch's results compare equal."""
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - the oracle's exception is what is compared
        return None, (type(e).__name__, str(e))
    return str(result).replace("jitorch.", "torch."), None


@pytest.mark.parametrize("name", NEW)
def test_dtype_attributes_match_torch(name):
    d, t = getattr(jt, name), getattr(torch, name)
    assert repr(d) == f"jitorch.{name}"
    assert (d.is_signed, d.is_floating_point, d.itemsize) == (t.is_signed, t.is_floating_point, t.itemsize)
    info, tinfo = jt.iinfo(d), torch.iinfo(t)
    assert (info.min, info.max, info.bits, info.dtype) == (tinfo.min, tinfo.max, tinfo.bits, tinfo.dtype)
    x = jt.zeros(2, dtype=d)
    expected_type = torch.zeros(2, dtype=t).type().replace("torch.", "jitorch.")
    assert (x.is_signed(), x.element_size(), x.type()) == (False, t.itemsize, expected_type)


def test_every_promotion_with_the_new_dtypes_matches_torch():
    # promote_types, and result_type of tensors with dimensions, 0-d tensors and a mix, for every pair
    for a, b in PAIRS:
        for shapes in (((2,), (2,)), ((2,), ()), ((), (2,)), ((), ())):
            def run(m, shapes=shapes, a=a, b=b):
                x, y = m.zeros(shapes[0], dtype=getattr(m, a)), m.zeros(shapes[1], dtype=getattr(m, b))
                return m.result_type(x, y), (x * y).dtype
            assert _outcome(lambda: run(jt)) == _outcome(lambda: run(torch)), (a, b, shapes)
        assert _outcome(lambda: jt.promote_types(getattr(jt, a), getattr(jt, b))) == \
            _outcome(lambda: torch.promote_types(getattr(torch, a), getattr(torch, b))), (a, b)


@pytest.mark.parametrize("scalar", [True, 3, -1, 2.5, 2 ** 40])
def test_promotion_with_python_numbers_matches_torch(scalar):
    for name in NEW:
        for shape in ((2,), ()):
            def run(m, name=name, shape=shape):
                x = m.ones(shape, dtype=getattr(m, name))
                return m.result_type(x, scalar), (x * scalar).dtype, (scalar * x).dtype, (x / scalar).dtype
            assert _outcome(lambda: run(jt)) == _outcome(lambda: run(torch)), (name, shape)


def test_refused_promotion_names_both_dtypes_as_torch():
    with pytest.raises(RuntimeError, match="Promotion for uint16, uint32, uint64 types is not supported, "
                                           "attempted to promote UInt32 and Long"):
        jt.ones(2, dtype=jt.uint32) * jt.ones(2, dtype=jt.int64)


def test_where_promotes_only_its_values_not_the_bool_condition():
    # the condition took part in the result dtype; with uint16 values a bool then refused to promote
    c = jt.tensor([True, False])
    u = jt.tensor([1, 2], dtype=jt.uint16)
    assert jt.where(c, u, jt.tensor(7, dtype=jt.uint16)).tolist() == [1, 7]
    with pytest.raises(RuntimeError, match="promote UInt16 and Long"):
        jt.where(c, u, jt.tensor([7, 8]))


@pytest.mark.parametrize("name", NEW)
def test_numpy_round_trip_shares_memory_and_keeps_the_extreme_values(name):
    npd = np.dtype(name)
    values = np.array([0, 1, np.iinfo(npd).max, np.iinfo(npd).max // 2 + 1], npd)
    x = jt.from_numpy(values)
    assert x.dtype is getattr(jt, name) and np.shares_memory(x.numpy(), values)
    assert x.tolist() == torch.from_numpy(values).tolist() == [int(v) for v in values]
    assert x[2].item() == int(np.iinfo(npd).max)
    assert str(x).replace("jitorch", "torch") == str(torch.from_numpy(values))


def test_tensor_of_python_ints_overflows_as_torchs():
    # bools into uint64 raised NumPy's OverflowError: the range check compared them with -(2**64 - 1)
    for data, name in (([-1, 3], "uint16"), ([70000], "uint16"), ([-(2 ** 32)], "uint32"), ([-1], "uint64"),
                       ([2 ** 64], "uint64"), ([2 ** 64 - 1, 2 ** 63], "uint64"), ([1.5], "uint64"),
                       ([True, 2], "uint64"), ([True, False], "uint64"), ([[1], [2 ** 64 - 1]], "uint64"),
                       ([1.5, -2.0], "uint32")):
        def run(m, data=data, name=name):
            return m.tensor(data, dtype=getattr(m, name)).tolist()
        assert _outcome(lambda: run(jt)) == _outcome(lambda: run(torch)), (data, name)


SPECIAL = [-1.0, -1.5, -70000.0, 65536.0, 70000.5, 2.0 ** 32 + 3, -2.0 ** 32, 2.0 ** 63, 2.0 ** 64, 1e30, -1e30,
           float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 2.0 ** 63 + 2 ** 40, 0.7, 2 ** 31 + 0.5,
           2.0 ** 32 - 1, -60000.0, 40000.0]


@pytest.mark.parametrize("src", ["float16", "bfloat16", "float32", "float64"])
def test_float_to_unsigned_follows_torchs_x86_route(src):
    # uint32 and uint64 convert as x86 converts to unsigned (2**w and beyond give 0, not the wrapped
    # value), uint16 through int32, float16 into uint32 through int64: NumPy's casts are undefined there.
    # Torch's scalar tail loop converts some values differently from its vector body, so the rows are
    # long enough for every value to take the vector body.
    for name in ("uint8",) + NEW:
        expected = torch.tensor(SPECIAL, dtype=getattr(torch, src)).repeat(4).to(getattr(torch, name))
        got = jt.tensor(SPECIAL, dtype=getattr(jt, src)).repeat(4).to(getattr(jt, name))
        assert got.tolist() == expected.tolist(), name


@pytest.mark.parametrize("name", NEW)
def test_integer_casts_to_and_from_every_dtype_match_torch(name):
    hi = int(np.iinfo(np.dtype(name)).max)
    values = [0, 1, 255, 256, 65535, hi, hi // 2, hi // 2 + 1, hi - 1]
    for other in NAMES:
        x, t = jt.tensor(values, dtype=getattr(jt, name)), torch.tensor(values, dtype=getattr(torch, name))
        assert x.to(getattr(jt, other)).tolist() == t.to(getattr(torch, other)).tolist(), other
        back = t.to(getattr(torch, other))
        assert jt.tensor(back.tolist(), dtype=getattr(jt, other)).to(x.dtype).tolist() == \
            back.to(t.dtype).tolist(), other


def test_promote_types_of_a_non_dtype_is_a_type_error():
    # a refused pair is a missing table entry; a non-dtype argument must not be reported as one
    with pytest.raises(TypeError, match="argument 'type2' must be jitorch.dtype, not type"):
        jt.promote_types(jt.float32, float)

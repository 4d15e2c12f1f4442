"""Type promotion: promote_types over every dtype pair, result_type with scalars and 0-d tensors,
and the default dtype's effect on Python floats and creation."""

import pytest

import jitorch as jt

# torch.promote_types(row, column), generated once with torch 2.13.
_SHORT = {"b": jt.bool, "u8": jt.uint8, "i8": jt.int8, "i16": jt.int16, "i32": jt.int32, "i64": jt.int64,
          "f16": jt.float16, "bf16": jt.bfloat16, "f32": jt.float32, "f64": jt.float64}
_TABLE = """
          b    u8    i8   i16   i32   i64   f16  bf16   f32   f64
    b     b    u8    i8   i16   i32   i64   f16  bf16   f32   f64
   u8    u8    u8   i16   i16   i32   i64   f16  bf16   f32   f64
   i8    i8   i16    i8   i16   i32   i64   f16  bf16   f32   f64
  i16   i16   i16   i16   i16   i32   i64   f16  bf16   f32   f64
  i32   i32   i32   i32   i32   i32   i64   f16  bf16   f32   f64
  i64   i64   i64   i64   i64   i64   i64   f16  bf16   f32   f64
  f16   f16   f16   f16   f16   f16   f16   f16   f32   f32   f64
 bf16  bf16  bf16  bf16  bf16  bf16  bf16   f32  bf16   f32   f64
  f32   f32   f32   f32   f32   f32   f32   f32   f32   f32   f64
  f64   f64   f64   f64   f64   f64   f64   f64   f64   f64   f64
"""


def _pairs():
    header, *rows = [line.split() for line in _TABLE.strip().splitlines()]
    for row in rows:
        for column, result in zip(header, row[1:]):
            yield _SHORT[row[0]], _SHORT[column], _SHORT[result]


@pytest.mark.parametrize("a, b, expected", list(_pairs()), ids=lambda d: getattr(d, "name", None))
def test_promote_types_matches_torch(a, b, expected):
    assert jt.promote_types(a, b) is expected


def _t(dtype, dims=1):
    return jt.zeros((1,) * dims, dtype=dtype)


@pytest.mark.parametrize("first, second, expected", [
    (_t(jt.int32), 2.5, jt.float32),                  # a float scalar lifts the category
    (_t(jt.uint8), 300, jt.uint8),                    # an int scalar does not widen an int tensor
    (_t(jt.uint8), -1, jt.uint8),
    (_t(jt.int64), _t(jt.float64, 0), jt.float64),    # 0-d tensor of a higher category counts
    (_t(jt.int8), _t(jt.int64, 0), jt.int8),          # ...of the same category it does not
    (_t(jt.float16), _t(jt.float64, 0), jt.float16),
    (_t(jt.uint8), _t(jt.int8, 0), jt.uint8),
    (_t(jt.uint8, 0), _t(jt.int8, 0), jt.int16),      # two 0-d tensors promote as tensors
    (_t(jt.bfloat16, 0), _t(jt.float16, 0), jt.float32),
    (_t(jt.bool), True, jt.bool),
    (_t(jt.bool), 1, jt.int64),
    (_t(jt.bool, 0), 1.5, jt.float32),
    (_t(jt.bfloat16), 1.5, jt.bfloat16),
    (2, 2.5, jt.float32),
])
def test_result_type_weighs_dims_zero_dim_and_scalars(first, second, expected):
    assert jt.result_type(first, second) is expected


def test_scalar_operands_follow_result_type():
    assert (jt.tensor([1, 2], dtype=jt.int32) + 2.5).dtype is jt.float32
    assert (jt.tensor([250], dtype=jt.uint8) + 300).tolist() == [38]  # 300 wraps to 44 as a uint8
    assert (jt.tensor([1]) + jt.tensor(1.0, dtype=jt.float64)).dtype is jt.float64
    assert (jt.tensor([True]) + True).dtype is jt.bool


@pytest.fixture
def default_dtype():
    before = jt.get_default_dtype()
    yield
    jt.set_default_dtype(before)


@pytest.mark.usefixtures("default_dtype")
@pytest.mark.parametrize("dtype", [jt.float64, jt.float16, jt.bfloat16])
def test_default_dtype_types_float_scalars_and_creation(dtype):
    jt.set_default_dtype(dtype)
    assert jt.get_default_dtype() is dtype
    ints = jt.tensor([1, 2])
    assert jt.result_type(ints, 2.5) is dtype
    assert (ints * 1.5).dtype is dtype
    assert (ints / 2).dtype is dtype
    assert jt.exp(ints).dtype is dtype
    assert jt.tensor([1.0]).dtype is dtype and jt.tensor(1.5).dtype is dtype
    assert jt.zeros(2).dtype is dtype
    assert (jt.tensor([1.0], dtype=jt.float32) + 2.5).dtype is jt.float32  # a float tensor keeps its dtype


@pytest.mark.usefixtures("default_dtype")
@pytest.mark.parametrize("bad", [jt.int32, jt.bool])
def test_default_dtype_must_be_floating(bad):
    with pytest.raises(TypeError, match="only floating-point types are supported as the default type"):
        jt.set_default_dtype(bad)
    assert jt.get_default_dtype() is jt.float32

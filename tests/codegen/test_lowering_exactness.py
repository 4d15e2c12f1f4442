"""Exactness of the division, hypot, shift, fill and logical-reduction lowerings: cases where a fused kernel
once gave something other than eager's (NumPy's) result. Each test states the case it pins down."""

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.codegen.test_kernels import assert_identical, fused_result, kernel_ops


def wide_float64_pairs(rng, n=4000):
    """|x|, |y| of similar size (where hypot's two glibc kernels round differently), over the whole
    exponent range, and tiny or huge ones (glibc's scaled branches and negligible-term tests)."""
    a = rng.standard_normal(n) * 10
    close = a * (1 + rng.standard_normal(n) * 1e-3)
    wide = rng.standard_normal((2, n)) * 2.0 ** rng.integers(-1074, 1023, (2, n))
    tiny = rng.standard_normal((2, n)) * 2.0 ** rng.integers(-1074, -480, (2, n))
    huge = rng.standard_normal((2, n)) * 2.0 ** rng.integers(480, 1023, (2, n))
    x = np.concatenate([a, wide[0], tiny[0], huge[0], tiny[0]])
    y = np.concatenate([close, wide[1], tiny[1], huge[1], huge[1]])
    return jt.tensor(x), jt.tensor(y)


def test_float64_hypot_is_bit_exact(rng):
    # The kernel used glibc's FMA variant while NumPy's hypot (x86-64 glibc) runs the variant without
    # FMA: about one pair in eight of similar size was one ulp off.
    x, y = wide_float64_pairs(rng)
    # and a tiny pair that glibc does not take as negligible (|y| * 2**54 > |x|) though |x| * 2**-54
    # rounds (subnormal) up to |y|: ax + ay was one ulp above
    x, y = jt.cat([x, jt.tensor([float.fromhex("0x1.03382f1f69d31p-1021")])]), jt.cat([y, jt.tensor([5e-324])])
    expected = jt.hypot(x, y)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(expected.numpy(), np.hypot(x.numpy(), y.numpy()))
    assert_identical(fused_result(lambda p, q: jt.hypot(p, q) * 1, x, y, ops=["hypot"]), expected)


def test_float64_hypot_is_bit_exact_on_cuda(rng):
    x, y = wide_float64_pairs(rng, n=300)
    with jt.cuda.emulated():
        got = jt.compile(lambda p, q: jt.hypot(p, q))(x.cuda(), y.cuda()).cpu()
    assert_identical(got, jt.hypot(x, y))



@pytest.mark.parametrize("name", ["nansum", "sum"])
def test_float_sums_into_an_integer_dtype_fuse_and_convert_as_torch(name):
    # each element is converted to int16 before it is summed: NaN, inf and 3e38 converted by LLVM's
    # fptosi are poison (the vectorised loop and its scalar tail gave different garbage), so such sums
    # stayed eager's; the emitter now converts them by the cast table, as eager does
    row = np.array([0.0, -0.0, 1, -1, 2.5, -2.5, 7, -7, np.inf, -np.inf, np.nan, 1e-40, 3e38, 65504, 1e-7, 0.1])
    x = jt.tensor(np.resize(row, (5, 12)))

    def fn(t):
        return getattr(jt, name)(t, 1, dtype=jt.int16)
    assert_identical(fused_result(fn, x, ops=[name]), fn(x))
    expected = getattr(torch, name)(torch.from_numpy(x.numpy()), 1, dtype=torch.int16)
    np.testing.assert_array_equal(fn(x).numpy(), expected.numpy())
    # count_nonzero of floats counts truth values, no conversion: it still fuses
    assert_identical(fused_result(lambda t: jt.count_nonzero(t, 1), x, ops=["count_nonzero"]), jt.count_nonzero(x, 1))


SPECIAL_FLOATS = [np.nan, np.inf, -np.inf, 1e10, -1e10, 3.7, -3.7, 40000.0, 70000.5, -70000.5, 3e9, -3e9,
                  2147483520.0, -2147483648.0, 300.0, -300.0, -0.0]


@pytest.mark.parametrize("source", [jt.float16, jt.float32, jt.float64], ids=str)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_float_to_integer_casts_give_eagers_values_for_nan_and_out_of_range(source, device):
    """LLVM leaves these conversions undefined (its vectorised and scalar code once disagreed within one
    tensor); kernels now convert by the cast table (torch's results on x86), on the CPU and on CUDA."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = jt.tensor(np.tile(np.array(SPECIAL_FLOATS).astype(source.np), 20))
        for dtype in (jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.uint16, jt.uint32, jt.uint64):
            eager = x.to(dtype).numpy()
            if device == "cpu":
                compiled = jt.compile(lambda t: (t * 1).to(dtype))(x).numpy()
            else:
                with jt.cuda.emulated():
                    compiled = jt.compile(lambda t: (t * 1).to(dtype))(x.cuda()).cpu().numpy()
            np.testing.assert_array_equal(compiled, eager, err_msg=f"{source} -> {dtype}")


def test_fills_by_a_float_tensor_into_integers_fuse_and_convert_as_torch():
    # fills converting a float 0-d tensor into an integer tensor stayed eager's while LLVM's conversion
    # of NaN and out-of-range values was undefined
    x = jt.zeros(40, dtype=jt.uint8)
    for value in (300.7, -1.5, float("nan"), 1e10):
        v = jt.tensor(value)

        def fn(t, v):
            return t.fill_(v) + 1
        expected = fn(x.clone(), v)
        assert_identical(fused_result(fn, x.clone(), v, ops=["fill.Tensor"]), expected)
        assert expected[0].item() == (torch.tensor(value).to(torch.uint8) + 1).item()


def test_a_masked_fill_by_a_tensor_the_dtype_cannot_hold_raises_compiled_as_eager_and_torch():
    """torch's masked_fill reads a 0-d value with ``item()`` and refuses one the dtype cannot hold (its fill_
    converts); eager jitorch raises so, and a kernel cannot raise: such a masked_fill stays an eager step (the
    lowering's rule `_fill_tensor_always_fits`); one whose value dtype always fits stays in the kernel."""
    x = jt.zeros(40, dtype=jt.uint8)
    mask = jt.arange(40) % 3 == 0
    def filled(t, v):
        return t.masked_fill(mask, v) + 1
    fn = jt.compile(filled)
    t_mask = torch.from_numpy(mask.numpy())
    two = torch.zeros(40, dtype=torch.uint8).masked_fill(t_mask, torch.tensor(2.0)) + 1  # (fits: the eager step's)
    assert fn(x, jt.tensor(2.0)).tolist() == two.tolist()
    assert "masked_fill.Tensor" not in kernel_ops(filled, x, jt.tensor(2.0))
    for value in (300.7, -1.5, 1e10):
        with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
            torch.zeros(40, dtype=torch.uint8).masked_fill(t_mask, torch.tensor(value))
        with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
            fn(x, jt.tensor(value))
        assert "masked_fill.Tensor" not in kernel_ops(filled, x, jt.tensor(value))
    for v in (jt.tensor(7, dtype=jt.uint8), jt.tensor(True)):
        assert "masked_fill.Tensor" in kernel_ops(filled, x, v)
        assert fn(x, v).tolist() == x.masked_fill(mask, v).add(1).tolist()

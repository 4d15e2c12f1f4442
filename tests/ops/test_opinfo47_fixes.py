"""Regression tests of the defects the OpInfo sweep (tests/ops/opinfo_sweep.py) found, each against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt


def test_cholesky_of_an_empty_matrix_keeps_the_autograd_graph():
    """OpInfo cholesky, float64 sample #2 (a 0x0 matrix, upper=True, requires_grad): torch's result requires
    grad (its empty gradient flows back); jitorch's was a fresh tensor outside the graph."""
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3)]:
        a = jt.zeros(shape, dtype=jt.float64, requires_grad=True)
        r = jt.cholesky(a, upper=True)
        assert r.requires_grad and tuple(r.shape) == shape
        (g,) = jt.autograd.grad(r.sum(), a)
        assert tuple(g.shape) == shape


@pytest.mark.parametrize("value", [True, 3, 2.5])
def test_sum_to_size_of_the_empty_size_is_the_sum(value):
    """OpInfo sum_to_size, bool sample #0 (a 0-d tensor, size ()): torch's sum_to gives ``x.sum()`` for an
    empty size (int64 for bool and ints, a new tensor); jitorch returned the bool input itself."""
    ours, theirs = jt.tensor(value), torch.tensor(value)
    got, want = ours.sum_to_size(()), theirs.sum_to_size(())
    assert got.dtype.name == str(want.dtype)[6:] and got.item() == want.item()
    assert got is not ours


@pytest.mark.parametrize("conv, dims", [("conv1d", 1), ("conv2d", 2), ("conv3d", 3)])
@pytest.mark.parametrize("bias_dtype", ["float64", "int64", "float16"])
def test_convolution_refuses_a_bias_of_another_dtype(conv, dims, bias_dtype):
    """OpInfo nn.functional.conv2d/conv1d error_inputs #0 (int64 input, float64 weight and bias): torch
    raises "Input type (...) and bias type (...) should be the same"; jitorch added a float64 bias to a
    float32 convolution and returned float64."""
    def call(lib):
        x = lib.ones((1, 1) + (3,) * dims)
        w = lib.ones((1, 1) + (2,) * dims)
        return getattr(lib.nn.functional, conv)(x, w, lib.ones(1, dtype=getattr(lib, bias_dtype)))
    with pytest.raises(RuntimeError) as theirs:
        call(torch)
    with pytest.raises(RuntimeError) as ours:
        call(jt)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("bias_dtype", ["float64", "int64"])
def test_transposed_convolution_adds_a_bias_of_another_dtype_in_the_result_dtype(bias_dtype):
    """Found next to the conv2d case: torch's transposed convolution takes a bias of another dtype and
    returns the input's dtype; jitorch's promoted the result to float64."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 3, 3)).astype(np.float32), rng.standard_normal((2, 2, 2, 2)).astype(np.float32)
    b = np.array([3, -2], dtype=bias_dtype)
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b))
    got = jt.nn.functional.conv_transpose2d(jt.tensor(x), jt.tensor(w), jt.tensor(b))
    assert got.dtype is jt.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("pool", ["adaptive_avg_pool2d", "adaptive_max_pool2d", "adaptive_avg_pool3d",
                                  "adaptive_max_pool3d"])
def test_adaptive_pooling_raises_value_error_for_an_output_size_as_long_as_the_input(pool):
    """OpInfo nn.functional.adaptive_avg_pool2d error_inputs #0 (a 2x2 input, output_size (2, 2)): torch's
    functional raises ValueError("Input dimension should be at least 3") before the op; jitorch raised
    RuntimeError. An int output_size reaches the op's own RuntimeError in both."""
    nd = int(pool[-2])
    for lib in (torch, jt):
        fn = getattr(lib.nn.functional, pool)
        with pytest.raises(ValueError, match=f"Input dimension should be at least {nd + 1}"):
            fn(lib.ones((2,) * nd), (2,) * nd)
        with pytest.raises(RuntimeError):
            fn(lib.ones((2,) * nd), 2)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "true_divide", "floor_divide", "multiply",
                                  "subtract", "divide"])
def test_arithmetic_of_two_python_numbers_is_a_0d_tensor(name):
    """OpInfo add reference sample #47 (float32: ``add(-8.48, -1.77)``), and mul's, sub's and div's alike:
    torch's argument parser takes two numbers for these ops (a 0-d tensor of the numbers' dtype); jitorch
    raised TypeError("expected at least one Tensor argument"). Mixed kinds, bools (``sub`` of a bool refused)
    and integer division by zero as torch."""
    for a, b in [(3.0, 2.0), (3, 2), (True, True), (True, 2), (3, 2.5), (0.1, 0.2), (2 ** 40 + 1, 0.5), (-7, 2),
                 (True, 2.5), (3, 0)]:
        results = []
        for lib in (torch, jt):
            try:
                r = getattr(lib, name)(a, b)
                results.append((str(r.dtype).rsplit(".", 1)[-1], r.shape == (), r.item()))
            except Exception as exc:  # the same refusal in both
                results.append(type(exc).__name__)
        assert results[0] == results[1], (a, b)


def test_arithmetic_of_two_python_numbers_into_out_and_compiled():
    out = jt.empty(())
    jt.add(1.5, 2, alpha=3, out=out)
    assert out.item() == torch.add(1.5, 2, alpha=3).item()
    f = jt.compile(lambda x: x * jt.mul(2, 3))
    assert f(jt.ones(2)).tolist() == [6.0, 6.0]


@pytest.mark.parametrize("make", [lambda L: L.ones(3, 4).t(), lambda L: L.ones(3, 8)[:, ::2],
                                  lambda L: L.ones(2, 3, 4).permute(2, 0, 1)])
def test_frexp_results_take_the_input_memory_order(make):
    """OpInfo frexp reference sample #3 (float32, transposed): torch's mantissa and exponent follow the
    input's memory order (TensorIterator's, as every pointwise result: docs/differences-from-torch.md,
    Layouts); jitorch's were contiguous. Compiled calls give eager's strides."""
    want = torch.frexp(make(torch))
    got = jt.frexp(make(jt))
    compiled = jt.compile(jt.frexp)(make(jt))
    for w, g, c in zip(want, got, compiled):
        assert g.stride() == w.stride() == c.stride()
        assert g.tolist() == w.tolist()


@pytest.mark.parametrize("call", [lambda L, b: L.pow(2, b), lambda L, b: L.pow(2.5, b), lambda L, b: 2 ** b,
                                  lambda L, b: L.float_power(2, b), lambda L, b: L.pow(b, 2)])
@pytest.mark.parametrize("make", [lambda L: L.ones(5, 10).t(), lambda L: L.ones(3, 1, 4).permute(2, 1, 0),
                                  lambda L: L.arange(6, dtype=L.int64).reshape(2, 3).t()])
def test_pow_of_a_number_base_is_contiguous_as_torchs(call, make):
    """Found through OpInfo ldexp sample #6 (float32, transposed exponent): torch's ``pow(Scalar, Tensor)``
    writes a contiguous result, not the exponent's memory order; jitorch's (eager and compiled) followed the
    exponent. A tensor base keeps TensorIterator's order in both."""
    want = call(torch, make(torch))
    got = call(jt, make(jt))
    compiled = jt.compile(lambda b: call(jt, b))(make(jt))
    assert got.stride() == want.stride() == compiled.stride()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1.3e-6)


def test_batch_norm_of_a_vector_follows_torch():
    """OpInfo nn.functional.batch_norm samples #3 and #4 (float32: an empty 1-d input, empty statistics,
    training): torch returns an empty tensor; jitorch raised ValueError("Expected 2D or higher input"). The
    other 0-d and 1-d calls raise torch's exception types."""
    def cases(L):
        return [((L.ones(3), None, None), True), ((L.ones(0), L.ones(0), L.ones(0)), False),
                ((L.ones(0), None, None), True), ((L.ones(3), L.ones(0), L.ones(0)), False),
                ((L.ones(1), None, None), True), ((L.ones(3), L.ones(3), L.ones(3)), True),
                ((L.tensor(1.0), None, None), True), ((L.tensor(1.0), None, None), False),
                ((L.ones(3), None, None), False), ((L.ones(0), None, None), False)]
    for (theirs, training), (ours, _) in zip(cases(torch), cases(jt)):
        outcome = []
        for lib, args in ((torch, theirs), (jt, ours)):
            try:
                outcome.append(tuple(lib.nn.functional.batch_norm(*args, training=training).shape))
            except Exception as exc:
                outcome.append(type(exc).__name__)
        assert outcome[0] == outcome[1]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_of_a_half_type_computes_in_float32(dtype):
    """OpInfo nn.functional.rms_norm float16 sample #0 (values up to ~700, eps=0.5): jitorch squared in
    float16, whose squares overflowed to inf, and returned zeros; torch computes in float32 and rounds once.
    Small values check the default eps (float32's for half types, as torch's)."""
    for values in ([[300.0, -200.0, 1.0], [5.0, 400.0, 0.5]], [[1e-3, -2e-3, 1e-3]]):
        want = torch.nn.functional.rms_norm(torch.tensor(values, dtype=getattr(torch, dtype)), (3,),
                                            torch.tensor([1.5, 2.0, 0.5], dtype=getattr(torch, dtype)))
        got = jt.nn.functional.rms_norm(jt.tensor(values, dtype=getattr(jt, dtype)), (3,),
                                        jt.tensor([1.5, 2.0, 0.5], dtype=getattr(jt, dtype)))
        assert got.dtype.name == dtype and got.tolist() == want.tolist()


def test_margin_ranking_loss_of_integer_inputs_is_float():
    """OpInfo nn.functional.margin_ranking_loss int64 reference sample #24: torch's margin is a float, so
    integer inputs give a float32 loss; jitorch's default margin 0 kept int64."""
    args = ([1, 2, 7], [2, 1, 3], [1, -1, 1])
    for margin in ({}, {"margin": 1}):
        want = torch.nn.functional.margin_ranking_loss(*map(torch.tensor, args), reduction="sum", **margin)
        got = jt.nn.functional.margin_ranking_loss(*map(jt.tensor, args), reduction="sum", **margin)
        assert got.dtype is jt.float32 and want.dtype is torch.float32 and got.item() == want.item()


def test_rms_norm_refuses_an_empty_normalized_shape():
    """OpInfo nn.functional.rms_norm error_inputs #0 (normalized_shape ()): torch raises RuntimeError;
    jitorch normalised over no dims."""
    for lib in (torch, jt):
        with pytest.raises(RuntimeError, match="Expected normalized_shape to be at least 1-dimensional"):
            lib.nn.functional.rms_norm(lib.ones(3), ())


def test_xlogy_gradient_for_other_keeps_the_sign_of_a_negative_zero():
    """OpInfo xlogy float64 reference sample #15, element 33 (self -0.001, other -0.0): torch's gradient
    for other, ``g * self / other``, is +inf; jitorch's divided by ``other + 0``, which is +0.0, and gave -inf."""
    values = ([-0.001, 0.5, 2.0], [-0.0, 0.0, -0.0])
    theirs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    ours = [jt.tensor(v, dtype=jt.float64, requires_grad=True) for v in values]
    want = torch.autograd.grad(torch.xlogy(*theirs).sum(), theirs)
    got = jt.autograd.grad(jt.xlogy(*ours).sum(), ours)
    for w, g in zip(want, got):
        assert g.tolist() == w.tolist()

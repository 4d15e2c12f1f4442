"""``out=`` forms that differed from torch's, found by the fuzzer's namespaced ops (``--namespaced``) and a sweep of
every fuzzed op's ``out=`` form with an input or an out tensor that requires grad (session 44)."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.fuzz.generator import generate, op_table
from tests.fuzz.oracle import CPU_MODES, check


def _outs(T):
    return {"same": T.zeros(2, dtype=T.float64), "float32": T.zeros(2, dtype=T.float32),
            "resized": T.zeros(3, dtype=T.float64), "stepped": T.zeros(4, dtype=T.float64)[::2]}


@pytest.mark.parametrize("kind", ["same", "float32", "resized", "stepped"])
def test_special_ndtr_out_of_an_input_that_requires_grad_is_differentiable_seed_8620152(kind):
    """Seed 8620152 (``--namespaced``): ``T.special.ndtr(x1, out=v1)`` of an ``x1`` that requires grad raised
    "functions with out=... arguments don't support automatic differentiation"; torch's out= form of ndtr is a
    composite that copy_-s the result into out, so out takes copy_'s history and the gradient flows to ``x``:
    the normal density, as torch's."""
    got = {}
    for T in (torch, jt):
        x = T.tensor([0.5, -1.0], dtype=T.float64, requires_grad=True)
        out = _outs(T)[kind]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = T.special.ndtr(x, out=out)
        assert result is out and out.requires_grad
        (out * T.tensor([1.0, 3.0], dtype=T.float64)).sum().backward()
        got[T] = (out.detach().double().numpy(), x.grad.numpy())
    density = np.exp(-np.array([0.5, -1.0]) ** 2 / 2) / np.sqrt(2 * np.pi) * [1.0, 3.0]
    np.testing.assert_allclose(got[jt][1], density, rtol=1e-12)
    np.testing.assert_allclose(got[jt][1], got[torch][1], rtol=1e-12)
    np.testing.assert_array_equal(got[jt][0], got[torch][0])


def test_special_ndtr_into_an_out_that_requires_grad_is_refused_by_copy_as_torchs():
    for T in (torch, jt):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
            T.special.ndtr(T.tensor([0.5]), out=T.zeros(1, requires_grad=True))


def test_special_ndtr_out_compiled_keeps_the_gradient_seed_8620152():
    fn = jt.compile(lambda x, o: jt.special.ndtr(x, out=o) * 2)
    x = jt.tensor([0.5, -1.0], dtype=jt.float64, requires_grad=True)
    o = jt.zeros(2, dtype=jt.float64)
    fn(x, o).sum().backward()
    tx = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    (torch.special.ndtr(tx) * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(o.detach().numpy(), torch.special.ndtr(tx).detach().numpy(), rtol=1e-15)


def test_fuzz_seed_8620152_runs_alike_with_the_namespaced_ops():
    program, _ = generate(8620152, table=op_table(True))
    assert any(s.tag == "special_ndtr(out)" for s in program.body) and program.grad
    assert not check(program, CPU_MODES).mismatches


@pytest.mark.parametrize("name", ["isposinf", "isneginf", "signbit"])
@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
def test_isposinf_isneginf_signbit_refuse_an_out_that_is_not_bool_before_writing(name, dtype):
    """``isposinf(x, out=float_tensor)`` wrote the cast booleans where torch raises "isposinf does not support
    non-boolean outputs." (with an input that requires grad too); nothing is written."""
    for T in (torch, jt):
        out = T.full((3,), 7, dtype=getattr(T, dtype))
        for grad in (False, True):
            x = T.tensor([float("inf"), -float("inf"), -0.0], requires_grad=grad)
            with pytest.raises(RuntimeError, match=f"^{name} does not support non-boolean outputs.$"):
                getattr(T, name)(x, out=out)
        assert out.tolist() == [7, 7, 7]
        assert getattr(T, name)(x.detach(), out=T.zeros(3, dtype=T.bool)).tolist() == getattr(T, name)(
            x.detach()).tolist()


@pytest.mark.parametrize("call", ["frexp", "aminmax", "mode", "sort", "max.dim", "kthvalue"])
@pytest.mark.parametrize("grad", [False, True])
def test_a_single_out_tensor_for_several_results_is_a_type_error_before_the_autograd_guard(call, grad):
    """``frexp(x, out=t)`` (and the other ops of several results) with an ``x`` that requires grad raised the out=
    autograd guard's RuntimeError, where torch's argument parser raises TypeError first (the sweep of session 44);
    without grad jitorch's TypeError came from the write, after the op ran."""
    for T in (torch, jt):
        x = T.tensor([1.0, 2.0, 2.0], requires_grad=grad)
        args = {"max.dim": (0,), "kthvalue": (1,)}.get(call, ())
        with pytest.raises(TypeError) as e:
            getattr(T, call.split(".")[0])(x, *args, out=T.zeros(3))
        if call in ("frexp", "aminmax", "mode"):
            assert str(e.value) == f"{call}(): argument 'out' must be tuple of Tensors, not Tensor"


_SELF_OUT = {
    "scatter": lambda T, v, x: T.scatter(v, 0, T.tensor([2, 0]), x, out=v),
    "scatter.value": lambda T, v, x: T.scatter(v, 0, T.tensor([2, 0]), -0.75, out=v),
    "scatter_add": lambda T, v, x: T.scatter_add(v, 0, T.tensor([2, 2]), x, out=v),
    "scatter_reduce": lambda T, v, x: T.scatter_reduce(v, 0, T.tensor([2, 0]), x, "prod", out=v),
    "index_add": lambda T, v, x: T.index_add(v, 0, T.tensor([2, 0]), x, alpha=2, out=v),
}


@pytest.mark.parametrize("name", sorted(_SELF_OUT))
def test_scatter_and_index_add_write_into_an_out_that_is_self_seed_8660185(name):
    """Seed 8660185 (``--out-views 0.5 --namespaced``): ``T.scatter(v1, 0, index, -0.75, out=v1)`` raised the
    memory-overlap error where torch writes in place (its kernels copy self into out unless they are the same
    tensor); a partial overlap of self and out, or out as the source, is still refused, as torch's. Eager and
    compiled, against torch."""
    def run(T, fn):
        v, x = T.tensor([1.0, 2.0, 3.0]), T.tensor([5.0, 7.0])
        r = fn(v, x)
        return r.tolist(), v.tolist()
    want = run(torch, lambda v, x: _SELF_OUT[name](torch, v, x))
    assert want[0] == want[1] != [1.0, 2.0, 3.0]
    assert run(jt, lambda v, x: _SELF_OUT[name](jt, v, x)) == want
    assert run(jt, jt.compile(lambda v, x: _SELF_OUT[name](jt, v, x) * 1)) == (want[0], want[1])
    for T in (torch, jt):
        v = T.tensor([1.0, 2.0, 3.0])
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
            T.scatter(v[:2], 0, T.tensor([0]), T.tensor([5.0]), out=v[1:])
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
            T.scatter_add(T.zeros(3), 0, T.tensor([0]), v, out=v)


def test_fuzz_seed_8660185_runs_alike():
    program, _ = generate(8660185, table=op_table(True), out_views=0.5)
    assert any("out=v1" in line for s in program.body for line in s.lines if "T.scatter(" in line)
    assert not check(program, CPU_MODES).mismatches


@pytest.mark.parametrize("exponent", ["0-d int", "tensor"])
def test_float_power_into_an_out_that_is_its_input_seed_8661034(exponent):
    """Seed 8661034 (``--out-views 0.5 --namespaced``): ``T.float_power(x1, x0, out=x1)`` raised TypeError
    "'NoneType' object is not callable": the check of an out= that is also an input called the op's meta rule,
    which a composite (float_power, special.ndtr) has not. Now as torch: written in place; a smaller out and a
    float32 one are refused with torch's errors."""
    for T in (torch, jt):
        e = T.tensor(2) if exponent == "0-d int" else T.tensor([2.0, 3.0], dtype=T.float64)
        x = T.tensor([1.5, 2.0], dtype=T.float64)
        assert T.float_power(x, e, out=x) is x
        assert x.tolist() == ([2.25, 4.0] if exponent == "0-d int" else [2.25, 8.0])
        small = T.tensor([1.5], dtype=T.float64)
        with pytest.raises(RuntimeError, match=r"output with shape \[1\] doesn't match the broadcast shape \[2\]"):
            T.float_power(small, T.tensor([2.0, 3.0], dtype=T.float64), out=small)
        narrow = T.tensor([1.5])
        with pytest.raises(RuntimeError, match="the output given to float_power has dtype Float"):
            T.float_power(narrow, T.tensor(2), out=narrow)
        y = T.tensor([0.5, -1.0])
        T.special.ndtr(y, out=y)
        np.testing.assert_allclose(y.numpy(), torch.special.ndtr(torch.tensor([0.5, -1.0])).numpy(), rtol=1e-6)

"""Ops whose public variants are their own one-frame entries (`registry.OpDef.entry`: softmax, log_softmax, cat,
concat, concatenate): a served call runs no general path and gives its bits; every call the entry does not serve
reaches the generated variant, so no entry bypasses autograd, dispatch hooks (a trace, forward AD, vmap, a
profile), autocast, ``out=``, the NumPy ``axis=`` alias, dtype and device rules or torch's errors."""

import inspect

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.autograd.forward_ad as fwAD
from jitorch.ops import registry
from tests.support import general_path

ENTRY_FUNCTIONS = ["softmax", "log_softmax", "cat", "concat", "concatenate"]


@pytest.fixture
def kernel_calls(monkeypatch):
    """The names of the ops whose general-path CPU kernel ran (softmax, log_softmax and cat's)."""
    calls = []
    for name in ("softmax", "log_softmax", "cat", "concat", "concatenate"):
        op = registry.OPS[name]
        kernel = op.kernels["cpu"]
        monkeypatch.setitem(op.kernels, "cpu", lambda *a, _k=kernel, _n=name: calls.append(_n) or _k(*a))
    return calls


class _RecordingHook:
    """A dispatch hook that passes every call on and records the names of the ops it saw."""
    passes_on = True

    def __init__(self):
        self.seen = []

    def call(self, op, args, out):
        self.seen.append(op.name)
        return NotImplemented

    def call_inplace(self, op, args):
        self.seen.append(op.name)
        return NotImplemented


def _softmax_input(shape, dtype=np.float32, seed=0):
    values = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).smallest_subnormal], dtype)
    flat = values.reshape(-1)
    flat[:min(flat.size, special.size)] = special[:flat.size]
    return values


@pytest.mark.parametrize("name", ENTRY_FUNCTIONS)
def test_an_entry_is_the_public_function_with_the_generated_variants_signature(name):
    fn = getattr(jt, name)
    assert fn._op.entry is not None and fn.__name__ == name and fn.__module__ == "jitorch"
    assert registry.FUNCTIONS[name] is fn
    general = registry._generate(fn._op, "function")
    assert inspect.signature(fn) == inspect.signature(general)
    assert fn.__doc__ == general.__doc__


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, dim", [((1, 1), -1), ((4, 1), 1), ((1, 7), -1), ((3, 5), 0), ((2, 3, 4), 1),
                                        ((1, 70000), -1)])
def test_softmax_entry_serves_float_tensors_with_the_general_paths_bits(kernel_calls, name, dtype, shape, dim):
    a = _softmax_input(shape, dtype)
    for call in (lambda x: getattr(jt, name)(x, dim), lambda x: getattr(x, name)(dim),
                 lambda x: getattr(jt.nn.functional, name)(x, dim)):
        got = call(jt.from_numpy(a))
        assert kernel_calls == []  # (served by the entry)
        with general_path():
            want = call(jt.from_numpy(a))
        assert kernel_calls == [name]
        kernel_calls.clear()
        np.testing.assert_array_equal(got.numpy().view(np.uint8), want.numpy().view(np.uint8))
        assert got.stride() == want.stride() and got.dtype is want.dtype
        expected = getattr(torch, name)(torch.from_numpy(a), dim).numpy()
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_entry_of_a_strided_view_gives_the_general_paths_result(kernel_calls, name):
    a = _softmax_input((6, 4))
    got = getattr(jt, name)(jt.from_numpy(a).t()[1:], -1)
    with general_path():
        want = getattr(jt, name)(jt.from_numpy(a).t()[1:], -1)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.stride() == want.stride() == getattr(torch, name)(torch.from_numpy(a).t()[1:], -1).stride()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.bool])
def test_softmax_entry_leaves_other_dtypes_to_the_general_path(kernel_calls, dtype):
    """Half dtypes compute in float32 (the general path's kernel), integer and bool inputs raise torch's error."""
    t = (torch.arange(6).reshape(2, 3) % 2).to(dtype)
    x = jt.from_numpy(t.numpy()) if dtype is not torch.bfloat16 else jt.tensor(t.float().numpy()).bfloat16()
    try:
        want = torch.softmax(t, -1)
    except Exception as e:  # noqa: BLE001 (torch's error is what jitorch must raise)
        with pytest.raises(type(e), match="not implemented for"):
            jt.softmax(x, -1)
        return
    got = jt.softmax(x, -1)
    assert kernel_calls == ["softmax"] and str(got.dtype) == str(want.dtype).replace("torch", "jitorch")
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=1e-2)


def test_softmax_entry_records_history_and_its_gradient_is_torchs():
    a = _softmax_input((3, 4))
    a[0, 0] = 1.0  # (finite values: gradients compared)
    a = np.where(np.isfinite(a), a, 0.5).astype(np.float32)
    x = jt.from_numpy(a.copy()).requires_grad_()
    t = torch.from_numpy(a.copy()).requires_grad_()
    for name, dim in (("softmax", -1), ("log_softmax", 0)):
        y = getattr(jt, name)(x, dim)
        assert y.grad_fn is not None
        (y * jt.arange(4.0)).sum().backward()
        (getattr(torch, name)(t, dim) * torch.arange(4.0)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
    with jt.no_grad():
        assert jt.softmax(x, -1).grad_fn is None


def test_cat_entry_records_history_through_the_general_path(kernel_calls):
    x = jt.ones(2, 3, requires_grad=True)
    y = jt.ones(2, 3)
    out = jt.cat([y, x], 0)
    assert out.grad_fn is not None and kernel_calls == ["cat"]
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 3), np.float32))


@pytest.mark.parametrize("name", ENTRY_FUNCTIONS)
def test_a_dispatch_hook_sees_every_entry_call(name):
    x, y = jt.rand(2, 3), jt.rand(2, 3)
    hook = _RecordingHook()
    registry.DISPATCH_HOOKS.append(hook)
    try:
        getattr(jt, name)(x, -1) if "softmax" in name else getattr(jt, name)([x, y], 1)
        if "softmax" in name:
            getattr(x, name)(0)
    finally:
        registry.DISPATCH_HOOKS.remove(hook)
    assert hook.seen == [name] * (2 if "softmax" in name else 1)


def test_entries_under_forward_ad_give_torchs_tangents():
    a, da = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    with fwAD.dual_level():
        x = fwAD.make_dual(jt.from_numpy(a), jt.from_numpy(da))
        got = {"softmax": fwAD.unpack_dual(jt.softmax(x, -1)).tangent,
               "log_softmax": fwAD.unpack_dual(jt.log_softmax(x, 0)).tangent,
               "cat": fwAD.unpack_dual(jt.cat([x, jt.from_numpy(b)], 1)).tangent}
    import torch.autograd.forward_ad as tfwAD
    with tfwAD.dual_level():
        t = tfwAD.make_dual(torch.from_numpy(a), torch.from_numpy(da))
        want = {"softmax": tfwAD.unpack_dual(torch.softmax(t, -1)).tangent,
                "log_softmax": tfwAD.unpack_dual(torch.log_softmax(t, 0)).tangent,
                "cat": tfwAD.unpack_dual(torch.cat([t, torch.from_numpy(b)], 1)).tangent}
    for name in got:
        assert got[name] is not None, name
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-5, atol=1e-6)


def test_entries_are_traced_under_compile():
    def f(x, y):
        return jt.cat([jt.softmax(x, -1), jt.log_softmax(y, 0)], 0)

    compiled = jt.compile(f)
    a = _softmax_input((2, 3), seed=3)
    a = np.where(np.isfinite(a), a, 1.0).astype(np.float32)
    x, y = jt.from_numpy(a), jt.from_numpy(a + 1)
    got = compiled(x, y)
    traced = {node.op.name for entry in compiled.cache.values() for node in entry.graph.nodes}
    assert {"softmax", "log_softmax", "cat"} <= traced
    np.testing.assert_array_equal(got.numpy(), f(x, y).numpy())


def test_entries_under_vmap_give_the_loops_results():
    a = np.random.default_rng(4).standard_normal((3, 2, 5)).astype(np.float32)
    got = jt.func.vmap(lambda x: jt.cat([jt.softmax(x, -1), x], 0))(jt.from_numpy(a))
    want = jt.stack([jt.cat([jt.softmax(jt.from_numpy(r), -1), jt.from_numpy(r)], 0) for r in a])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_entries_under_autocast_follow_torchs_policy(kernel_calls):
    """Autocast on, every call goes to the general path, which applies the policy (on the CPU none changes the
    calls an entry serves: cat of one dtype, softmax, whose fp32 policy is CUDA's)."""
    a = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    with jt.autocast("cpu", dtype=jt.bfloat16):
        jt.softmax(jt.from_numpy(a), -1), jt.log_softmax(jt.from_numpy(a), -1), jt.cat([jt.from_numpy(a)] * 2)
        assert kernel_calls == ["softmax", "log_softmax", "cat"]
        got = [jt.softmax(jt.from_numpy(a).bfloat16(), -1), jt.cat([jt.from_numpy(a), jt.from_numpy(a).bfloat16()])]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = [torch.softmax(torch.from_numpy(a).bfloat16(), -1),
                torch.cat([torch.from_numpy(a), torch.from_numpy(a).bfloat16()])]
    for g, w in zip(got, want):
        assert str(g.dtype) == str(w.dtype).replace("torch", "jitorch")
        np.testing.assert_allclose(g.float().numpy(), w.float().numpy(), rtol=1e-2)


def test_entries_write_out_and_take_numpys_axis():
    a = np.random.default_rng(6).standard_normal((2, 3)).astype(np.float32)
    x = jt.from_numpy(a)
    out = jt.empty(2, 3)
    version = out._version
    assert jt.softmax(x, -1, out=out) is out and out._version > version
    np.testing.assert_array_equal(out.numpy(), jt.softmax(x, -1).numpy())
    np.testing.assert_array_equal(jt.softmax(x, axis=0).numpy(), jt.softmax(x, 0).numpy())
    joined = jt.empty(4, 3)
    assert jt.cat([x, x], out=joined) is joined
    np.testing.assert_array_equal(joined.numpy(), np.concatenate([a, a]))
    np.testing.assert_array_equal(jt.cat([x, x], axis=1).numpy(), np.concatenate([a, a], 1))
    with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
        jt.softmax(x, 0, axis=1)
    with pytest.raises(TypeError, match="out"):
        x.softmax(-1, out=out)  # (the method takes no out=, as torch's)


def test_entries_raise_torchs_errors_before_writing_out():
    x, y = jt.ones(2, 3), jt.ones(2, 4)
    out = jt.full((4, 3), 7.0)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        jt.cat([x, y], 0, out=out)
    with pytest.raises(IndexError, match="Dimension out of range"):
        jt.softmax(x, 2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        jt.cat([x, x], 2)
    bad = jt.zeros(2, 3, dtype=jt.int64)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float, but got long int instead"):
        jt.softmax(x, -1, out=bad)  # (torch's words: softmax's out must have the result's dtype)
    assert (out.numpy() == 7).all() and (bad.numpy() == 0).all()
    with pytest.raises(TypeError):
        jt.cat(x, y)


def test_cat_entry_keeps_versions_and_promotes_through_the_general_path(kernel_calls):
    x, y = jt.ones(2, 2), jt.ones(2, 2, dtype=jt.float64)
    versions = (x._version, y._version)
    r = jt.cat([x, x[:, :1].expand(2, 2)], 1)
    assert kernel_calls == [] and r.is_contiguous() and r._version == 0 and (x._version, y._version) == versions
    assert jt.cat([x, y]).dtype is jt.float64 and kernel_calls == ["cat"]


def test_fresh_results_and_views_are_made_by_calling_the_tensor_class():
    """`Tensor._fresh` and `Tensor._view_of` call ``Tensor()`` (cheaper than ``object.__new__``): the class takes no
    arguments and runs no ``__init__`` of its own, and the results are plain tensors."""
    assert jt.Tensor.__init__ is object.__init__ and jt.Tensor.__new__ is object.__new__
    r = jt.softmax(jt.ones(2), 0)
    v = r.view(2, 1)
    assert type(r) is jt.Tensor and type(v) is jt.Tensor and v._base is r and r.tolist() == [0.5, 0.5]

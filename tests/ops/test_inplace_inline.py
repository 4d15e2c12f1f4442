"""The commonest in-place call written into the in-place variant (`pointwise_base`'s ``inline``, `registry._generate`):
``x.op_(y)`` (and ``x.add_(y, alpha=a)`` with a remembered alpha) on two C-contiguous CPU tensors of one dtype and
shape in different storages, neither requiring grad. It gives the general path's bits and version, and every
other call (a dispatch hook, the profiler, forward AD, vmap, a trace, grad, views, overlap, broadcasting, other
dtypes) reaches `write_into` or `registry.call_inplace` as before."""

import re

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.autograd.forward_ad as fwAD
from jitorch.ops import registry
from tests.support import general_path

INLINED = ["add", "sub", "mul", "true_divide", "hypot", "atan2", "copysign", "nextafter", "bitwise_and", "gcd"]


@pytest.fixture
def flat_calls(monkeypatch):
    """The in-place variants' calls of `write_into` (``_flat_into``) and of `registry.call_inplace`, by op name."""
    calls = []
    for name in INLINED:
        variant = registry._materialize(getattr(jt.Tensor, name + "_"))
        env = variant.__globals__
        for key in ("_flat_into", "_call_inplace"):
            monkeypatch.setitem(env, key, lambda *a, _f=env[key], _n=name, _k=key: calls.append((_n, _k)) or _f(*a))
    return calls


def _special(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        values = rng.standard_normal(shape).astype(dtype) * 3
        special = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, np.finfo(dtype).smallest_subnormal,
                            np.finfo(dtype).max], dtype)
        flat = values.reshape(-1)
        flat[:min(flat.size, special.size)] = rng.permutation(special)[:flat.size]
        return values
    if dtype is np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-20 if np.dtype(dtype).kind == "i" else 0, 20, shape).astype(dtype)


def _bits(t):
    a = t.numpy()
    return a.view(np.uint8).tolist() if a.dtype != bool else a.tolist()


@pytest.mark.parametrize("name", INLINED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
@pytest.mark.parametrize("shape", [(1, 1), (1,), (3, 4), (2, 3, 5)])
def test_inlined_call_gives_the_general_paths_bits_errors_and_version(flat_calls, name, dtype, shape):
    a, b = _special(dtype, shape, 1), _special(dtype, shape, 2)
    with general_path():
        try:
            want = getattr(jt.from_numpy(a.copy()), name + "_")(jt.from_numpy(b.copy()))
        except (RuntimeError, TypeError, NotImplementedError) as e:
            want = e
    flat_calls.clear()
    x, y = jt.from_numpy(a.copy()), jt.from_numpy(b.copy())
    if isinstance(want, Exception):
        with pytest.raises(type(want), match=re.escape(str(want))):
            getattr(x, name + "_")(y)
        assert x._version == 0 and x.numpy().tobytes() == a.tobytes()
        return
    assert getattr(x, name + "_")(y) is x
    assert _bits(x) == _bits(want) and x._version == 1 and y._version == 0
    assert flat_calls == []  # (served by the variant's inlined lines)
    try:
        expected = getattr(torch.from_numpy(a.copy()), name + "_")(torch.from_numpy(b.copy()))
    except RuntimeError:
        return
    np.testing.assert_allclose(x.numpy().astype(np.float64), expected.numpy().astype(np.float64), rtol=1e-6,
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("alpha", [2, -0.01, 0.5, -0.0, float("nan"), True, 2.5])
def test_inlined_alpha_gives_the_general_paths_bits_and_errors(flat_calls, dtype, alpha):
    """A remembered alpha is served inline, another (the first call of a value, zeros, bools, a float for an
    integer dtype) goes to `write_into`, which checks and remembers it: each call the general path's bits or
    error."""
    a, b = _special(dtype, (2, 3), 3), _special(dtype, (2, 3), 4)
    for name in ("add", "sub"):
        registry.OPS[name].flat_into.factors.clear()
        for _ in range(2):  # (the second call of a remembered alpha runs inline)
            with general_path():
                try:
                    want = getattr(jt.from_numpy(a.copy()), name + "_")(jt.from_numpy(b.copy()), alpha=alpha)
                except RuntimeError as e:
                    want = e
            flat_calls[:] = [c for c in flat_calls if c[1] != "_call_inplace"]  # (the general path's)
            x = jt.from_numpy(a.copy())
            if isinstance(want, RuntimeError):
                with pytest.raises(RuntimeError, match=re.escape(str(want))):
                    getattr(x, name + "_")(jt.from_numpy(b.copy()), alpha=alpha)
                assert x._version == 0 and x.numpy().tobytes() == a.tobytes()
                continue
            getattr(x, name + "_")(jt.from_numpy(b.copy()), alpha=alpha)
            assert _bits(x) == _bits(want) and x._version == 1
    # (a NaN is remembered as the object it is: this one is passed twice)
    remembered = alpha.__class__ in (int, float) and alpha != 0 and not (
        np.dtype(dtype).kind != "f" and isinstance(alpha, float))
    assert flat_calls.count(("add", "_flat_into")) == (1 if remembered else 2)


def test_calls_the_inlined_lines_do_not_serve_reach_write_into_or_call_inplace(flat_calls):
    registry.OPS["add"].flat_into.factors.clear()

    def steps(lib, x):
        x.add_(lib.ones(3))  # broadcast
        x.add_(2.0)  # a number
        x.add_(x)  # one storage
        x.t().add_(lib.ones(3, 2))  # not contiguous
        x.add_(lib.ones(2, 3, dtype=lib.float64))  # another dtype
        x[0].add_(x[1])  # views of one storage
        x.add_(lib.ones(2, 3), alpha=3)  # an alpha not yet remembered
        return x
    got = steps(jt, jt.ones(2, 3))
    assert [k for _, k in flat_calls].count("_flat_into") == 7
    np.testing.assert_array_equal(got.numpy(), steps(torch, torch.ones(2, 3)).numpy())


def test_inlined_call_leaves_grad_to_the_general_path(flat_calls):
    x, y = jt.ones(2, 2), jt.full((2, 2), 3.0, requires_grad=True)
    x.mul_(y)
    assert x.grad_fn is not None and flat_calls[-1] == ("mul", "_call_inplace")
    x.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.ones((2, 2)))
    p = jt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        p.add_(jt.ones(2))
    with jt.no_grad():
        p.add_(jt.ones(2), alpha=2)
    assert p.tolist() == [3.0, 3.0] and p._version == 1


def test_inlined_call_is_seen_by_hooks_the_profiler_forward_ad_vmap_and_traces():
    class Recording:
        passes_on = True
        seen = []

        def call(self, op, args, out):
            return NotImplemented

        def call_inplace(self, op, args):
            self.seen.append(op.name)
            return NotImplemented

    hook = Recording()
    registry.DISPATCH_HOOKS.append(hook)
    try:
        jt.ones(2).add_(jt.ones(2))
    finally:
        registry.DISPATCH_HOOKS.remove(hook)
    assert hook.seen == ["add"]

    with jt.profiler.profile() as prof:
        jt.ones(2).sub_(jt.ones(2))
    assert "aten::sub_" in prof.key_averages().table() or "sub_" in prof.key_averages().table()

    with fwAD.dual_level():
        x = fwAD.make_dual(jt.ones(3), jt.full((3,), 2.0))
        y = jt.full((3,), 5.0)
        x.mul_(y)
        assert fwAD.unpack_dual(x).tangent.tolist() == [10.0, 10.0, 10.0]

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = jt.func.vmap(lambda r: r.clone().add_(jt.ones(3)))(jt.from_numpy(a))
    np.testing.assert_array_equal(got.numpy(), a + 1)

    def f(x, y):
        z = x.clone()
        z.add_(y, alpha=2)
        return z

    compiled = jt.compile(f)
    x, y = jt.from_numpy(a), jt.from_numpy(a + 1)
    np.testing.assert_array_equal(compiled(x, y).numpy(), f(x, y).numpy())
    traced = {node.op.name for entry in compiled.cache.values() for node in entry.graph.nodes}
    assert traced & {"add", "add_"}

"""The in-place variant's first try (`pointwise_base`'s ``flat_into``): ``x.op_(y)`` on C-contiguous CPU tensors of
one dtype and shape or a Python number, no backward node, computed whole before `registry.call_inplace`'s checks. It must give the
general path's bits, errors, version and memory, and leave every other call to the general path."""

import re

import numpy as np
import pytest

import jitorch as jt
from jitorch.ops import registry
from jitorch.runtime import ufunc_parts
from tests.support import general_path, random_array

FLAT = sorted(name for name, op in registry.OPS.items()
              if op.flat_into is not None and hasattr(jt.Tensor, op.public_name + "_"))
DTYPES = [jt.bool, jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.float32, jt.float64]
SHAPES = [(), (1,), (1, 1), (2, 3), (0, 2)]


def _operands(op, dtype, shape, seed):
    """The in-place call's tensors: ``self`` and, for a binary op, the other operand (values of both signs,
    zeros and, for floats, a NaN and an infinity where there is room)."""
    rng = np.random.default_rng(seed)
    arrays = [random_array(shape, dtype, rng, low=-3, high=4) for _ in op.tensor_args]
    if dtype.is_floating_point and arrays[0].size >= 6:
        arrays[0].reshape(-1)[:2] = [np.nan, np.inf]
    # (C-contiguous: torch's and jitorch's tensor() keep NumPy's strides (0, 0) of an empty array)
    return [jt.tensor(a, dtype=dtype).clone(memory_format=jt.contiguous_format) for a in arrays]


def _bits(t):
    return t.numpy().reshape(-1).view(np.uint8).tolist()


def test_the_commonest_in_place_ops_have_the_flat_shortcut_and_their_variants_try_it_first():
    assert {"add", "sub", "mul", "true_divide", "exp", "neg", "sqrt", "bitwise_and"} <= set(FLAT)
    # (an op with a dtype argument or an in-place check of its own: the general path runs those first)
    assert all(registry.OPS[n].dtype_index is None and "inplace_check" not in registry.OPS[n].attrs for n in FLAT)
    for name in ("add", "exp"):
        variant = getattr(jt.Tensor, name + "_")
        variant(jt.ones(1), *([jt.ones(1)] if name == "add" else []))  # (generated at its first call)
        assert variant.__globals__["_flat_into"] is registry.OPS[name].flat_into
        assert "_flat_into" in variant.__code__.co_names


def _served(dtype, others):
    """Whether the shortcut takes these operands (given a general path that does not raise)."""
    return not others or isinstance(others[0], jt.Tensor) or (
        isinstance(others[0], float) and dtype.is_floating_point or type(others[0]) is int and dtype is not jt.bool)


@pytest.mark.parametrize("name", FLAT)
def test_flat_shortcut_gives_the_general_paths_bits_errors_and_version(name):
    op = registry.OPS[name]
    method = op.public_name + "_"
    defaults = tuple(a.default for a in op.schema.args[len(op.tensor_args):] if a.has_default)
    for k, dtype in enumerate(DTYPES):
        for shape in SHAPES:
            x, *tensors = _operands(op, dtype, shape, k)
            # the other operand a tensor, or a Python int or float (of both signs)
            for others in [tensors] + ([[3], [-1.5], [2.0]] if tensors else []):
                x = x.clone()
                want = x.clone()
                try:
                    with general_path():
                        getattr(want, method)(*[o.clone() if isinstance(o, jt.Tensor) else o for o in others])
                except (RuntimeError, TypeError, NotImplementedError) as e:
                    before, version = _bits(x), x._version
                    with pytest.raises(type(e), match=re.escape(str(e))):
                        getattr(x, method)(*others)
                    assert _bits(x) == before and x._version == version  # (refused before anything is written)
                    continue
                ptr, version = x.data_ptr(), x._version
                twin = x.clone()
                # (the shortcut served it, or left it to the general path)
                assert op.flat_into((twin, *others, *defaults)) is _served(dtype, others), (name, dtype, shape)
                assert getattr(x, method)(*others) is x
                assert x.data_ptr() == ptr and x._version == version + 1
                assert _bits(x) == _bits(want) == _bits(twin), (name, dtype, shape, others)


def test_flat_shortcut_leaves_other_calls_to_the_general_path():
    add = registry.OPS["add"].flat_into
    x, y = jt.tensor([[1.0, 2.0]]), jt.tensor([[3.0, 4.0]])
    leaf = jt.tensor([[1.0, 2.0]], requires_grad=True)
    refused = [
        (x, x, 1), (x, x.view(1, 2), 1), (x, x[:, :1].expand(1, 2), 1),  # memory shared with self: overlap checks
        (x, jt.tensor([3.0]), 1),  # a broadcast operand
        (x, 1e39, 1), (x, True, 1), (x, np.float32(2.0), 1), (x.int(), 2.0, 1),  # numbers `operands` refuses
        (x, y.double(), 1), (x.half(), y.half(), 1),  # another dtype, a half type
        (jt.ones(2, 2).t(), jt.ones(2, 2).t(), 1), (x, jt.ones(2, 1).t(), 1),  # another layout
        (leaf, y, 1), (x, leaf, 1),  # a tensor that requires grad
    ]
    for args in refused:
        before, version = args[0].tolist(), args[0]._version
        assert add(args) is False
        assert args[0].tolist() == before and args[0]._version == version
    assert add((x, y, 1)) is True and x.tolist() == [[4.0, 6.0]]
    assert add((x, 2, 1)) is True and x.tolist() == [[6.0, 8.0]]
    assert add((x, y, 2)) is True and x.tolist() == [[12.0, 16.0]]  # (another alpha: the op's ``into``)


ALPHAS = [2, -1, 0, 3.5, -0.25, True, False, 300, 2 ** 24 + 1, 2 ** 53 + 1, 1e39, float("nan")]


@pytest.mark.parametrize("name", ["add_", "sub_"])
@pytest.mark.parametrize("dtype", [jt.bool, jt.uint8, jt.int8, jt.int32, jt.int64, jt.float32, jt.float64])
def test_flat_shortcut_with_an_alpha_gives_the_general_paths_bits_errors_and_version(name, dtype):
    """``x.add_(y, alpha=a)`` (SGD's step) is served by the shortcut through the op's ``into`` after its alpha
    check: the general path's bits, errors (before anything is written) and version, both paths of
    `write_into` (before and after `registry.call_inplace`'s checks) alike, for a tensor or a number ``y``."""
    op = registry.OPS[name[:-1]]
    for shape in [(), (1,), (2, 3)]:
        for k, alpha in enumerate(ALPHAS):
            x, y = _operands(op, dtype, shape, k)
            for other in (y, 3, -2.5):
                got = x.clone()
                try:
                    with general_path():
                        want = x.clone()
                        getattr(want, name)(other, alpha=alpha)
                except (RuntimeError, TypeError) as e:
                    before, version = _bits(got), got._version
                    with pytest.raises(type(e), match=re.escape(str(e))):
                        getattr(got, name)(other, alpha=alpha)
                    for call in (op.flat_into, op.fast_into):  # (each raises it, or leaves it to the general path)
                        try:
                            assert call((got, other, alpha)) is False
                        except type(e) as raised:
                            assert str(raised) == str(e)
                        assert _bits(got) == before and got._version == version
                    continue
                served = op.flat_into((got.clone(), other, alpha))
                assert served is _served(dtype, [other]), (name, dtype, shape, alpha, other)
                checked = x.clone()
                assert op.fast_into((checked, other, alpha)) is served
                version = got._version
                assert getattr(got, name)(other, alpha=alpha) is got and got._version == version + 1
                assert _bits(got) == _bits(want), (name, dtype, shape, alpha, other)
                if served:
                    assert _bits(checked) == _bits(want)


def test_an_alpha_step_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        a, b = rng.standard_normal((4, 5)).astype(dtype), rng.standard_normal((4, 5)).astype(dtype)
        for alpha in (2, -0.01, 3):
            x, t = jt.tensor(a), torch.from_numpy(a.copy())
            x.add_(jt.tensor(b), alpha=alpha)
            t.add_(torch.from_numpy(b), alpha=alpha)
            # (torch fuses the multiply-add: within one rounding of jitorch's two, which are the general path's)
            np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=2 * np.finfo(dtype).eps, atol=1e-30)
    x = jt.ones(3, dtype=jt.int32)
    with pytest.raises(RuntimeError, match="For integral input tensors, argument alpha must not be a floating"):
        x.add_(jt.ones(3, dtype=jt.int32), alpha=0.5)
    assert x.tolist() == [1, 1, 1] and x._version == 0


def test_in_place_calls_the_shortcut_refuses_keep_their_errors_and_autograd():
    base = jt.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="unsupported operation: some elements of the input tensor and the "
                                           "written-to tensor refer to a single memory location"):
        base[:2].add_(base[1:])  # (both C-contiguous, of one storage)
    assert base.tolist() == [1.0, 2.0, 3.0]
    x = jt.tensor([[1.0, 2.0]])
    leaf = jt.ones(1, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        leaf.add_(x)
    with jt.no_grad():
        leaf.add_(x)
    assert leaf.tolist() == [[2.0, 3.0]] and leaf.grad_fn is None
    y = leaf * 1.0
    y.mul_(jt.full((1, 2), 3.0))
    assert y.grad_fn is not None
    y.sum().backward()
    assert leaf.grad.tolist() == [[3.0, 3.0]]
    z = jt.ones(1, 2)
    z.add_(leaf)  # (the other operand requires grad: z gets a node)
    assert z.requires_grad and z.grad_fn is not None


def test_in_place_shortcut_is_recorded_by_the_profiler_and_off_under_a_dispatch_hook():
    x, y = jt.ones(2, 2), jt.ones(2, 2)
    with jt.profiler.profile() as prof:
        x.add_(y)
        x.exp_()
    assert [(e.key, e.kind) for e in prof.events()] == [("aten::add_", "cpu_op"), ("aten::exp_", "cpu_op")]
    from jitorch.jit.tracer import trace
    graph = trace(lambda a, b: a.mul(1.0).add_(b), x, y)
    assert [n.op.name for n in graph.nodes] == ["mul", "add"]


def test_a_large_in_place_call_splits_on_the_team_with_the_same_bits():
    n = ufunc_parts.SPLIT_MIN + 64 * 3
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    x, y = jt.tensor(a), jt.tensor(b)
    assert registry.OPS["mul"].flat_into((x, y)) is True
    np.testing.assert_array_equal(x.numpy().view(np.uint32), (a * b).view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 1), (2, 3)])
def test_in_place_shortcut_matches_torch(shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(shape).astype(np.float32), rng.uniform(0.5, 2, shape).astype(np.float32)
    for name, others in (("add_", (b,)), ("sub_", (b,)), ("mul_", (b,)), ("div_", (b,)), ("exp_", ()),
                         ("neg_", ()), ("sqrt_", ())):
        x, t = jt.tensor(np.abs(a)), torch.from_numpy(np.abs(a))
        assert getattr(x, name)(*(jt.tensor(o) for o in others)) is x
        getattr(t, name)(*(torch.from_numpy(o) for o in others))
        if name == "exp_":  # (NumPy's exp, as the general path's, may differ from torch's in the last bit)
            np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=2e-7)
        else:  # (correctly rounded: torch's bits)
            np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_an_alpha_equal_to_the_default_but_of_another_type_is_checked_as_torch_checks_it():
    """Regression: the shortcuts took ``alpha=True`` and ``alpha=1.0`` (equal to add's default 1) for the default
    and skipped the alpha check, so ``uint8.add(y, alpha=True)`` and ``int.add_(y, alpha=1.0)`` computed where
    torch raises; now the check runs on them, in every form, before anything is written."""
    torch = pytest.importorskip("torch")
    calls = [lambda x, y: x.add(y, alpha=True), lambda lib, x, y: lib.add(x, y, alpha=True),
             lambda x, y: x.add_(y, alpha=True), lambda x, y: x.sub_(y, alpha=True), lambda x, y: x.add(2, alpha=True),
             lambda x, y: x.add(y, alpha=1.0), lambda x, y: x.add_(y, alpha=1.0), lambda x, y: x.sub(y, alpha=1.0),
             lambda x, y: x.add_(3, alpha=1.0), lambda x, y: x.float().add_(y.float(), alpha=True)]
    for call in calls:
        results = []
        for lib in (jt, torch):
            x, y = lib.tensor([5, 6], dtype=lib.uint8), lib.tensor([1, 2], dtype=lib.uint8)
            args = (lib, x, y) if call.__code__.co_argcount == 3 else (x, y)
            with pytest.raises(RuntimeError) as info:
                call(*args)
            assert x.tolist() == [5, 6] and (lib is torch or x._version == 0)
            results.append(str(info.value))
        assert results[0] == results[1]
    x, y = jt.tensor([True, False]), jt.tensor([True, True])
    assert x.add(y, alpha=True).tolist() == [True, True] and x.add_(y, alpha=True).tolist() == [True, True]


def _factors(name):
    return registry.OPS[name].flat_into.factors


@pytest.mark.parametrize("name", ["add", "sub"])
def test_an_alpha_is_checked_and_converted_once_per_dtype_and_value(name):
    """``x.add_(y, alpha=a)`` on two tensors of one dtype remembers ``a`` checked and converted to the dtype (an
    optimizer passes one ``-lr`` for every parameter): the general path's bits from the first call on and in
    both of `write_into`'s paths (a parameter under no_grad takes the one after `registry.call_inplace`'s
    checks), an alpha the check refuses raising on every call with nothing written or remembered."""
    factors = _factors(name)
    factors.clear()
    rng = np.random.default_rng(5)
    for dtype in (jt.float32, jt.float64, jt.int32, jt.uint8):
        a = random_array((2, 3), dtype, rng, low=-3, high=4)
        b = random_array((2, 3), dtype, rng, low=-3, high=4)
        for alpha in (-0.01, 3, -0.01, 3, 2 ** 53 + 1, 1e39, 2.5, -5):
            with general_path():
                try:
                    want = getattr(jt.tensor(a), name + "_")(jt.tensor(b), alpha=alpha)
                except RuntimeError as e:
                    want = e
            for grad in (False, True):
                x = jt.tensor(a, requires_grad=grad and dtype.is_floating_point)
                if isinstance(want, RuntimeError):
                    with jt.no_grad(), pytest.raises(RuntimeError, match=re.escape(str(want))):
                        getattr(x, name + "_")(jt.tensor(b), alpha=alpha)
                    assert x._version == 0 and np.array_equal(x.detach().numpy(), a)
                    assert (dtype, type(alpha), alpha) not in factors
                    continue
                with jt.no_grad():
                    getattr(x, name + "_")(jt.tensor(b), alpha=alpha)
                assert _bits(x.detach()) == _bits(want) and x._version == 1, (dtype, alpha, grad)
                held = factors[(dtype, type(alpha), alpha)]
                assert held.shape == () and held.dtype == dtype.np and not held.flags.writeable


def test_a_zero_or_nan_alpha_is_not_taken_for_another():
    """-0.0 equals 0.0 (and 0 and False): a remembered zero would give ``-0.0 + 0.0 * y`` the bits of
    ``-0.0 + -0.0 * y``; zeros are not remembered. NaNs (none equal to another) are, within a bounded table."""
    factors = _factors("add")
    for alpha, sign in ((-0.0, 1), (0.0, 0), (-0.0, 1), (0, 0)):
        x = jt.tensor([-0.0, 1.0])
        x.add_(jt.tensor([1.0, 1.0]), alpha=alpha)
        assert np.signbit(x.numpy()[0]) == sign and x.tolist()[1] == 1.0
    assert not any(k[2] == 0 for k in factors)
    nan = np.array([0x7FC00001], np.uint32).view(np.float32)
    for _ in range(70):  # (each float("nan") is a new key)
        x = jt.tensor([1.0])
        x.add_(jt.tensor(nan), alpha=float("nan"))
        with general_path():
            want = jt.tensor([1.0]).add_(jt.tensor(nan), alpha=float("nan"))
        assert _bits(x) == _bits(want)
    assert len(factors) <= 64


def test_a_remembered_alpha_serves_no_other_call():
    """A tensor ``y`` of another dtype, a number ``y`` or a tensor requiring grad in grad mode take the paths
    they took before (the op's ``into`` converts alpha to ``y``'s dtype, not to the result's)."""
    _factors("add").clear()
    x, y = jt.ones(3, dtype=jt.float64), jt.full((3,), 0.1, dtype=jt.float32)
    x.add_(y, alpha=-0.01)
    with general_path():
        want = jt.ones(3, dtype=jt.float64).add_(y, alpha=-0.01)
    assert _bits(x) == _bits(want) and (jt.float64, float, -0.01) not in _factors("add")
    p = jt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        p.add_(jt.ones(2), alpha=2)


def test_a_parameter_under_no_grad_takes_the_shortcut_and_in_grad_mode_the_general_path():
    """An optimizer's step (``p.add_(g, alpha=-lr)`` under no_grad, ``p.data.add_(...)``) on a parameter that
    requires grad records nothing: the shortcut serves it (before `registry.call_inplace`'s checks, which
    find nothing to refuse there), with the general path's bits and version; in grad mode the general path
    refuses the leaf as before. ``p.data`` (``detach``) shares the parameter's NumPy view."""
    op = registry.OPS["add"]
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    with general_path():
        want = jt.tensor(a).add_(jt.tensor(b), alpha=-0.01)
    p, g = jt.tensor(a, requires_grad=True), jt.tensor(b, requires_grad=True)
    assert op.flat_into((p, g, -0.01)) is False  # (grad mode: the general path decides, and refuses)
    with jt.no_grad():
        assert op.flat_into((p, g, -0.01)) is True and p._version == 1
    assert _bits(p.detach()) == _bits(want) and p.requires_grad and p.is_leaf and p.grad is None
    q = jt.tensor(a, requires_grad=True)
    q.sum()  # (its NumPy view made)
    data = q.data
    assert data._arr is q._arr and not data.requires_grad and data.grad_fn is None
    data.add_(jt.tensor(b), alpha=-0.01)
    assert _bits(q.detach()) == _bits(want) and q._version == data._version == 1
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        q.add_(jt.tensor(b), alpha=-0.01)
    assert _bits(q.detach()) == _bits(want) and q._version == 1

"""The eager shortcuts of pointwise ops: in-place ops written straight into their tensor, fast paths
that serve tensors requiring grad (recording the backward node in grad mode), and where()'s bit select."""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.jit.tracer import trace
from jitorch.ops import registry
from tests.support import LAYOUTS, general_path, random_array, tensor_and_array

FAST_DTYPES = [jt.bool, jt.uint8, jt.int8, jt.int16, jt.int32, jt.int64, jt.float32, jt.float64]
# (in-place method, NumPy formula with torch's alpha): ops whose in-place form writes into its tensor
INPLACE = {
    "add_": lambda a, b, alpha: a + alpha * b,
    "sub_": lambda a, b, alpha: a - alpha * b,
    "mul_": lambda a, b, alpha: a * b,
}


def _other(draw, dtype, shape, rng):
    """A second operand of ``dtype``: a tensor broadcasting to ``shape`` or a Python number."""
    kind = draw(st.sampled_from(["tensor", "row", "number"]))
    if kind == "number":
        return (float(rng.integers(-3, 4)) / 2 if dtype.is_floating_point else int(rng.integers(0, 3)))
    other_shape = shape[1:] if kind == "row" else shape
    return jt.tensor(random_array(other_shape, dtype, rng), dtype=dtype)


@given(data=st.data(), name=st.sampled_from(sorted(INPLACE)), dtype=st.sampled_from(FAST_DTYPES[2:]),
       layout=st.sampled_from([lay for lay in LAYOUTS if lay != "expanded"]),
       shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), seed=st.integers(0, 2**16))
def test_inplace_ops_write_into_their_tensor(data, name, dtype, layout, shape, seed):
    rng = np.random.default_rng(seed)
    x, expected = tensor_and_array(random_array(shape, dtype, rng), layout)
    other = _other(data.draw, dtype, shape, rng)
    alpha = data.draw(st.sampled_from([1, 2])) if name != "mul_" else 1
    kwargs = {"alpha": alpha} if name != "mul_" else {}
    ptr, version = x.data_ptr(), x._version
    b = other.numpy() if isinstance(other, jt.Tensor) else other
    want = INPLACE[name](expected.astype(np.float64), np.asarray(b, np.float64), alpha)
    assert getattr(x, name)(other, **kwargs) is x
    assert x.data_ptr() == ptr and x._version == version + 1
    np.testing.assert_allclose(x.numpy().astype(np.float64), want.astype(dtype.np), rtol=1e-6)


def test_inplace_ufunc_op_writes_into_its_tensor():
    x = jt.tensor([0.0, 1.0])
    ptr = x.data_ptr()
    x.exp_()
    assert x.data_ptr() == ptr
    np.testing.assert_allclose(x.numpy(), np.exp([0.0, 1.0], dtype=np.float32))


def test_inplace_result_that_does_not_fit_its_tensor_raises():
    x = jt.ones(3)
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        x.add_(jt.ones(2, 3))
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_inplace_float_result_into_an_integer_tensor_raises():
    x = jt.tensor([1, 2])
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        x.add_(0.5)


def test_inplace_into_an_expanded_tensor_raises():
    x = jt.ones(1).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        x.sub_(1.0)


def test_inplace_on_a_leaf_that_requires_grad_raises_in_grad_mode_only():
    w = jt.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        w.sub_(jt.ones(2))
    with jt.no_grad():
        w.sub_(jt.ones(2), alpha=0.5)
    assert w.tolist() == [0.5, 0.5] and w.grad_fn is None and w.requires_grad


def test_inplace_op_on_a_non_leaf_records_its_node():
    w = jt.ones(2, requires_grad=True)
    y = w * 2
    y.add_(jt.ones(2), alpha=3)
    assert y.grad_fn.name() == "AddBackward0"
    y.sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]


def test_fast_results_on_tensors_requiring_grad_record_their_node():
    w = jt.tensor([1.0, -2.0], requires_grad=True)
    x = jt.tensor([3.0, 4.0])
    y = (w * x + 1.0).relu()
    assert [y.grad_fn.name(), y.grad_fn.next_functions[0][0].name()] == ["ReluBackward0", "AddBackward0"]
    y.sum().backward()
    assert w.grad.tolist() == [3.0, 0.0]


def test_fast_results_under_no_grad_do_not_require_grad():
    w = jt.ones(2, requires_grad=True)
    with jt.no_grad():
        y = w * 2 + w
    assert not y.requires_grad and y.grad_fn is None and y.tolist() == [3.0, 3.0]


def test_parameters_take_the_fast_paths_and_record():
    p = jt.nn.Parameter(jt.tensor([[1.0, 2.0]]))
    y = (p @ jt.tensor([[3.0], [4.0]])) * 2.0
    assert type(y) is jt.Tensor and y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    assert p.grad.tolist() == [[6.0, 8.0]]


@pytest.mark.parametrize("selected", [0, 0.0, -0.0, 2.5])
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int32])
def test_where_with_a_number_keeps_the_tensors_dtype(selected, dtype, rng):
    g = jt.tensor(random_array((40, 40), dtype, rng), dtype=dtype)
    cond = jt.tensor(rng.random((40, 40)) < 0.5)
    if not dtype.is_floating_point:
        selected = int(selected)
    for args in ((cond, selected, g), (cond, g, selected)):
        got = jt.where(*args)
        want = np.where(*[a.numpy() if isinstance(a, jt.Tensor) else a for a in args]).astype(dtype.np)
        assert got.dtype is dtype
        assert got.numpy().tobytes() == want.tobytes()  # bit for bit: -0.0 stays -0.0


def test_where_takes_a_uint8_condition_with_a_warning(rng):
    g = jt.tensor(rng.standard_normal((40, 40)), dtype=jt.float32)
    mask = rng.random((40, 40)) < 0.5
    with pytest.warns(UserWarning, match="where received a uint8 condition tensor"):
        got = jt.where(jt.tensor(mask.astype(np.uint8)), g, 0.0)
    assert got.numpy().tobytes() == np.where(mask, g.numpy(), np.float32(0)).tobytes()


@pytest.mark.parametrize("dtype, value, name", [(jt.int8, 300, "int8_t"), (jt.int8, -129, "int8_t"),
                                                (jt.uint8, 256, "uint8_t"), (jt.float32, 1e40, "float")])
def test_where_with_a_number_its_dtype_cannot_hold_raises(dtype, value, name):
    cond = jt.tensor([True, False])
    with pytest.raises(RuntimeError, match=f"value cannot be converted to type {name} without overflow"):
        jt.where(cond, jt.ones(2, dtype=dtype), value)


def test_where_on_a_tensor_requiring_grad_records_its_node():
    g = jt.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = jt.where(jt.tensor([True, False, True]), g, 0.5)
    assert y.grad_fn.name() == "WhereBackward0" and y.tolist() == [1.0, 0.5, 3.0]
    y.sum().backward()
    assert g.grad.tolist() == [1.0, 0.0, 1.0]


# the ops of Python's binary operators (``x + y``, ``x < y``), which call their op's ``fast_pair``
OPERATOR_OPS = ("add sub mul true_divide floor_divide remainder pow bitwise_and bitwise_or bitwise_xor "
                "bitwise_left_shift bitwise_right_shift eq ne lt le gt ge").split()
PAIR_OPS = [name for name in OPERATOR_OPS if registry.OPS[name].fast_pair is not None]


def pair_shortcut(name):
    """The operator shortcut of op ``name`` alone (no operator method or function behind it: None for what it
    does not serve)."""
    return registry.OPS[name].fast_pair(None, None)


def test_binary_pointwise_ops_have_an_operator_shortcut():
    assert PAIR_OPS == OPERATOR_OPS
    x = jt.ones(2, 3)
    assert pair_shortcut("add")(x, x).tolist() == [[2.0] * 3] * 2
    assert registry.OPS["where"].fast_pair is None and registry.OPS["exp"].fast_pair is None


def test_operator_method_hands_other_calls_to_the_operator_and_the_function():
    # two tensors of one shape: the shortcut; broadcast, a number, a NumPy scalar, another class, a list, a
    # tensor that requires grad: the operator's own method or the op's function, as before
    x, b = jt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), jt.tensor([1.0, -1.0, 0.5])
    g = jt.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    p = jt.nn.Parameter(jt.ones(2, 3))
    for got, want in (((x + x), [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]), ((x - b), [[0.0, 3.0, 2.5], [3.0, 6.0, 5.5]]),
                      ((x * 2), [[2.0, 4.0, 6.0], [8.0, 10.0, 12.0]]), ((x < np.float32(2.5)), [[True, True, False],
                                                                                           [False, False, False]]),
                      ((x + p), [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]), ((p + p), [[2.0] * 3] * 2)):
        assert got.tolist() == want
    y = g * x
    assert y.grad_fn.name() == "MulBackward0"
    y.sum().backward()
    assert g.grad.tolist() == x.tolist()
    assert x.__add__("a") is NotImplemented
    with pytest.raises(TypeError):
        x + [1.0]
    with pytest.raises(RuntimeError, match="size of tensor a"):
        x + jt.ones(4)


def test_operator_shortcut_is_off_while_a_dispatch_hook_is_installed():
    graph = trace(lambda a, b: (a + b) < a, jt.ones(2, 2), jt.ones(2, 2))
    assert [n.op.name for n in graph.nodes] == ["add", "lt"]


@given(name=st.sampled_from(PAIR_OPS), dtype=st.sampled_from(FAST_DTYPES), layout=st.sampled_from(LAYOUTS),
       shape=st.lists(st.integers(0, 3), max_size=3).map(tuple), seed=st.integers(0, 2**16))
def test_operator_shortcut_gives_the_general_paths_bits_and_layout(name, dtype, layout, shape, seed):
    rng = np.random.default_rng(seed)
    op = registry.OPS[name]
    a, _ = tensor_and_array(random_array(shape, dtype, rng), layout)
    b, _ = tensor_and_array(random_array(shape, dtype, rng), layout)
    try:
        with general_path():
            want = getattr(jt, name)(a, b)
    except (RuntimeError, TypeError, NotImplementedError) as e:  # (bool subtraction, shifts of floats...)
        with pytest.raises(type(e), match=re.escape(str(e))):
            if op.fast_pair(None, None)(a, b) is None:  # (the variant then takes the general path, which raises)
                raise type(e)(str(e))
        return
    got = op.fast_pair(None, None)(a, b)
    if got is None:
        return
    # (empty operands: the shortcut's result is contiguous, as torch's; the general path's layout rule follows
    # the operands' order there, which torch's does not: left out)
    assert got.dtype is want.dtype and got.shape == want.shape and (got.stride() == want.stride() or 0 in shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.untyped_storage() is not a.untyped_storage() and got._base is None


def test_operator_shortcut_records_the_backward_node_of_tensors_that_require_grad():
    x, y = jt.ones(2, 3, requires_grad=True), jt.full((2, 3), 2.0)
    z = pair_shortcut("mul")(x, y)
    assert z.grad_fn is not None and z.requires_grad
    z.sum().backward()
    assert x.grad.tolist() == [[2.0] * 3] * 2
    with jt.no_grad():
        assert (x * y).grad_fn is None


def test_operator_shortcut_is_off_while_a_dispatch_hook_is_installed():
    x, y = jt.ones(2, 2), jt.ones(2, 2)
    graph = trace(lambda a, b: (a + b) * b - a, x, y)
    assert [n.op.name for n in graph.nodes] == ["add", "mul", "sub"]


ONE_OPS = sorted(name for name, op in registry.OPS.items() if op.fast_one is not None)


def test_one_argument_pointwise_ops_have_a_shortcut_given_the_tensor_alone():
    assert {"relu", "exp", "neg", "abs", "sigmoid", "tanh", "logical_not", "isnan"} <= set(ONE_OPS)
    assert registry.OPS["add"].fast_one is None and registry.OPS["clamp"].fast_one is None
    assert jt.Tensor.__neg__ is jt.neg and jt.Tensor.__abs__ is jt.abs


@given(name=st.sampled_from(ONE_OPS), dtype=st.sampled_from(FAST_DTYPES), layout=st.sampled_from(LAYOUTS),
       shape=st.lists(st.integers(0, 3), max_size=3).map(tuple), seed=st.integers(0, 2**16))
def test_one_argument_shortcut_gives_the_general_paths_bits_and_layout(name, dtype, layout, shape, seed):
    a, _ = tensor_and_array(random_array(shape, dtype, np.random.default_rng(seed)), layout)
    function = registry.FUNCTIONS[name]
    try:
        with general_path():
            want = function(a)
    except (RuntimeError, TypeError, NotImplementedError) as e:  # (relu of bools, sqrt of ints in torch...)
        with pytest.raises(type(e), match=re.escape(str(e))):
            if registry.OPS[name].fast_one(a) is None:
                raise type(e)(str(e))
        return
    method = registry.METHODS.get(name)
    for got in (registry.OPS[name].fast_one(a), function(a), method(a) if method else None):
        if got is None:
            continue
        # (an empty result's strides: the shortcuts lay it out as torch does, the general path may not)
        assert got.dtype is want.dtype and got.shape == want.shape and (got.stride() == want.stride() or not a.numel())
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got._base is None and (a.numel() == 0 or got.data_ptr() != a.data_ptr())


def test_one_argument_shortcut_records_the_node_of_a_tensor_that_requires_grad():
    x = jt.tensor([[-1.0, 2.0]], requires_grad=True)
    y = registry.OPS["relu"].fast_one(x)
    assert y.grad_fn.name() == "ReluBackward0"
    (-y).sum().backward()
    assert x.grad.tolist() == [[0.0, -1.0]]
    with jt.no_grad():
        assert x.exp().grad_fn is None and not (-x).requires_grad


def test_one_argument_shortcut_is_off_while_a_dispatch_hook_is_installed():
    graph = trace(lambda a: (-a).relu().exp(), jt.ones(2, 2))
    assert [n.op.name for n in graph.nodes] == ["neg", "relu", "exp"]


def test_comparison_shortcut_on_two_tensors_gives_the_general_paths_bits_and_refuses_a_number_first():
    x, y = jt.tensor([[1.0, float("nan")], [3.0, -0.0]]), jt.tensor([[2.0, 1.0], [3.0, 0.0]])
    for name in ("lt", "le", "eq", "ne", "gt", "ge", "maximum", "logical_and"):
        got = pair_shortcut(name)(x, y)
        with general_path():
            want = getattr(jt, name)(x, y)
        assert got.dtype is want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert np.signbit(got.numpy()).tolist() == np.signbit(want.numpy()).tolist()
    with pytest.raises(TypeError, match=r"maximum\(\): argument 'input' \(position 1\) must be Tensor, not int"):
        jt.maximum(1, y)


@pytest.mark.parametrize("dtype", [jt.float16, jt.float32, jt.float64])
@pytest.mark.parametrize("op", ["__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"])
def test_comparisons_of_nan_and_infinities_raise_no_floating_point_error(op, dtype):
    """The comparisons' operator shortcut calls NumPy without silencing floating-point errors: under NumPy's
    strictest error state and warnings as errors, NaN and infinite operands still give torch's values."""
    torch = pytest.importorskip("torch")
    a = np.array([np.nan, 1, np.inf, -np.inf, np.nan, 0.0, -0.0] * 5, np.float64)
    b = np.array([1, np.nan, np.inf, np.nan, -np.inf, -0.0, np.nan] * 5, np.float64)
    x, y = (jt.tensor(v, dtype=dtype) for v in (a, b))
    tx, ty = (torch.tensor(v, dtype=getattr(torch, str(dtype).split(".")[1])) for v in (a, b))
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [getattr(x, op)(y), getattr(x[:1], op)(y[:1]), getattr(x, op)(float("nan")), getattr(x, op)(1.0)]
    want = [getattr(tx, op)(ty), getattr(tx[:1], op)(ty[:1]), getattr(tx, op)(float("nan")), getattr(tx, op)(1.0)]
    for g, w in zip(got, want):
        assert g.dtype is jt.bool
        assert g.tolist() == w.tolist()


@pytest.mark.parametrize("dtype", [jt.float16, jt.float32, jt.float64, jt.int8, jt.int64])
def test_negation_and_relu_raise_no_floating_point_error(dtype):
    """-x and relu's shortcut call NumPy without silencing floating-point errors (`_QUIET_UFUNCS`, relu's
    ``quiet``): under NumPy's strictest error state and warnings as errors, NaN (a signalling one too),
    infinities and integer minimums still give the general path's bits and torch's values."""
    torch = pytest.importorskip("torch")
    if dtype.is_floating_point:
        a = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5], dtype.np)
        bits = np.array([0x7C01 if dtype is jt.float16 else 0x7F800001 if dtype is jt.float32 else 0x7FF0000000000001],
                        {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
        a = np.concatenate([a, bits.view(dtype.np)] * 3)  # (with a signalling NaN)
    else:
        info = np.iinfo(dtype.np)
        a = np.array([info.min, info.max, 0, -1, 1] * 3, dtype.np)
    x = jt.tensor(a)
    shortcut = registry.OPS["neg"].fast_one, registry.OPS["relu"].fast_one
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [shortcut[0](x), shortcut[1](x), -x, jt.relu(x), x[:1].neg(), x[1:2].relu()]
    with general_path():
        want = [-x, jt.relu(x), -x, jt.relu(x), x[:1].neg(), x[1:2].relu()]
    assert (got[0] is None and got[1] is None) == (dtype is jt.float16)  # (float16: the general path's)
    t = torch.from_numpy(a)
    for g, w, tw in zip(got, want, [-t, torch.relu(t)] * 2 + [-t[:1], torch.relu(t[1:2])]):
        if g is None:
            continue
        np.testing.assert_array_equal(g.numpy().view(np.uint8), w.numpy().view(np.uint8))
        np.testing.assert_array_equal(g.numpy(), tw.numpy())


@pytest.mark.parametrize("shape", [(), (1,), (1, 1)])
@pytest.mark.parametrize("dtype", [jt.int8, jt.int64, jt.float32, jt.float64])
def test_inplace_ops_on_one_element_give_the_general_paths_bits(dtype, shape):
    """An in-place op on one element computes from a copy of its operand (`pointwise_base`'s ``fast_into``):
    the general path's bits, its errors, the tensor's own memory written once (version + 1), torch's values;
    ``x.add_(x)`` and an operand that is a view of the same memory too."""
    torch = pytest.importorskip("torch")
    info = np.iinfo(dtype.np) if dtype in (jt.int8, jt.int64) else np.finfo(dtype.np)
    values = [int(info.min), int(info.max), 3] if info.dtype.kind == "i" else [-2.5, 0.1, float("nan"), float(info.max)]
    for v, w in zip(values, values[1:] + values[:1]):
        calls = [("add_", (w,), {"alpha": 2}), ("sub_", (w,), {}), ("mul_", (w,), {}), ("add_", ("self",), {}),
                 ("mul_", ("view",), {})]
        for name, others, kwargs in calls:
            got, want = (jt.tensor(np.full(shape, v, dtype.np)) for _ in range(2))
            t = torch.from_numpy(np.full(shape, v, dtype.np))
            def operand(x, o):  # noqa: E306
                return x if o == "self" else x.view(shape) if o == "view" else jt.tensor(np.full(shape, o, dtype.np))
            ptr, version = got.data_ptr(), got._version
            assert getattr(got, name)(operand(got, others[0]), **kwargs) is got
            assert got.data_ptr() == ptr and got._version == version + 1
            with general_path():
                getattr(want, name)(operand(want, others[0]), **kwargs)
            np.testing.assert_array_equal(got.numpy().reshape(-1).view(np.uint8), want.numpy().reshape(-1).view(np.uint8))
            to = t if others[0] == "self" else t.view(shape) if others[0] == "view" else torch.from_numpy(
                np.full(shape, others[0], dtype.np))
            getattr(t, name)(to, **kwargs)
            np.testing.assert_array_equal(got.numpy(), t.numpy())
    if info.dtype.kind == "i":
        x = jt.ones(shape, dtype=dtype)
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type"):
            x.add_(jt.ones(shape))
        assert x._version == 0 and x.tolist() == jt.ones(shape, dtype=dtype).tolist()


@pytest.mark.parametrize("dtype", [jt.float32, jt.int32, jt.float64])
def test_neg_in_place_of_a_strided_column_writes_its_own_elements(dtype):
    """Fuzz seed 7501690: NumPy 2.4's float32/int32 ``negative`` into a strided (n, 1) array steps by the
    size-1 dim's stride, so ``x.neg_()`` of ``base[::2, ::2]`` (shape (3, 1)) negated the wrong elements and
    wrote past the view; NumPy 1.26's is right. The in-place fast path leaves such an array to the general one."""
    base = jt.full((6, 2), 9, dtype=dtype)
    view = base[::2, ::2]
    view.copy_(jt.tensor([[1], [-2], [7]], dtype=dtype))
    view.neg_()
    assert base.tolist() == [[-1, 9], [9, 9], [2, 9], [9, 9], [-7, 9], [9, 9]]
    column = jt.arange(8, dtype=dtype)[::2].unsqueeze(1)
    column.negative_()
    assert column._base.tolist() == [0, 1, -2, 3, -4, 5, -6, 7]

"""``out=`` calls of pointwise ops computed straight into the out tensor (issue 19: ``add(x, y, out=x)`` cost 7.75 us
against torch's 0.88 us, computing a new result and copying it into out). Which path ran (the function variant's
first try before `registry.call`'s checks, `OpDef.fast_out` after them, or the general path), and torch's values,
resizing, warnings and errors for out= of every kind."""

import contextlib
import warnings
import zlib

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import Tensor
from jitorch.ops import registry
from tests.support import raises_as_torch


@contextlib.contextmanager
def refused(*names, module=registry):
    """Inside, each of ``module``'s functions ``names`` raises: a call that succeeds never reached them."""
    kept = {name: getattr(module, name) for name in names}

    def refuse(name):
        def fn(*args, **kwargs):
            raise AssertionError(f"{name} ran")
        return fn
    for name in names:
        setattr(module, name, refuse(name))
    try:
        yield
    finally:
        for name, fn in kept.items():
            setattr(module, name, fn)


@contextlib.contextmanager
def no_copy():
    """Inside, neither a new result's copy into out (`Tensor._write`) nor a kernel nor an op's ``fast`` runs."""
    kept = Tensor._write

    def write(self, value):
        raise AssertionError("a result was copied into out")
    Tensor._write = write
    fasts = {name: registry.OPS[name].fast for name in ("add", "sub", "mul", "lt", "exp", "true_divide", "atan2")}
    for name in fasts:
        registry.OPS[name].fast = None
    try:
        with refused("execute"):
            yield
    finally:
        Tensor._write = kept
        for name, fn in fasts.items():
            registry.OPS[name].fast = fn


def pair(lib, shape=(4, 3), dtype=None):
    x = lib.arange(float(np.prod(shape))).reshape(shape) - 5
    y = lib.full(shape, 2.0)
    return (x, y) if dtype is None else (x.to(dtype), y.to(dtype))


FLAT_CALLS = {  # calls the function variant serves before `registry.call`: no overlap or device check runs
    "add": lambda lib, x, y, o: lib.add(x, y, out=o),
    "add alpha": lambda lib, x, y, o: lib.add(x, y, alpha=3, out=o),
    "sub alpha": lambda lib, x, y, o: lib.sub(x, y, alpha=0.5, out=o),
    "mul number": lambda lib, x, y, o: lib.mul(x, 3, out=o),
    "exp": lambda lib, x, y, o: lib.exp(x, out=o),
    "true_divide": lambda lib, x, y, o: lib.true_divide(x, y, out=o),
    "atan2": lambda lib, x, y, o: lib.atan2(x, y, out=o),
}


@pytest.mark.parametrize("name, target", [(name, target) for name in FLAT_CALLS for target in ("new", "x", "y")
                                          if target != "y" or name not in ("exp", "mul number")])  # (y: no operand)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_of_the_results_dtype_and_shape_is_written_by_the_variant_alone(name, dtype, target):
    call = FLAT_CALLS[name]

    def run(lib, guard):
        x, y = pair(lib, dtype=getattr(lib, dtype))
        o = {"new": lib.empty(4, 3, dtype=getattr(lib, dtype)), "x": x, "y": y}[target]
        data = o.data_ptr()
        with guard():
            assert call(lib, x, y, o) is o
        assert o.data_ptr() == data
        return o
    got = run(jt, _flat_guard)
    want = run(torch, contextlib.nullcontext)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6 if dtype == "float32" else 1e-15)


@contextlib.contextmanager
def _flat_guard():
    with no_copy(), refused("check_write_overlap", "check_same_device"):
        yield


@pytest.mark.parametrize("size", [(), (1,), (1, 1), (5,), (0, 3), (70000,)])
def test_out_aliasing_an_input_of_any_size_gives_torchs_values_and_bumps_the_version(size):
    """One element takes NumPy's call on a copy of the aliased input (`compute_into`); 70,000 the thread team."""
    rng = np.random.default_rng(43)
    a, b = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
    # (operands of the contiguous strides the unchecked path takes: ``tensor()`` of an empty array keeps NumPy's
    # (0, 0), as torch's)
    x, y = jt.empty(size).copy_(jt.tensor(a)), jt.empty(size).copy_(jt.tensor(b))
    version = x._version
    with _flat_guard():
        jt.add(x, y, out=x)
        jt.mul(y, y, out=y)
    t = torch.tensor(a).add(torch.tensor(b))
    assert x.tolist() == t.tolist() and x._version == version + 1
    assert y.tolist() == torch.tensor(b).mul(torch.tensor(b)).tolist()


def test_comparison_into_a_bool_out_is_written_directly_and_into_another_dtype_casts():
    x, y = pair(jt)
    tx, ty = pair(torch)
    b = jt.empty(4, 3, dtype=jt.bool)
    with _flat_guard():
        assert jt.lt(x, y, out=b) is b
    assert b.tolist() == torch.lt(tx, ty).tolist()
    f = jt.empty(4, 3)  # (a bool result into a float out: the general path casts it, as torch)
    tf = torch.empty(4, 3)
    jt.lt(x, y, out=f)
    torch.lt(tx, ty, out=tf)
    assert f.tolist() == tf.tolist()


CHECKED_CALLS = {  # served by `OpDef.fast_out` after `registry.call`'s checks: computed into out, no copy
    # name: (make(lib) -> tensors, call(lib, *tensors) -> the tensor whose values torch's must equal)
    "broadcast operand": (lambda lib: (lib.ones(4, 3), lib.arange(3.0), lib.empty(4, 3)),
                          lambda lib, x, y, o: lib.add(x, y, out=o)),
    "transposed out": (lambda lib: (lib.arange(12.0).view(4, 3), lib.empty(3, 4)),
                       lambda lib, x, o: (lib.sub(x, 1, out=o.t()), o)[1]),
    "strided out": (lambda lib: (lib.arange(6.0), lib.zeros(12)),
                    lambda lib, x, o: (lib.mul(x, 2, out=o[::2]), o)[1]),
    "number first": (lambda lib: (lib.arange(6.0), lib.empty(6)),
                     lambda lib, x, o: lib.sub(10.0, x, out=o)),
    "out a view of x, exactly": (lambda lib: (lib.arange(6.0).view(2, 3),),
                                 lambda lib, x: (lib.add(x, 1, out=x.view(2, 3)), x)[1]),
    "non-contiguous input aliased": (lambda lib: (lib.arange(6.0).view(2, 3),),
                                     lambda lib, x: (lib.add(x.t(), x.t(), out=x.t()), x)[1]),
    "strided input and out, no shared element": (lambda lib: (lib.arange(8.0),),
                                                 lambda lib, b: (lib.add(b[::2], 1, out=b[1::2]), b)[1]),
    "grad input, no_grad": (lambda lib: (lib.ones(3, requires_grad=True), lib.empty(3)),
                            lambda lib, x, o: _no_grad_add(lib, x, o)),
    "0-d": (lambda lib: (lib.tensor(1.5), lib.tensor(2.0)), lambda lib, x, o: lib.mul(x, 3, out=o)),
}


def _no_grad_add(lib, x, o):
    with lib.no_grad():
        return lib.add(x, 2, out=o)


@pytest.mark.parametrize("name", CHECKED_CALLS)
def test_out_served_after_the_checks_gives_torchs_values_without_a_copy(name):
    make, call = CHECKED_CALLS[name]
    tensors = make(jt)
    with no_copy():
        got = call(jt, *tensors)
    want = call(torch, *make(torch))
    assert got.tolist() == want.tolist()


def test_dtype_promotion_into_out_takes_the_general_path_and_casts_as_torch():
    cases = [
        lambda lib: lib.add(lib.arange(6), lib.arange(6), out=lib.empty(6)),  # int64 result into float32
        lambda lib: lib.add(lib.arange(6.0), 1, out=lib.empty(6, dtype=lib.float64)),  # float32 into float64
        lambda lib: lib.mul(lib.arange(6, dtype=lib.int32), 3, out=lib.empty(6, dtype=lib.int64)),
        lambda lib: lib.add(lib.arange(6, dtype=lib.uint8), 250, out=lib.empty(6, dtype=lib.int16)),
        lambda lib: lib.lt(lib.arange(6.0), 3, out=lib.empty(6, dtype=lib.int32)),
    ]
    for case in cases:
        got, want = case(jt), case(torch)
        assert got.dtype == getattr(jt, str(want.dtype).split(".")[1]) and got.tolist() == want.tolist()


@pytest.mark.parametrize("call", [
    lambda lib: lib.add(lib.ones(2, 3), 0.5, out=lib.zeros(2, 3, dtype=lib.int64)),  # float result into int
    lambda lib: lib.add(lib.ones(2, 3, dtype=lib.int32), 1, out=lib.zeros(2, 3, dtype=lib.bool)),  # int into bool
    lambda lib: lib.lt(lib.ones(2, 3), 1, out=lib.zeros(2, 3).expand(2, 3, 3)[..., 0].expand(2, 3)),
    lambda lib: lib.add((x := lib.ones(1, 3)), lib.ones(2, 3), out=x),  # out an input that would need resizing
    lambda lib: lib.add((b := lib.arange(6.0))[:4], 1, out=b[1:5]),  # out partly overlapping an input
    lambda lib: lib.add((b := lib.arange(6.0).view(2, 3)), 1, out=b.view(3, 2).t()),  # same memory, other order
    lambda lib: lib.mul(lib.ones(3), 2, out=lib.zeros(1).expand(3)),  # out whose elements share memory
    lambda lib: lib.add(lib.ones(3), 1, out=lib.zeros(3).numpy()),
])
def test_bad_out_raises_torchs_error_and_writes_nothing(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raises_as_torch(call)


def test_nothing_is_written_when_out_raises():
    for lib in (jt, torch):
        o = lib.full((2, 3), 7, dtype=lib.int64)
        with pytest.raises(RuntimeError, match="can't be cast"):
            lib.add(lib.ones(2, 3), 0.5, out=o)
        assert o.tolist() == [[7] * 3] * 2
        b = lib.arange(6.0)
        with pytest.raises(RuntimeError, match="unsupported operation"):
            lib.add(b[:4], 1, out=b[1:5])
        assert b.tolist() == list(range(6))


def test_out_requiring_grad_raises_torchs_error_in_grad_mode_and_is_written_under_no_grad():
    def grad_mode(lib):
        o = lib.zeros(3, requires_grad=True)
        try:
            lib.add(lib.ones(3), lib.ones(3), out=o)
        finally:
            assert o.tolist() == [0.0] * 3
    raises_as_torch(grad_mode)

    def no_grad(lib):
        o = lib.zeros(3, requires_grad=True)
        with lib.no_grad():
            lib.add(lib.ones(3), lib.ones(3), out=o)
        return o
    got, want = no_grad(jt), no_grad(torch)
    assert got.tolist() == want.tolist() and got.requires_grad and got.grad_fn is None


def test_input_requiring_grad_in_grad_mode_raises_before_writing_even_when_out_is_that_input():
    def call(lib):
        x = lib.ones(3, requires_grad=True)
        o = lib.zeros(3)
        try:
            lib.mul(x, 2, out=o)
        finally:
            assert o.tolist() == [0.0] * 3
    raises_as_torch(call)


def test_out_of_another_shape_is_resized_with_torchs_warning_and_an_empty_one_without():
    for lib in (jt, torch):
        x, y = pair(lib)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            e = lib.empty(0)
            lib.add(x, y, out=e)
        with pytest.warns(UserWarning, match="An output with one or more elements was resized since it had shape "
                                             r"\[5\], which does not match the required output shape \[4, 3\]"):
            w = lib.zeros(5)
            lib.mul(x, y, out=w)
        assert e.shape == w.shape == (4, 3)
        assert e.tolist() == (x + y).tolist() and w.tolist() == (x * y).tolist()
    with warnings.catch_warnings():  # a broadcast operand of out's size is no resize
        warnings.simplefilter("error")
        o = jt.zeros(4, 3)
        jt.add(jt.ones(3), jt.ones(4, 1), out=o)
    assert o.tolist() == [[2.0] * 3] * 4


def test_a_resized_out_follows_the_inputs_memory_order_as_torch():
    strides = []
    for lib in (jt, torch):
        o = lib.empty(0)
        lib.add(lib.ones(3, 4).t(), 1, out=o)
        strides.append(tuple(o.stride()))
    assert strides[0] == strides[1] == (1, 4)


def test_traces_profiles_and_hooks_still_see_out_calls():
    @jt.compile
    def f(x, y, o):
        jt.add(x, y, out=o)
        return o * 2

    x, y = pair(jt)
    got = f(x, y, jt.empty(4, 3))
    assert got.tolist() == ((pair(torch)[0] + 2) * 2).tolist()
    with jt.profiler.profile() as prof:
        jt.add(x, y, out=jt.empty(4, 3))
    assert any("add" in e.name for e in prof.events())


SERVED = sorted({op.public_name for op in registry.OPS.values()  # (reductions': tests/ops/test_reduction_out_into.py)
                  if op.fast_out is not None and "out" in op.variants and op.kind == "pointwise"})


def _operands(dtype, rng):
    """4x3 operands of ``dtype`` in the domain of every served op (positive, away from 0 for the logs)."""
    a = rng.uniform(0.5, 4.0, (4, 3))
    b = rng.uniform(0.5, 4.0, (4, 3))
    if dtype in ("int32", "int64", "uint8"):
        a, b = np.ceil(a), np.ceil(b)
    elif dtype == "bool":
        a, b = a > 2, b > 2
    return jt.tensor(a.astype(dtype)), jt.tensor(b.astype(dtype))


@pytest.mark.parametrize("name", SERVED)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bool"])
def test_every_served_op_writes_into_out_what_its_general_path_computes(name, dtype):
    """Each pointwise op with `OpDef.fast_out`, on each dtype: ``op(x[, y], out=o)`` into a new out of the plain
    result's dtype, into ``x`` itself and into a transposed out equals the general path's plain result bit for
    bit, or raises its error (type and message) with nothing written."""
    from tests.support import general_path
    fn = getattr(jt, name)
    nargs = len(fn._op.tensor_args)
    rng = np.random.default_rng(zlib.crc32(f"{name} {dtype}".encode()))
    x, y = _operands(dtype, rng)
    args = (x,) if nargs == 1 else (x, y)
    try:
        with general_path():
            want = fn(*args)
    except Exception as e:  # noqa: BLE001 (the out= call must raise the same)
        o = jt.zeros(4, 3, dtype=x.dtype)
        with pytest.raises(type(e)) as got:
            fn(*args, out=o)
        assert str(got.value) == str(e) and not o.any()
        return
    cases = [(jt.empty(4, 3, dtype=want.dtype), args), (jt.empty(3, 4, dtype=want.dtype).t(), args)]
    if want.dtype is x.dtype:  # (out the first operand itself)
        own = x.clone()
        cases.append((own, (own,) + args[1:]))
    for o, operands in cases:
        version = o._version
        # computed into out (no kernel, no new result copied in) where the operands have the result's dtype (an
        # int operand of a float op is converted first) and NumPy's negative is not into a strided out (`write_into`)
        served = (want.dtype is x.dtype or want.dtype is jt.bool) and not (
            name in ("neg", "negative") and not o.is_contiguous())
        with no_copy() if served else contextlib.nullcontext():
            assert fn(*operands, out=o) is o
        assert o._version == version + 1
        np.testing.assert_array_equal(o.numpy(), want.numpy())


def test_a_two_operand_ops_flat_out_call_is_lines_of_its_function_variant():
    """``add(x, y, out=o)``'s commonest call is written into add's variant (`pointwise_base`'s ``inline`` with
    ``out``): one frame from the caller to NumPy, as ``x.add_(y)``'s; a one-operand op's variant calls
    ``write_out``."""
    x, y, o = jt.ones(2), jt.ones(2), jt.empty(2)
    jt.add(x, y, out=o)
    jt.exp(x, out=o)
    x.add_(y)  # (variants are generated at their first call)
    assert "_i_oa" in jt.add.__code__.co_varnames and "_i_oa" in jt.Tensor.add_.__code__.co_varnames
    assert "_i_oa" not in jt.exp.__code__.co_varnames and "_fast_out" in jt.exp.__code__.co_names


@pytest.mark.parametrize("name", ["neg", "negative", "abs", "absolute", "ceil", "floor", "round", "trunc", "fix",
                                  "sign", "sgn", "frac", "bitwise_not"])
@pytest.mark.parametrize("dtypes", [("int32", "int64"), ("float32", "float64"), ("int64", "float32"),
                                    ("float64", "float32")])
def test_unary_out_of_another_dtype_raises_torchs_found_dtype_error_before_writing(name, dtypes):
    """torch builds these as TensorIterator's borrowing unary op (one dtype throughout): ``neg(int32, out=int64)``
    wrote the cast result where torch raises "Found dtype Long but expected Int", even before the kernel's own
    refusal (``frac`` of ints) and before resizing (a wrong-sized out). Found by a random out= fuzzer, seed 1."""
    src, dst = dtypes

    def call(lib):
        o = lib.zeros(5, dtype=getattr(lib, dst))
        try:
            getattr(lib, name)(lib.arange(1, 4).to(getattr(lib, src)), out=o)
        finally:
            assert o.tolist() == [0] * 5
    raises_as_torch(call)


def test_neg_of_bools_into_another_dtype_raises_negs_own_error_first():
    raises_as_torch(lambda lib: lib.neg(lib.ones(3, dtype=lib.bool), out=lib.zeros(3)))


@pytest.mark.parametrize("call", [
    lambda lib: lib.atan2(lib.ones(3, dtype=lib.bool), (y := lib.ones((), dtype=lib.bool)), out=y),
    lambda lib: lib.true_divide(lib.ones(2, 3, dtype=lib.bool), (y := lib.ones(3, dtype=lib.bool)), out=y),
    lambda lib: lib.bitwise_and(lib.ones(3), (y := lib.ones(())), out=y),
    lambda lib: lib.atan2(lib.ones(3, 1, dtype=lib.int64), (y := lib.ones((), dtype=lib.int64)), out=y),
    lambda lib: lib.sub(lib.ones(3, 1, dtype=lib.bool), (y := lib.ones(1, dtype=lib.bool)), out=y),  # sub's own first
])
def test_out_that_is_an_input_of_another_shape_raises_the_shape_error_before_dtype_errors(call):
    """TensorIterator refuses to resize an out tensor that is also an input before it checks dtypes or looks for a
    kernel; jitorch raised the cast or not-implemented error first (fuzz seed 1: ``atan2(x, y, out=y)`` of a bool
    ``y`` of shape ())."""
    raises_as_torch(call)


def test_a_kernel_missing_for_the_inputs_dtype_raises_the_cast_error_for_out_first():
    """torch checks the cast into out before it looks for hypot's kernel; the fast path's check raised
    NotImplementedError first (fuzz seed 1: ``hypot(int32, int32, out=bool)``)."""
    raises_as_torch(lambda lib: lib.hypot(lib.ones(2, 3, dtype=lib.int32), lib.ones(2, 3, dtype=lib.int32),
                                          out=lib.zeros(5, dtype=lib.bool)))


@pytest.mark.parametrize("shapes", [((3,), (3,), (4, 3)), ((1, 3), (3,), (4, 3)), ((0, 1), (1, 3), (0, 3)),
                                    ((1, 1), (1,), (0, 1)), ((), (), (1,))])
def test_operands_broadcasting_to_less_than_out_resize_it_as_torch(shapes):
    """NumPy's call into an out tensor broadcasts its operands up to out's shape; torch resizes out to the operands'
    broadcast shape instead (with its warning): `OpDef.fast_out` serves only an out of exactly that shape."""
    a, b, o = shapes
    got = []
    for lib in (jt, torch):
        out = lib.full(o, 7.0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lib.add(lib.ones(a), lib.full(b, 2.0), out=out)
        got.append((tuple(out.shape), out.tolist(), [str(w.message).split(" This behavior")[0] for w in caught]))
    assert got[0] == got[1]

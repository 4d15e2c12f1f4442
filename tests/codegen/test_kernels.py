"""The kernel builder and CPU target: each lowering, compiled, equals the eager op.

Groups are built here directly from traced graphs (every node of a small
function in one kernel), so these tests check code generation apart from the
fusion pass.
"""

import ctypes
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.codegen import cpu, lowering
from jitorch.codegen.kernel import CompileError, build
from jitorch.ir.graph import iter_values
from jitorch.jit import trace
from tests.support import random_array, tensor_and_array, to_numpy


@dataclass
class Group:
    kind: str
    nodes: list
    inputs: list
    outputs: list


def whole_graph(graph):
    """All of a graph's nodes as one group (a reduction group if it holds a reduction)."""
    produced = {o for n in graph.nodes for o in n.outputs}
    inputs = []
    for n in graph.nodes:
        for v in iter_values(n.args):
            if v not in produced and v not in inputs:
                inputs.append(v)
    kind = "reduction" if any(lowering.kind_of(n) == "reduction" for n in graph.nodes) else "pointwise"
    return Group(kind, graph.nodes, inputs, graph.output_values())


def compiled(fn, *args):
    """(kernel, outputs) of ``fn`` compiled as one kernel and run on ``args``."""
    graph = trace(fn, *args)
    group = whole_graph(graph)
    kernel = cpu.link_kernel(build(group, "test_kernel"))
    return kernel, run_linked(kernel, graph, group, args)


def run_linked(kernel, graph, group, args):
    """The outputs of ``kernel`` (``group``'s, linked) run on ``args``, ``graph``'s inputs, in new arrays."""
    env = {v: t.contiguous() for v, t in zip(graph.inputs, args)}
    arrays = [np.ascontiguousarray(env[v]._array()) for v in group.inputs]
    outs = [np.empty(v.type.shape, v.type.dtype.np) for v in group.outputs]
    addrs = [a.__array_interface__["data"][0] for a in arrays + outs]
    kernel((ctypes.c_void_p * len(addrs))(*addrs))
    return outs


def check(fn, *args, ulps=0):
    _, outs = compiled(fn, *args)
    expected = fn(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, exp in zip(outs, expected):
        e = to_numpy(exp)
        assert got.shape == e.shape and got.dtype == exp.dtype.np
        if ulps and e.dtype.kind == "f":
            np.testing.assert_allclose(got, e, rtol=ulps * np.finfo(e.dtype).eps, atol=0, equal_nan=True)
        else:
            np.testing.assert_array_equal(got, e)


EXACT_UNARY = ["neg", "abs", "sign", "relu", "reciprocal", "sqrt", "rsqrt", "floor", "ceil", "trunc", "frac",
               "isnan", "isinf", "isfinite", "logical_not"]
EXACT_BINARY = ["add", "sub", "mul", "true_divide", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                "logical_and", "logical_or", "logical_xor"]


def special_floats(shape, dtype, rng):
    a = random_array(shape, dtype, rng)
    flat = a.reshape(-1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0], dtype=dtype.np)
    flat[: min(flat.size, specials.size)] = specials[: min(flat.size, specials.size)]
    return a


# integer inputs of float-only ops promote through a cast, which test_where_clamp_lerp_and_casts covers
@pytest.mark.parametrize("name, dtype", [(n, d) for n in EXACT_UNARY for d in (jt.float32, jt.float64, jt.int32)
                                         if d.is_floating_point or n not in ("reciprocal", "sqrt", "rsqrt", "frac")])
def test_exact_unary_ops(name, dtype, rng):
    x = jt.tensor(special_floats((3, 7), dtype, rng) if dtype.is_floating_point else
                  random_array((3, 7), dtype, rng))
    check(getattr(jt, name), x)


@pytest.mark.parametrize("name", EXACT_BINARY)
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64, jt.int64, jt.bool])
def test_exact_binary_ops_with_broadcasting(name, dtype, rng):
    if dtype is jt.bool and name in ("sub", "true_divide"):
        return
    a = jt.tensor(special_floats((4, 5), dtype, rng) if dtype.is_floating_point else random_array((4, 5), dtype, rng))
    b = jt.tensor(random_array((5,), dtype, rng))
    check(getattr(jt, name), a, b)


@given(st.sampled_from(["contiguous", "transposed", "strided", "expanded", "offset"]),
       st.sampled_from([(1,), (5,), (3, 4), (2, 3, 4), (2, 1, 3)]))
def test_views_fold_into_index_maths(layout, shape):
    rng = np.random.default_rng(0)
    x, arr = tensor_and_array(random_array(shape, jt.float32, rng), layout)
    check(lambda t: t.t() * 2 + 1 if t.ndim == 2 else t * 2 + 1, x)
    if len(shape) >= 2:
        check(lambda t: t.transpose(0, 1) * t.transpose(0, 1), jt.tensor(arr))


def test_views_shaped_by_another_tensor_fold_into_index_maths(rng):
    """view_as and expand_as take a tensor for its shape: folding them read ``.shape`` of an IR value (an
    AttributeError at compile time) instead of a fake tensor of its type."""
    x = jt.tensor(random_array((3, 4), jt.int16, rng))
    row = jt.tensor(random_array((4,), jt.float32, rng))
    check(lambda t: (t.view_as(t) * 2, t.view_as(t)), x)
    check(lambda t, r: (r.expand_as(t) + t, t.view_as(t).pow(2)), x.float(), row)


def test_where_clamp_lerp_and_casts(rng):
    a = jt.tensor(special_floats((6,), jt.float32, rng))
    b = jt.tensor(random_array((6,), jt.float32, rng))
    check(lambda x, y: jt.where(x > y, x, y), a, b)
    check(lambda x: x.clamp(-1.0, 2.0), a)
    check(lambda x, y: jt.lerp(x, y, 0.3), a, b)
    check(lambda x: (x * 10).to(jt.int32), jt.tensor(random_array((6,), jt.float32, rng)))
    check(lambda x: x.to(jt.float64) / 3, a)
    check(lambda i: i.float() / 2, jt.tensor([1, 2, 3], dtype=jt.int32))


@pytest.mark.parametrize("dims, keepdim", [(None, False), ((1,), False), ((0,), True), ((0, 2), False), ((-1,), True)])
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin"])
def test_reductions_with_prologue_and_epilogue(name, dims, keepdim, rng):
    x = jt.tensor(random_array((3, 4, 5), jt.float64, rng))
    if dims is None:
        fn = lambda t: getattr((t * t), name)() * 2 if name in ("sum", "mean") else getattr(t * t, name)()  # noqa: E731
    else:
        fn = lambda t: getattr(t * t, name)(dims, keepdim=keepdim) + 1  # noqa: E731
    check(fn, x, ulps=64)


def test_integer_sum_and_full_max(rng):
    x = jt.tensor(random_array((7, 9), jt.int32, rng))
    check(lambda t: t.sum(1), x)
    check(lambda t: t.max(), x)


def test_float32_pointwise_inner_loop_is_vectorised():
    kernel, _ = compiled(lambda x, y: x * y + 1, jt.ones(1024), jt.ones(1024))
    ir_text = str(cpu.optimise(kernel.source.llvm_ir))
    assert "<8 x float>" in ir_text or "<16 x float>" in ir_text or "<4 x float>" in ir_text


def test_threads_on_and_off_give_identical_results(monkeypatch):
    x = jt.randn(600, 1000)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "1")
    _, one = compiled(lambda t: (t * 3).sum(1), x)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "2")
    kernel, two = compiled(lambda t: (t * 3).sum(1), x)
    assert kernel.parallel
    np.testing.assert_array_equal(one[0], two[0])


def test_unsupported_groups_raise_compile_error():
    graph = trace(lambda x: (x + 1).t() * 2, jt.ones(2, 3))
    with pytest.raises(CompileError, match="a view of a value computed in the same kernel"):
        build(whole_graph(graph), "k")


# Ops with NumPy's integer and IEEE corner cases, compiled through jitorch.compile: each must fuse into a
# kernel and give eager's result exactly (floats bit for bit, signed zeros and NaN included).

FUNCTIONS = jt.ops.registry.FUNCTIONS
FLOATS = [jt.float32, jt.float64, jt.float16, jt.bfloat16]
INTEGERS = [jt.int8, jt.int16, jt.int32, jt.int64, jt.uint8]
EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 7.5, 0.1, 1.1, 2.0 ** 53, 1e38, -1e38, 1e308, 1e-300,
               3e-39, 1e-45, 5e-324, 65504.0, 6e-8, np.inf, -np.inf, np.nan]


def fused_result(fn, *args, ops):
    """``fn(*args)`` compiled, after checking that each of ``ops`` runs inside a generated kernel."""
    compiled_fn = jt.compile(fn)
    in_kernels = {op for kernel in compiled_fn.lower(*args).kernels for op in kernel.ops}
    assert set(ops) <= in_kernels, f"{ops} not all fused: kernels hold {in_kernels}"
    return compiled_fn(*args)


def kernel_ops(fn, *args):
    return {op for kernel in jt.compile(fn).lower(*args).kernels for op in kernel.ops}


def assert_identical(got, expected):
    """Same dtype, shape and values; floats also agree in the sign of zeros, NaN matches NaN."""
    assert got.dtype is expected.dtype and got.shape == expected.shape
    g, e = to_numpy(got), to_numpy(expected)
    np.testing.assert_array_equal(g, e)
    if g.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(g) | np.isnan(g), np.signbit(e) | np.isnan(e))


def edge_pairs(dtype, rng, random=2000):
    """(a, b): every pair of edge values of ``dtype``, then random pairs over many magnitudes."""
    s = np.array(EDGE_FLOATS).astype(dtype.np)
    a, b = (g.ravel() for g in np.meshgrid(s, s))
    r = rng.standard_normal((2, random)) * 10.0 ** rng.integers(-8, 8, (2, random))
    return jt.tensor(np.concatenate([a, r[0].astype(dtype.np)])), jt.tensor(np.concatenate([b, r[1].astype(dtype.np)]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["floor_divide", "_div_trunc", "remainder", "fmod"])
def test_float_division_family_is_exact(name, dtype, rng):
    a, b = edge_pairs(dtype, rng)
    fn = FUNCTIONS[name]
    if dtype in (jt.float16, jt.bfloat16) and name in ("floor_divide", "_div_trunc"):
        # by a tensor of several divisors eager rounds steps to the half type (torch's CPU kernel): no kernel
        # does; by one divisor it computes in float32, as the kernel does (every edge divisor, one at a time)
        assert name not in kernel_ops(lambda x, y: fn(x, y), a, b)
        assert_identical(jt.compile(lambda x, y: fn(x, y))(a, b), fn(a, b))
        assert name in kernel_ops(lambda x, y: fn(x, y), a, b[0])
        compiled = jt.compile(lambda x, y: fn(x, y))
        for divisor in np.array(EDGE_FLOATS).astype(dtype.np):
            assert_identical(compiled(a, jt.tensor(divisor)), fn(a, jt.tensor(divisor)))
        return
    assert_identical(fused_result(lambda x, y: fn(x, y), a, b, ops=[name]), fn(a, b))


def integer_edges(dtype, rng):
    info = np.iinfo(dtype.np)
    edges = [info.min, info.min + 1, info.max, 0, 1, 2, 7, 100] + ([-1, -2, -7, -100] if info.min else [])
    return jt.tensor(np.concatenate([edges, rng.integers(info.min, info.max, 200, endpoint=True)]).astype(dtype.np))


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("name", ["floor_divide", "_div_trunc", "remainder", "fmod"])
def test_integer_division_family_by_a_number_fuses(name, dtype, rng):
    x = integer_edges(dtype, rng)
    fn = FUNCTIONS[name]
    for divisor in ([-1, -2, -7, 1, 3, 100, 300] if dtype.is_signed else [1, 3, 100, 255, 300]):
        assert_identical(fused_result(lambda t: fn(t, divisor), x, ops=[name]), fn(x, divisor))


@pytest.mark.parametrize("name", ["floor_divide", "_div_trunc", "remainder", "fmod"])
def test_integer_division_that_may_be_by_zero_stays_eager(name):
    # eager raises on an integer zero divisor; a kernel could not, so these do not lower
    fn = FUNCTIONS[name]
    x = jt.tensor([7, -7, 3], dtype=jt.int32)
    assert name not in kernel_ops(lambda t, d: fn(t, d), x, x)
    assert name not in kernel_ops(lambda t: fn(t, 256), x.to(jt.uint8))  # 256 wraps to 0 in uint8
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jt.compile(lambda t, d: fn(t, d))(x, jt.tensor([1, 0, 1], dtype=jt.int32))


@given(st.sampled_from(INTEGERS), st.sampled_from(["bitwise_left_shift", "bitwise_right_shift"]),
       st.integers(0, 2 ** 32 - 1))
def test_shifts_by_counts_in_and_out_of_range(dtype, name, seed):
    rng = np.random.default_rng(seed)
    x = integer_edges(dtype, rng)
    bits = dtype.itemsize * 8
    low = -bits - 3 if dtype.is_signed else 0
    counts = jt.tensor(rng.integers(low, min(bits + 3, np.iinfo(dtype.np).max), x.shape[0]).astype(dtype.np))
    fn = FUNCTIONS[name]
    assert_identical(fused_result(lambda t, n: fn(t, n), x, counts, ops=[name]), fn(x, counts))
    count = int(rng.integers(0, bits))
    assert_identical(fused_result(lambda t: fn(t, count), x, ops=[name]), fn(x, count))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["hypot", "logaddexp"])
def test_hypot_and_logaddexp_match_numpy(name, dtype, rng):
    a, b = edge_pairs(dtype, rng)
    fn = FUNCTIONS[name]
    got, expected = fused_result(lambda x, y: fn(x, y), a, b, ops=[name]), fn(a, b)
    g, e = to_numpy(got).astype(np.float64), to_numpy(expected).astype(np.float64)
    # a few ulps of the larger operand: logaddexp cancels to small results that keep only that accuracy
    eps = np.finfo(np.float32 if dtype is not jt.float64 else np.float64).eps
    scale = np.maximum(np.maximum(np.abs(to_numpy(a)), np.abs(to_numpy(b))).astype(np.float64), np.abs(e))
    same = (g == e) | (np.isnan(g) & np.isnan(e)) | (np.abs(g - e) <= 4 * eps * scale)
    assert same.all(), list(zip(to_numpy(a)[~same], to_numpy(b)[~same], g[~same], e[~same]))[:5]


@given(st.sampled_from(FLOATS + INTEGERS + [jt.bool]), st.sampled_from([(1e-5, 1e-8), (0.1, 0.5), (0.0, 0.0),
                                                                        (0.0, 1e-7), (1e-3, 0.0), (0.25, 2.0)]),
       st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_isclose_rounds_as_numpy_does(dtype, tolerances, equal_nan, seed):
    rng = np.random.default_rng(seed)
    rtol, atol = tolerances
    a = special_floats((40,), dtype, rng) if dtype.is_floating_point else random_array((40,), dtype, rng)
    # b near the boundary |a - b| = atol + rtol * |b|, on both sides
    wide = a.astype(np.float64)
    near = wide + (atol + rtol * np.abs(wide)) * rng.choice([-1.01, -1.0, -0.99, 0.99, 1.0, 1.01], a.shape)
    if dtype.is_floating_point:
        b = near.astype(dtype.np)
    else:
        info = np.iinfo(np.uint8 if dtype is jt.bool else dtype.np)
        b = np.clip(np.rint(near), info.min, 1 if dtype is jt.bool else info.max).astype(dtype.np)
    x, y = jt.tensor(a), jt.tensor(b)
    got = fused_result(lambda p, q: jt.isclose(p, q, rtol, atol, equal_nan), x, y, ops=["isclose"])
    assert_identical(got, jt.isclose(x, y, rtol, atol, equal_nan))


ALL_DTYPES = FLOATS + INTEGERS + [jt.bool]


def fill_values(dtype):
    if dtype is jt.bool:
        return [True, 0]
    return [1, True, -2.5, 1e-30, 0.1] if dtype.is_floating_point else [1, True, 7]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_masked_fill_fill_and_zero_fuse_with_their_neighbours(dtype, rng):
    x = jt.tensor(random_array((3, 4), dtype, rng))
    mask = jt.tensor(rng.random(4) < 0.5)  # broadcasts over x's rows
    for value in fill_values(dtype):
        assert_identical(fused_result(lambda t, m: t.masked_fill(m, value).clone(), x, mask, ops=["masked_fill"]),
                         x.masked_fill(mask, value))

        def refill(t):
            u = t.clone()
            u.fill_(value)
            return u
        assert_identical(fused_result(refill, x, ops=["fill.Scalar"]), refill(x))

    def zeroed(t, m):
        u = t.masked_fill(m, 1)
        u.zero_()
        return u
    assert_identical(fused_result(zeroed, x, mask, ops=["zero"]), zeroed(x, mask))


@pytest.mark.parametrize("value_dtype", [jt.float64, jt.float32, jt.int64, jt.bool])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fills_by_a_0d_tensor(dtype, value_dtype):
    x = jt.tensor(np.arange(-6, 6).reshape(3, 4) % (2 if dtype is jt.bool else 12)).to(dtype)
    mask = jt.tensor([[True], [False], [True]])
    value = jt.tensor(-2.75 if value_dtype.is_floating_point else 3).to(value_dtype)

    def refill(t, v):
        u = t.clone()
        u.fill_(v)
        return u
    fills = (("masked_fill.Tensor", lambda t, v: t.masked_fill(mask, v)), ("fill.Tensor", refill))
    for name, fn in fills:  # floats into integers too: the emitter converts by the cast table
        try:
            expected = fn(x, value)
        except RuntimeError as error:  # a masked_fill value the dtype cannot hold: eager's error, compiled too
            assert name == "masked_fill.Tensor" and "without overflow" in str(error)
            with pytest.raises(RuntimeError, match=str(error)):
                jt.compile(fn)(x, value)
            continue
        # (a masked_fill whose value dtype may hold what the result's cannot stays eager's: it may raise)
        fuses = name == "fill.Tensor" or value_dtype in (jt.bool, dtype)
        assert_identical(fused_result(fn, x, value, ops=[name] if fuses else []), expected)


REDUCTION_DIMS = [None, 0, -1, (0, 2), (0, 1, 2)]
SUM_TOLERANCES = {jt.float32: 1e-6, jt.float64: 1e-14, jt.float16: 1e-3, jt.bfloat16: 1e-2}


def reduce_fn(name, dims, keepdim):
    """``name`` over ``dims``, in a kernel with a prologue (``t * 2``) and an epilogue (``+ 1`` or ``^ True``)."""
    kwargs = {} if dims is None else {"dim": dims}
    if keepdim and name != "count_nonzero":
        kwargs["keepdim"] = True

    def fn(t):
        r = getattr(jt, name)(t * 2 if t.dtype is not jt.bool else t, **kwargs)
        return r ^ True if r.dtype is jt.bool else r + 1
    return fn


@given(st.sampled_from(["all", "any", "count_nonzero", "nansum"]), st.sampled_from(ALL_DTYPES),
       st.sampled_from(REDUCTION_DIMS), st.booleans(), st.sampled_from([(3, 4, 5), (1, 6, 1), (2, 0, 3), (40, 3, 33)]),
       st.sampled_from(["contiguous", "transposed", "strided"]))
def test_logical_counting_and_nan_reductions(name, dtype, dims, keepdim, shape, layout):
    if name == "nansum" and dtype is jt.bool:
        return  # bools sum through an int64 cast, not nansum's own path
    rng = np.random.default_rng(len(shape) + shape[0])
    arr = special_floats(shape, dtype, rng) if dtype.is_floating_point else random_array(shape, dtype, rng)
    arr.reshape(-1)[::3] = 0  # zeros and truth values in every row
    x, _ = tensor_and_array(arr, layout)
    fn = reduce_fn(name, dims, keepdim)
    got, expected = fused_result(fn, x, ops=[name]), fn(x)
    if name == "nansum" and dtype.is_floating_point:  # sums reassociate: ulps, not bits
        values = np.abs(to_numpy(x))
        largest = float(np.max(values, where=np.isfinite(values), initial=0))
        tol = SUM_TOLERANCES[dtype] * max(1.0, largest * max(shape))
        np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=tol, atol=tol)
        assert got.dtype is expected.dtype
    else:
        assert_identical(got, expected)

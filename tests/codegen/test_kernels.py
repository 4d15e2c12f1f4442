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
    kernel = cpu.compile_kernel(build(group, "test_kernel"))
    env = {v: t.contiguous() for v, t in zip(graph.inputs, args)}
    arrays = [np.ascontiguousarray(env[v]._array()) for v in group.inputs]
    outs = [np.empty(v.type.shape, v.type.dtype.np) for v in group.outputs]
    addrs = [a.__array_interface__["data"][0] for a in arrays + outs]
    kernel((ctypes.c_void_p * len(addrs))(*addrs))
    return kernel, outs


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

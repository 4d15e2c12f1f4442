"""The llvm backend end to end: compiled results equal eager, kernels fuse what they should."""

import os
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jitorch as jt
from jitorch.jit import TraceError
from jitorch.ops import registry
from tests.jit.test_trace_ops import addresses_a_strided_storage, flat, split_tensors
from tests.ops.samples import VALUES_UNDEFINED, bind, samples
from tests.support import random_array, tensor_and_array

# Float results of kernels that use the math library differ from NumPy's by a few ulps.
TOLERANCE = {jt.float32: 2e-6, jt.float64: 1e-13, jt.float16: 1e-3, jt.bfloat16: 1e-2}


def assert_matches(got, expected, what=""):
    got, expected = flat(got), flat(expected)
    assert len(got) == len(expected), what
    for g, e in zip(got, expected):
        if not isinstance(e, jt.Tensor):
            assert g == e, what
            continue
        assert g.shape == e.shape and g.dtype is e.dtype, f"{what}: {g.shape} {g.dtype} vs {e.shape} {e.dtype}"
        tol = TOLERANCE.get(e.dtype, 0)
        a, b = np.asarray(g._array()), np.asarray(e._array())
        if tol:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol,
                                       equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(a, b, err_msg=what)


@pytest.mark.parametrize("name", sorted(registry.OPS))
def test_every_op_compiled_alone_equals_eager(name):
    op = registry.OPS[name]
    for i, sample in enumerate(samples(name, seed=zlib.crc32(name.encode()))):
        what = f"{name} sample {i} {sample}"
        eager_sample = sample.clone()
        args = bind(op, sample.clone())
        if addresses_a_strided_storage(op, args):
            continue
        tensors, rebuild = split_tensors(args)
        compiled = jt.compile(lambda *ts: registry.call(op, rebuild(ts)), fullgraph=True)
        jt.manual_seed(i)
        try:
            got = compiled(*tensors)
        except TraceError:
            continue  # data-dependent: test_trace_ops checks that these are the right ops
        jt.manual_seed(i)
        expected = registry.call(op, bind(op, eager_sample))
        if name in VALUES_UNDEFINED:
            continue
        assert_matches(got, expected, what)


CHAINS = {
    "gelu": lambda x, y, z: 0.5 * x * (1 + (0.7978845608 * (x + 0.044715 * x * x * x)).tanh()),
    "ten_ops": lambda x, y, z: ((x * y + z) * 0.5 - x / (y * y + 1) + (z - x) * (y + 2)).abs() * 0.25,
    "blend": lambda x, y, z: x * (1 - z) + y * z,
    "where_compare": lambda x, y, z: jt.where(x > y, x - y, z * 2).clamp(-3, 3),
    "reduce_prologue": lambda x, y, z: (x * y + z).sum(-1),
    "reduce_epilogue": lambda x, y, z: (x - y).amax(0, keepdim=True) * 2 + 1,
    "mean_var": lambda x, y, z: ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1),
    "softmax": lambda x, y, z: (x * 2).softmax(-1),
    "log_softmax": lambda x, y, z: x.log_softmax(-1) + y,
    "views": lambda x, y, z: x.t() * y.t() + z.t(),
    "cast": lambda x, y, z: (x > 0).to(x.dtype) * y + z.to(jt.float64),
}


@given(st.sampled_from(sorted(CHAINS)), st.sampled_from([(1, 1), (3, 5), (4, 17), (2, 0)]),
       st.sampled_from(["contiguous", "transposed", "strided", "expanded", "offset"]),
       st.sampled_from([jt.float32, jt.float64]))
def test_fused_chains_equal_eager(name, shape, layout, dtype):
    rng = np.random.default_rng(0)
    fn = CHAINS[name]
    x, _ = tensor_and_array(random_array(shape, dtype, rng), layout)
    y, z = (jt.tensor(random_array(shape, dtype, rng)) for _ in range(2))
    if name == "views":
        y, z = y.t().contiguous().t(), z
    try:
        expected = fn(x, y, z)
    except RuntimeError:
        return  # the chain is not defined on this shape (e.g. a view of an empty shape), eager says so too
    assert_matches(jt.compile(fn)(x, y, z), expected, name)


@pytest.mark.parametrize("dtype", [jt.int32, jt.int64, jt.uint8, jt.bool])
def test_integer_and_bool_kernels(dtype):
    rng = np.random.default_rng(1)
    a, b = (jt.tensor(random_array((6, 7), dtype, rng)) for _ in range(2))
    fn = lambda a, b: ((a & b) | (a ^ b), a.max(), (a > b) & (b >= a)) if dtype is jt.bool else \
        (a * b + a - b, (a * 2).sum(1), jt.maximum(a, b), a == b)  # noqa: E731
    assert_matches(jt.compile(fn)(a, b), fn(a, b), str(dtype))


def kernels_of(fn, *args):
    return jt.compile(fn).lower(*args).kernels


def test_kernel_counts_of_known_functions():
    x = jt.randn(64, 128)
    gelu = kernels_of(CHAINS["gelu"], x, x, x)
    assert len(gelu) == 1 and "tanh" in gelu[0].ops
    assert len(kernels_of(lambda a, b: (a * b).sum(), x, x)) == 1
    assert [k.ops for k in kernels_of(lambda a: a.softmax(-1), x)] == [["softmax"]]
    assert [k.ops for k in kernels_of(lambda a: a.log_softmax(-1), x)] == [["log_softmax"]]
    assert len(kernels_of(CHAINS["ten_ops"], x, x, x)) == 1
    w = jt.randn(128)
    assert len(kernels_of(lambda a, b, w: a * (1 - w) + b * w, x, x, w)) == 1


def test_external_ops_split_kernels_and_still_match():
    x, w, b = jt.randn(8, 16), jt.randn(16, 4), jt.randn(4)
    low = jt.compile(lambda x, w, b: (x @ w + b).relu()).lower(x, w, b)
    assert [k.ops for k in low.kernels] == [["add", "relu"]]
    assert any("matmul" in repr(step) for step in low.steps)
    assert_matches(jt.compile(lambda x, w, b: (x @ w + b).relu())(x, w, b), (x @ w + b).relu())


def test_lowered_kernels_expose_ir_and_assembly():
    k = kernels_of(lambda a: (a * 2 + 1).exp(), jt.ones(1024))[0]
    # vectorised at the selected CPU's width: 4 floats with SSE (the x86-64-v2 baseline), 8 with AVX2, 16 with AVX-512
    assert "define" in k.llvm_ir and re.search(r"<(4|8|16) x float>", k.llvm_ir)
    assert "ret" in k.asm


# the functions LLVM's cost model vectorised narrower than the registers or not at all on the x86-64-v2 baseline
# (float32 exp at 2 lanes; float32 erf, atan and float64 exp, sin, cos scalar), and two it did not
FULL_WIDTH = {"exp": lambda a: a.exp(), "erf": lambda a: a.erf(), "sin": lambda a: a.sin(),
              "atan": lambda a: a.atan(), "tanh": lambda a: a.tanh(), "pow": lambda a: a.pow(a + 1)}


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_math_kernels_vectorise_at_the_targets_full_width(dtype):
    """A kernel of math functions is vectorised at the selected CPU's full register width, whatever LLVM's cost
    model prices its operations at on that CPU (`CpuTarget.module_text`): 4 floats or 2 doubles with SSE, 8/4
    with AVX, 16/8 with AVX-512; its one loop carries the width (a reduction and plain arithmetic, none)."""
    from jitorch.codegen.machine import selected
    from jitorch.codegen.target import vector_bits
    lanes = vector_bits(selected()) // (32 if dtype is jt.float32 else 64)
    scalar = "float" if dtype is jt.float32 else "double"
    x = jt.rand(4099, dtype=dtype)
    for name, fn in FULL_WIDTH.items():
        (k,) = kernels_of(fn, x)
        source = k._kernel.source.llvm_ir
        assert re.findall(r'!"llvm.loop.vectorize.width", i32 (\d+)', source) == [str(lanes)], name
        assert source.count("!llvm.loop ") == 1, name
        assert {int(w) for w in re.findall(rf"<(\d+) x {scalar}>", k.llvm_ir)} == {lanes}, name
    # (a reduction's run loop carries `kernel.RUN_LOOP`'s metadata, no width)
    for fn in (lambda a: a.exp().sum(), lambda a: a * 2 + 1):
        assert "llvm.loop.vectorize.width" not in kernels_of(fn, x)[0]._kernel.source.llvm_ir
    assert "llvm.loop" not in kernels_of(lambda a: a * 2 + 1, x)[0]._kernel.source.llvm_ir


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_kernels_at_full_width_compute_the_bits_of_llvms_own_choice(dtype):
    """Every lane computes what a scalar would: the compiled kernels (full width, a tail of 4099 % lanes
    elements) give the bits of the same functions compiled with LLVM's own choice of width (test_mathlib's)."""
    from tests.codegen.test_mathlib import compiled, sample
    rng = np.random.default_rng(11)
    for name, fn in FULL_WIDTH.items():
        x = sample(name, dtype, rng, 4099)
        got = jt.compile(fn)(jt.tensor(x)).numpy()
        want = compiled(name, dtype)(x, x + 1) if name == "pow" else compiled(name, dtype)(x)
        np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"), err_msg=name)


def test_vector_bits_of_machines():
    from jitorch.codegen.machine import Machine, parse
    from jitorch.codegen.target import vector_bits
    assert [vector_bits(parse(cpu)) for cpu in ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")] == [128, 128, 256,
                                                                                                    512]
    assert vector_bits(parse("x86-64-v4,-avx512f")) == 256
    assert vector_bits(Machine("aarch64-unknown-linux-gnu", "generic", "+neon")) == 128
    assert vector_bits(Machine("riscv64-unknown-linux-gnu", "generic-rv64", "+v")) is None


def test_outputs_are_fresh_and_never_alias_inputs():
    f = jt.compile(lambda a: a * 1)
    x = jt.ones(4)
    r1, r2 = f(x), f(x)
    assert r1.untyped_storage() is not r2.untyped_storage()
    assert r1.untyped_storage() is not x.untyped_storage()


def test_explain_lists_kernels_and_their_ops():
    text = str(jt.explain(lambda a, b: (a * b).sum(1), jt.ones(4, 4), jt.ones(4, 4)))
    assert "kernels: 1" in text and "mul, sum" in text


SNIPPET = """
import jitorch as jt
f = jt.compile(lambda x: (x * 3 + 1).relu())
print(f(jt.arange(-2.0, 2.0)).tolist())
"""


@pytest.mark.cpu_independent
def test_disk_cache_serves_a_second_process(tmp_path):
    env = dict(os.environ, JITORCH_CACHE_DIR=str(tmp_path), JITORCH_LOGS="codegen")
    first = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
    second = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
    assert "compiled" in first.stderr and "from the kernel cache" in second.stderr
    assert first.stdout == second.stdout == "[0.0, 0.0, 1.0, 4.0]\n"
    for entry in tmp_path.rglob("*.jitk"):
        entry.write_bytes(entry.read_bytes()[:20])  # corrupt every entry: the next process rebuilds
    third = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
    assert "compiled" in third.stderr and third.stdout == first.stdout


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "amin"])
def test_large_full_reductions_split_in_parts_match_eager(name, monkeypatch):
    x = jt.randn(300_001, dtype=jt.float64) * (1e-3 if name == "prod" else 1)
    x[12345] = float("nan") if name in ("amax", "amin") else x[12345]
    f = jt.compile(lambda t: getattr(t, name)())
    assert f.lower(x).kernels[0]._kernel.source.split is not None
    got = f(x)
    monkeypatch.setenv("JITORCH_NUM_THREADS", "1")
    assert_matches(got, getattr(x, name)(), name)
    assert got.item() == f(x).item() or np.isnan(got.item())  # the same parts whatever the threads


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "prod"])
def test_reductions_over_leading_dims_with_prologue_outputs(name):
    x = jt.randn(33, 7, 16, dtype=jt.float64)

    def fn(t):
        d = jt.where(t > 0, t * 2, t / 3)
        return getattr(d, name)(0), d

    compiled = jt.compile(fn)
    assert len(compiled.lower(x).kernels) == 1
    assert_matches(compiled(x), fn(x), name)


def windows_matmul(x, w):
    """A convolution's shape of work: the overlapping windows of ``x`` (one strided view), merged by a
    reshape, which must copy them, then a product."""
    n, c, h, wd = x.shape
    cols = x.as_strided((n, c, 3, 3, h - 2, wd - 2), (c * h * wd, h * wd, wd, 1, wd, 1)).reshape(n, c * 9, -1)
    return w @ cols


@given(n=st.integers(1, 3), c=st.integers(1, 3), h=st.integers(3, 7), dtype=st.sampled_from([jt.float32, jt.float64]))
def test_a_reshape_that_must_copy_a_strided_view_is_a_copy_kernel(n, c, h, dtype):
    rng = np.random.default_rng(h)
    x = jt.from_numpy(random_array((n, c, h, h + 1), dtype, rng))
    w = jt.from_numpy(random_array((2, c * 9), dtype, rng))
    fn = jt.compile(windows_matmul)
    low = fn.lower(x, w)
    (copy,) = low.kernels
    assert copy.ops[0] == "as_strided" and len(copy.ops) == 2 and "_view" in copy.name
    assert_matches(fn(x, w), windows_matmul(x, w))


def test_views_that_need_no_copy_stay_tensor_headers():
    fn = jt.compile(lambda x, w: x.t()[1:] @ w)
    x, w = jt.randn(4, 3), jt.randn(4, 2)
    low = fn.lower(x, w)
    assert low.kernels == [] and "eager: t, slice" in str(jt.explain(fn, x, w)).replace("slice.Tensor", "slice")
    assert_matches(fn(x, w), x.t()[1:] @ w)


@pytest.mark.filterwarnings("error")
def test_bfloat16_comparisons_and_classifications_compile():
    # kernels carry bfloat16 as its bits: a comparison must read the float32 it widens to
    x = jt.tensor([1.0, float("nan"), 2.0, float("inf"), -float("inf"), 0.5], dtype=jt.bfloat16)

    def f(a):
        return (a != a.flip(0)) | a.isnan(), a.isinf(), a.isfinite(), a > 1, a.where(a > 1, a * 0)
    fn = jt.compile(f)
    (kernel,) = fn.lower(x).kernels
    assert {"ne", "isnan", "isinf", "isfinite", "gt"} <= set(kernel.ops)
    assert_matches(fn(x), f(x))


@pytest.mark.parametrize("fn", [
    lambda x: x.t().reshape(4, 6).detach(),                 # how a traced backward hands out a .grad
    lambda x: x.t().reshape(4, 6).detach() + 1,
    lambda x: x.t().as_strided((3, 4), (4, 1), 2) * 2,
    lambda x: x[1:].as_strided((2, 5), (5, 1), 1) - x[0, :5],
])
def test_as_strided_of_a_strided_view_reads_the_views_elements_in_order(fn):
    # as_strided of a graph value addresses the value's elements in row-major order, not its root's storage
    x = jt.arange(24.0).reshape(4, 6)
    assert_matches(jt.compile(fn)(x), fn(x))


def test_grouped_transposed_convolution_trains_compiled_as_eager():
    # its weight gradient goes through a reshape that copies a transposed value (found by review)
    def grads(compiled):
        jt.manual_seed(0)
        conv = jt.nn.ConvTranspose2d(4, 6, 3, groups=2)
        x = jt.randn(2, 4, 5, 5)

        def step(x):
            loss = conv(x).square().mean()
            loss.backward()
            return loss
        (jt.compile(step) if compiled else step)(x)
        return conv.weight.grad

    np.testing.assert_allclose(grads(True).numpy(), grads(False).numpy(), rtol=1e-5, atol=1e-6)


def test_half_kernels_round_operands_of_another_dtype_as_eager():
    # a number or int tensor added to halves is cast to the half type first (x + 1e5 is inf, not 40000);
    # a number multiplier stays float32; a bfloat16 comparison rounds the number it compares with
    x = jt.tensor([0.5, -60000.0, 3.0, 0.1], dtype=jt.float16)
    ints = jt.tensor([70000, 70000, 1, 1])

    def f(a, i):
        return a + 1e5, a * 1e5, a + i, jt.fmod(a, 1e-8), a.bfloat16() == 0.1
    fn = jt.compile(f)
    (kernel,) = fn.lower(x, ints).kernels
    assert {"add", "mul", "fmod", "eq"} <= set(kernel.ops)
    got, want = fn(x, ints), f(x, ints)
    assert got[0].tolist()[1] == float("inf") and got[1].tolist()[1] == -float("inf") and got[4].tolist()[3]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.float().numpy(), w.float().numpy())


@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any_over_an_empty_dim_list_compile_to_an_elementwise_test_not_a_full_reduction(name):
    x = jt.tensor([[1.5, 0.0], [2.0, -3.0]])
    fn = lambda a: getattr(a * 2, name)(())  # noqa: E731
    low = jt.compile(fn).lower(x)
    assert not any(name in k.ops for k in low.kernels) and any(name in repr(step) for step in low.steps)
    assert jt.compile(fn)(x).tolist() == fn(x).tolist() == [[True, False], [True, True]]
    assert [name] in [k.ops[-1:] for k in kernels_of(lambda a: getattr(a * 2, name)(1), x)]

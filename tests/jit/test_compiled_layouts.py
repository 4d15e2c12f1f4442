"""Compiled and interpreted calls return new tensors laid out as eager's (whose layouts are torch's): a
pointwise result in its operands' memory order, a copy in its input's, a view of such a result at eager's
offset and strides. Kernels read a permuted input in place and write a laid-out result through its strides,
so the kernels are those of a contiguous call."""

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit.executor import KernelStep
from tests.support import MEMORY_LAYOUTS, laid_out, tensor_geometry


def _product_rows(T, x, y):
    """Fuzz seed 1000003: a product over the rows of a permuted input, and a row of it."""
    v = x[0] * 0
    for i in range(x.shape[0]):
        v = v * x[i]
    return v, v[1, :]


def _indexed_comparison(T, x, y):
    """Fuzz seed 3001058: an index of a comparison with an index of a permuted input."""
    first = x[:1]
    return (first.greater_equal(first[T.tensor([-1, 0, -1, 0])])[T.tensor([1, -3, -1])],)


def _out_tensor(T, x, y):
    out = T.zeros(x.shape)
    T.exp(x, out=out)
    return out


def _written_result(T, x, y):
    r = x * 2
    r.add_(1)
    return r


# name -> f(T, x, y): x in the layout under test, y contiguous; returns a tuple of tensors
FUNCTIONS = {
    "pointwise chain": lambda T, x, y: (x * 2 + 1,),
    "laid out times contiguous": lambda T, x, y: (x * y, y * x),
    "broadcast row": lambda T, x, y: (x + y[0],),
    "transposed view of a contiguous input": lambda T, x, y: (y.transpose(-1, -2).exp(),),
    "cast": lambda T, x, y: (x.double(),),
    "zeros_like": lambda T, x, y: (T.zeros_like(x),),
    "reduction epilogue": lambda T, x, y: (x - x.mean(-1, keepdim=True),),
    "reduction": lambda T, x, y: (x.sum(1),),
    "softmax": lambda T, x, y: (x.softmax(-1),),
    "row of a product": lambda T, x, y: ((x * y)[1],),
    "a result and its row": lambda T, x, y: (lambda r: (r, r[1]))(x.abs()),
    "product over rows": _product_rows,
    "out= tensor": lambda T, x, y: (_out_tensor(T, x, y),),
    "advanced index": lambda T, x, y: (x[T.tensor([2, 0, 2])], x[:, T.tensor([[1], [3]])]),
    "index of a comparison": _indexed_comparison,
    "written result": lambda T, x, y: (_written_result(T, x, y),),
}
SHAPE = (3, 4, 2)


def _inputs(T, layout):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    return laid_out(T, layout, a), T.tensor(b)


def _sharing(outputs):
    """Which outputs share memory with an earlier one."""
    ptrs = [t.untyped_storage().data_ptr() for t in outputs]
    return [ptrs.index(p) for p in ptrs]


@pytest.mark.parametrize("layout", MEMORY_LAYOUTS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_compiled_and_interpreted_strides_are_eagers_and_torchs(name, layout):
    fn = FUNCTIONS[name]
    eager = fn(jt, *_inputs(jt, layout))
    want = fn(torch, *_inputs(torch, layout))
    assert [tensor_geometry(t) for t in eager] == [tensor_geometry(t) for t in want]
    for backend in ("llvm", "interpreter"):
        compiled = jt.compile(lambda x, y: fn(jt, x, y), backend=backend)
        for _ in range(2):  # the call that traces and one that reuses the graph
            got = compiled(*_inputs(jt, layout))
            assert [tensor_geometry(t) for t in got] == [tensor_geometry(t) for t in eager], backend
            assert _sharing(got) == _sharing(eager), backend
            for g, e in zip(got, eager):
                np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", MEMORY_LAYOUTS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_laid_out_inputs_compile_to_the_kernels_of_contiguous_ones(name, layout):
    fn = FUNCTIONS[name]

    def plan(layout):
        """The steps, less views made as tensor headers (a result returned with a view of it is
        returned over its memory's base, which for a permuted layout is a permute of the result)."""
        lowered = jt.compile(lambda x, y: fn(jt, x, y)).lower(*_inputs(jt, layout))
        return [(type(s).__name__, getattr(s, "nodes", None) and [n.op.name for n in s.nodes])
                for s in lowered.steps if not (getattr(s, "geometry", None) and s.reason == "view")]
    assert plan(layout) == plan("contiguous")


def test_a_permuted_input_is_read_in_place_and_its_result_written_in_its_order():
    """No copy at either end: the kernel reads the input's memory and writes the output's in one order."""
    x, y = _inputs(jt, "permuted")
    executable = jt.compile(lambda x: x * 2 + 1).lower(x).executable
    (step,) = executable.steps
    assert isinstance(step, KernelStep) and not executable._checked
    assert executable.layouts == {executable.graph.inputs[0]: x.stride(), step.outputs[0]: x.stride()}
    assert '"l0"' in step.kernel.source.llvm_ir and '"l1"' not in step.kernel.source.llvm_ir  # one flat loop
    out = jt.compile(lambda x: x * 2 + 1)(x)
    assert out.stride() == x.stride()


def test_the_softmax_kernel_reads_a_compact_copy_of_a_laid_out_value():
    """The row softmax kernel reads contiguous rows: of a permuted input, or of a result returned in its
    operands' order, it reads a compact copy, and the returned result keeps its layout."""
    x, _ = _inputs(jt, "permuted")
    fn = jt.compile(lambda x: ((x * 2).softmax(-1), x * 2))
    steps = fn.lower(x).steps
    assert [s.kernel.source.kind for s in steps] == ["pointwise", "softmax"]
    assert steps[1].compacted == {steps[0].outputs[0]}
    soft, doubled = fn(x)
    assert doubled.stride() == (x * 2).stride() == x.stride()
    np.testing.assert_allclose(soft.numpy(), (x * 2).softmax(-1).numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", ["llvm", "interpreter"])
def test_an_index_of_a_contiguous_input_whose_size1_dims_have_other_strides_is_laid_out_as_eagerly(backend):
    """Fuzz seed 2200028: the graph traced for a contiguous input served one whose size-1 dims have other
    strides (contiguous too, so the same graph), which turned eager's order of the index result; eager counts
    a contiguous tensor with contiguous strides. Each layout is its own cache entry (a compiled call keys inputs
    by their exact strides: copies and pointwise results keep a size-1 dim's stride, tests/ops/test_trust46.py)."""
    def fn(x):
        return x[..., None, -1].squeeze(0).unsqueeze(1)[:, [0, 0, 0]]
    compiled = jt.compile(fn, backend=backend)
    for strides in [(2, 1, 1), (1, 1, 2), (2, 1, 2)]:
        x = jt.arange(8.0).as_strided((1, 2, 1), strides)
        got, want = compiled(x), fn(x)
        assert tensor_geometry(got) == tensor_geometry(want) == ((2, 3, 1), (3, 1), 0)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert len(compiled.cache) == 3

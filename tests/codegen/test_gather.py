"""Index ops in generated kernels: gather and index_select as indexed loads fused with their consumers, arange
as an index expression (jitorch/codegen/kernel.py's `_Builder` gathers and ranges, lowering.Gather and
lowering.Index); their indices checked before the kernel runs, with eager's (torch's) errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.jit import plan_cache
from jitorch.jit.executor import EagerStep, KernelStep
from jitorch.codegen.kernel import generator_fingerprint
from jitorch.ir.graph import Graph

INDEX_OPS = {"gather", "index_select", "arange"}


def _steps(compiled, *args):
    """(the kernels' op lists, the eager steps' op lists) of ``compiled``'s plan for ``args``."""
    steps = compiled.lower(*args).executable.steps
    kernels = [[n.op.name for n in s.nodes] for s in steps if isinstance(s, KernelStep)]
    eager = [[n.op.name for n in s.nodes] for s in steps if isinstance(s, EagerStep)]
    return kernels, eager


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _no_eager_index_ops(eager):
    return not INDEX_OPS & {op for ops in eager for op in ops}


@pytest.mark.parametrize("padding_idx", [None, 2])
def test_an_embedding_fuses_into_the_kernel_of_its_consumers(padding_idx):
    """Token and position embeddings summed (a language model's input): the row picks and the arange of the
    positions are in the kernel of the sum and its scaling; eager's bits, torch's values."""
    def f(lib, tok, pos, idx):
        positions = lib.arange(idx.shape[1])
        x = lib.nn.functional.embedding(idx, tok, padding_idx=padding_idx) + \
            lib.nn.functional.embedding(positions, pos)
        return x * 0.5 - 1.0

    rng = np.random.default_rng(0)
    tok, pos = rng.standard_normal((11, 8)).astype(np.float32), rng.standard_normal((7, 8)).astype(np.float32)
    idx = rng.integers(0, 11, (3, 7))
    ours = (jt.from_numpy(tok), jt.from_numpy(pos), jt.from_numpy(idx))
    compiled = jt.compile(f)
    kernels, eager = _steps(compiled, jt, *ours)
    assert _no_eager_index_ops(eager), eager
    # (with a padding row, the picked rows feed a where whose result is reshaped: a view of a value computed in
    # a kernel, which starts the next)
    picks = [ops for ops in kernels if "index_select" in ops]
    assert sum(ops.count("index_select") for ops in picks) == 2 and len(picks) == (1 if padding_idx is None else 2)
    assert {"arange", "index_select", "add", "mul", "sub"} <= set(picks[-1])
    got = compiled(jt, *ours)
    assert _bits_equal(got.numpy(), f(jt, *ours).numpy())
    expected = f(torch, torch.from_numpy(tok), torch.from_numpy(pos), torch.from_numpy(idx))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_index_select_along_each_dim_of_a_strided_source_is_eagers(dim, index_dtype):
    """index_select of a permuted source (read through its strides) along every dim, by int64 and int32 indices
    with repeats, fused with a pointwise consumer: eager's bits and torch's values."""
    def f(lib, x, index):
        return lib.index_select(x.permute(2, 0, 1), dim, index) * 3.0 + 1.0

    rng = np.random.default_rng(dim + 5)
    x = rng.standard_normal((4, 5, 6))
    n = (6, 4, 5, 5)[dim]
    index = rng.integers(0, n, 9).astype(index_dtype)
    index[:3] = n - 1
    compiled = jt.compile(f)
    kernels, eager = _steps(compiled, jt, jt.from_numpy(x), jt.from_numpy(index))
    assert _no_eager_index_ops(eager) and kernels == [["permute", "index_select", "mul", "add"]], (kernels, eager)
    got = compiled(jt, jt.from_numpy(x), jt.from_numpy(index)).numpy()
    assert _bits_equal(got, f(jt, jt.from_numpy(x), jt.from_numpy(index)).numpy())
    np.testing.assert_allclose(got, f(torch, torch.from_numpy(x), torch.from_numpy(index)).numpy(), rtol=1e-15)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_along_each_dim_with_an_index_smaller_than_its_source_is_eagers(dim):
    """gather along each dim by an index smaller than the source in every dim (torch allows it), through a view
    of the index (unsqueeze): eager's bits, torch's values."""
    def f(lib, x, index):
        return x.gather(dim, index.unsqueeze(-1).expand(2, 3, 4)).neg()

    rng = np.random.default_rng(dim)
    x = rng.standard_normal((5, 6, 7)).astype(np.float32)
    index = rng.integers(0, x.shape[dim], (2, 3, 1))[..., 0]
    compiled = jt.compile(f)
    kernels, eager = _steps(compiled, jt, jt.from_numpy(x), jt.from_numpy(index))
    assert _no_eager_index_ops(eager) and len(kernels) == 1 and "gather" in kernels[0], (kernels, eager)
    got = compiled(jt, jt.from_numpy(x), jt.from_numpy(index)).numpy()
    assert _bits_equal(got, f(jt, jt.from_numpy(x), jt.from_numpy(index)).numpy())
    assert _bits_equal(got, f(torch, torch.from_numpy(x), torch.from_numpy(index)).numpy())


@pytest.mark.parametrize("ignore_index, label_smoothing", [(-100, 0.0), (3, 0.0), (3, 0.2)])
def test_cross_entropy_and_its_gradient_compiled_are_eagers_and_torchs(ignore_index, label_smoothing):
    """cross_entropy's pick of each target's log-probability (a gather in the loss's reduction kernel) and its
    gradient (the one-hot compare with the positions' arange and their checked index_select, in kernels):
    eager's and torch's values, no index op left as an eager step."""
    def f(lib, logits, target):
        logits = logits.detach().requires_grad_()
        loss = lib.nn.functional.cross_entropy(logits, target, ignore_index=ignore_index,
                                               label_smoothing=label_smoothing)
        loss.backward()
        return loss, logits.grad

    rng = np.random.default_rng(1)
    logits, target = rng.standard_normal((40, 9)).astype(np.float32), rng.integers(0, 9, 40)
    target[:5] = 3
    args = jt.from_numpy(logits), jt.from_numpy(target)
    compiled = jt.compile(f)
    kernels, eager = _steps(compiled, jt, *args)
    assert _no_eager_index_ops(eager), eager
    assert any("gather" in ops for ops in kernels)
    got, eager_result = compiled(jt, *args), f(jt, *args)
    expected = f(torch, torch.from_numpy(logits), torch.from_numpy(target))
    for a, b, c in zip(got, eager_result, expected):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(a.detach().numpy(), c.detach().numpy(), rtol=1e-5, atol=1e-7)


def test_gradients_through_compiled_index_ops_pass_gradcheck():
    """float64 gradients of a compiled function of gather, index_select and an embedding: gradcheck's
    numerical derivatives agree with the backward graph's."""
    rng = np.random.default_rng(2)
    x = jt.from_numpy(rng.standard_normal((4, 5))).requires_grad_()
    w = jt.from_numpy(rng.standard_normal((6, 3))).requires_grad_()
    gi, si, ei = (jt.from_numpy(rng.integers(0, n, shape)) for n, shape in ((5, (4, 2)), (4, 3), (6, (2, 3))))

    @jt.compile
    def f(x, w):
        return (x.gather(1, gi) * 2).sum(1) + x.index_select(0, si).sum() + jt.nn.functional.embedding(
            ei, w, padding_idx=1).sum()

    assert jt.autograd.gradcheck(f, (x, w))


def _raises_before_writing(fn, make_args, error, message):
    """``fn`` compiled raises ``error`` matching ``message`` on the arguments ``make_args()`` gives, and the
    tensor it would update in place (the first argument) is unchanged."""
    args = make_args()
    before = args[0].numpy().copy()
    with pytest.raises(error, match=message):
        jt.compile(fn)(*args)
    assert _bits_equal(args[0].numpy(), before)
    with pytest.raises(error, match=message):  # (eager's error, which is torch's)
        fn(*make_args())


@pytest.mark.parametrize("dim, bad, error, message", [
    (0, 7, IndexError, "index out of range in self"),
    (0, -1, IndexError, "index out of range in self"),
    (1, 5, RuntimeError, "INDICES element is out of DATA bounds, id=5 axis_dim=5"),
    (1, -2, RuntimeError, "INDICES element is out of DATA bounds, id=-2 axis_dim=5"),
])
def test_a_bad_index_select_index_raises_torchs_error_before_the_kernel_writes(dim, bad, error, message):
    def fn(out, x, index):
        out.copy_(x.index_select(dim, index) * 2)
        return out

    def make_args():
        index = jt.tensor([0, 1, bad])
        return jt.zeros(*((3, 5) if dim == 0 else (7, 3))), jt.ones(7, 5), index

    _raises_before_writing(fn, make_args, error, message)
    with pytest.raises(error, match=message):
        torch.ones(7, 5).index_select(dim, torch.tensor([0, 1, bad]))


@pytest.mark.parametrize("bad", [4, -1])
def test_a_bad_gather_index_raises_torchs_error_before_the_kernel_writes(bad):
    def fn(out, x, index):
        out.add_(x.gather(1, index))
        return out

    def make_args():
        return jt.zeros(3, 2), jt.ones(3, 4), jt.tensor([[0, 1], [2, bad], [3, 3]])

    message = f"index {bad} is out of bounds for dimension 1 with size 4"
    _raises_before_writing(fn, make_args, RuntimeError, message)
    with pytest.raises(RuntimeError, match=message):
        torch.ones(3, 4).gather(1, torch.tensor([[0, 1], [2, bad], [3, 3]]))


def test_an_embedding_index_out_of_range_raises_as_eager_does():
    """A token past the table compiled: index_select's error along dim 0 (torch's embedding's too), before the
    kernel runs."""
    f = jt.compile(lambda w, idx: jt.nn.functional.embedding(idx, w) + 1)
    with pytest.raises(IndexError, match="index out of range in self"):
        f(jt.ones(4, 3), jt.tensor([[0, 4]]))
    with pytest.raises(IndexError, match="index out of range in self"):
        torch.nn.functional.embedding(torch.tensor([[0, 4]]), torch.ones(4, 3))


def test_an_arange_is_an_index_expression_and_one_past_the_source_is_checked():
    """An arange read by its consumers' kernel computes its elements there (no eager step, no buffer); an
    arange index past the source (known when the kernel is built) is written by a kernel of its own, whose
    values the pick's kernel checks before it runs, raising eager's error."""
    def f(x, n):
        return x.index_select(0, jt.arange(n)) * 2

    x = jt.from_numpy(np.arange(24.0).reshape(6, 4))
    compiled = jt.compile(f, dynamic=False)
    kernels, eager = _steps(compiled, x, 5)
    assert eager == [] and kernels == [["arange", "index_select", "mul"]], (kernels, eager)
    assert _bits_equal(compiled(x, 5).numpy(), f(x, 5).numpy())
    kernels, eager = _steps(compiled, x, 7)
    assert ["arange"] in kernels and eager == [], (kernels, eager)
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(x, 7)


def test_a_fusion_plan_is_keyed_by_the_code_generators_sources():
    """A plan stored by another code generator (other fusion rules or lowering kinds: before gathers fused, they
    were groups of their own) is not adopted: the key holds the generator's fingerprint."""
    text = plan_cache._graph_text(Graph(), "cpu", printed="graph")
    assert f"generator {generator_fingerprint()}" in text.splitlines()


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_eager_index_select_raises_torchs_error_type_for_each_dim(dim):
    """torch's CPU index_select reports an index out of range along dim 1 (of 2 dims or more) with its value and
    the size, and along any other dim as 'index out of range in self' (an IndexError)."""
    errors = []
    for lib in (jt, torch):
        try:
            lib.zeros(2, 3, 4).index_select(dim, lib.tensor([9]))
        except (IndexError, RuntimeError) as e:
            errors.append((type(e), str(e)))
    assert len(errors) == 2 and errors[0] == errors[1]


def test_avg_pool_of_a_replicate_pad_reads_the_gathered_elements():
    """Regression (tests/nn/test_functional_compile.py's CNN step, after gathers fused): avg_pool2d's windows are
    an as_strided view of the padded value, whose strides address it in row-major order; folded into the gather's
    kernel they were applied to the source's geometry and read other elements (loss 1.47 against 1.57). Such a
    view does not fold into a gather's kernel; fusion keeps it out of the gather's group (no refused group split
    one kernel per node): a kernel per gather, then the windows with their sum."""
    def f(h, F=jt.nn.functional):
        return F.avg_pool2d(F.pad(h, (0, 1, 0, 1), mode="replicate"), 2, stride=1)

    x = jt.from_numpy(np.random.default_rng(0).standard_normal((2, 4, 3, 3)).astype(np.float32))
    compiled = jt.compile(f)
    kernels, eager = _steps(compiled, x)
    windows = ["as_strided", "view", "sum", "true_divide"]
    assert eager == [] and kernels == [["index_select"], ["index_select"], windows], (kernels, eager)
    assert _bits_equal(compiled(x).numpy(), f(x).numpy())
    np.testing.assert_allclose(compiled(x).numpy(), f(torch.from_numpy(x.numpy()), torch.nn.functional).numpy(),
                               rtol=1e-6)

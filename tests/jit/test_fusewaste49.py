"""Kernels the compiled training step wasted (issue 19), compiled: a hand-written RMSNorm step's two row means in two
kernels where one computes both, the GPT MLP's c_proj products run one after the other where they pair, and a kernel
computing a relu twice. What the compiler did (kernels, their ops, product pairs), and the values against eager and
torch in float32 and float64. tests/ir/test_fusewaste49.py has the groups."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import fusion
from jitorch.jit import executor, plan_cache
from jitorch.jit.executor import KernelStep
from tests.support import load_script

DTYPES = [np.float32, np.float64]
IDS = ["float32", "float64"]


@contextlib.contextmanager
def rules(**switches):
    """Fusion with the switches of `fusion` given, the plan cache unused (a plan stored for one rule would be
    adopted under the other)."""
    saved = {name: getattr(fusion, name) for name in switches}, plan_cache.MIN_NODES
    for name, value in switches.items():
        setattr(fusion, name, value)
    plan_cache.MIN_NODES = float("inf")
    try:
        yield
    finally:
        for name, value in saved[0].items():
            setattr(fusion, name, value)
        plan_cache.MIN_NODES = saved[1]


def kernel_ops(fn, *args):
    return [st.kernel.source.ops for st in jt.compile(fn).lower(*args).executable.steps if type(st) is KernelStep]


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def torch_tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def data(*shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def rms_norm(lib, x, w):
    return x * lib.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def rms_norm_step(x, w, c):
    """The step under a loss linear in its output: the gradient reaching it (``c`` times the loss's, computed in
    the graph) does not depend on the forward, so its forward's and its backward's row means are independent."""
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    (rms_norm(jt, x, w) * c).sum().backward()
    return x.grad, w.grad


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
@pytest.mark.parametrize("shape", [(96, 128), (64, 3000)], ids=["short-rows", "streamed-rows"])
def test_an_rms_norm_steps_forward_and_backward_means_share_a_kernel(dtype, shape):
    """Before: three kernels (the forward's mean; the weight's column sum with ``g * w * x`` beside it; the
    backward's row sum): now the two means share one, the column sum reads its result."""
    arrays = data(shape, shape[-1:], shape, seed=1, dtype=dtype)
    args = [jt.tensor(a) for a in arrays]
    with rules():
        ops = kernel_ops(rms_norm_step, *args)
        got = jt.compile(rms_norm_step)(*args)
    with rules(UNTIED_REDUCTIONS=False):
        before = kernel_ops(rms_norm_step, *args)
    assert (len(ops), len(before)) == (2, 3)
    assert (ops[0].count("mean"), ops[0].count("sum"), ops[1].count("sum")) == (1, 1, 1)
    for a, eager in zip(got, rms_norm_step(*args)):
        np.testing.assert_allclose(a.numpy(), eager.numpy(), **tol(dtype))
    tx, tw = (torch.from_numpy(a).requires_grad_() for a in arrays[:2])
    (rms_norm(torch, tx, tw) * torch.from_numpy(arrays[2])).sum().backward()
    for a, oracle in zip(got, (tx.grad, tw.grad)):
        np.testing.assert_allclose(a.numpy(), oracle.numpy(), **torch_tol(dtype))


def mlp(lib, dtype):
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(128, 512), lib.nn.GELU(), lib.nn.Linear(512, 128))
    return model.double() if dtype == np.float64 else model


def mlp_step(model, x, t):
    """The gradients of the parameters and of ``x`` (a layer's input in a model: GPT's MLP reads the residual)."""
    for p in model.parameters():
        p.grad = None
    x = x.detach().requires_grad_()
    ((model(x) - t) ** 2).mean().backward()
    return [p.grad for p in model.parameters()] + [x.grad]


def backward_graph(compiled_module):
    (function,) = compiled_module._by_mode.values()
    (entry,) = [e for e in function.cache.values() if e.split is not None]
    return entry.split.backward


def pairs(graph):
    return [sorted(tuple(n.outputs[0].type.shape) for n in s.nodes) for s in graph.steps
            if isinstance(s, executor.ProductPair)]


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_the_mlps_c_proj_products_run_as_a_pair(dtype):
    """compile(model)'s backward: the second layer's input gradient (768, 512) and weight gradient (128, 512) are
    one pair, the first layer's (768, 128) and (512, 128) another. Before, the GELU the weight gradient reads was
    computed in the kernel of the GELU's backward, which reads the input gradient: the two ran one after the other
    and the first layer's input gradient paired with the second layer's weight gradient."""
    x, t = data((768, 128), (768, 128), seed=2, dtype=dtype)
    with rules():
        compiled = jt.compile(mlp(jt, dtype))
        got = mlp_step(compiled, jt.tensor(x), jt.tensor(t))
        assert pairs(backward_graph(compiled)) == [[(128, 512), (768, 512)], [(512, 128), (768, 128)]]
    with rules(UNTIED_PRODUCTS=False):
        before = jt.compile(mlp(jt, dtype))
        mlp_step(before, jt.tensor(x), jt.tensor(t))
        assert pairs(backward_graph(before)) == [[(128, 512), (768, 128)]]
    for a, eager in zip(got, mlp_step(mlp(jt, dtype), jt.tensor(x), jt.tensor(t))):
        np.testing.assert_allclose(a.numpy(), eager.numpy(), **tol(dtype))
    oracle_model = mlp(torch, dtype)
    with torch.no_grad():
        for theirs, ours in zip(oracle_model.parameters(), mlp(jt, dtype).parameters()):
            theirs.copy_(torch.from_numpy(ours.detach().numpy()))
    for a, oracle in zip(got, mlp_step(oracle_model, torch.from_numpy(x), torch.from_numpy(t))):
        np.testing.assert_allclose(a.numpy(), oracle.numpy(), **torch_tol(dtype))


def dispatch_graph(x, w):
    h = (x @ w).relu()
    return h.sum(0), (h * 3 + 1).exp().softmax(-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_a_kernel_computes_the_relu_once_for_a_column_sum_and_its_siblings(dtype):
    """The column sum's recompute copy of the relu and the original its pointwise siblings read were both in its
    kernel: ``relu, relu, sum, ...``."""
    x, w = data((64, 48), (48, 32), seed=3, dtype=dtype)
    args = jt.tensor(x), jt.tensor(w)
    with rules():
        assert kernel_ops(dispatch_graph, *args) == [["relu", "sum", "mul", "add", "exp"], ["softmax"]]
        got = jt.compile(dispatch_graph)(*args)
    with rules(MERGE_REPEATS=False):
        assert kernel_ops(dispatch_graph, *args)[0] == ["relu", "relu", "sum", "mul", "add", "exp"]
    for a, eager in zip(got, dispatch_graph(*args)):
        np.testing.assert_allclose(a.numpy(), eager.numpy(), **tol(dtype))
    for a, oracle in zip(got, dispatch_graph(torch.from_numpy(x), torch.from_numpy(w))):
        np.testing.assert_allclose(a.numpy(), oracle.numpy(), **torch_tol(dtype))


def test_the_benchmark_counts_the_pairs_a_compiled_gpts_backward_gains():
    """benchmarks/multiout.py --forms 49 --system "jitorch.compile(model)" at --quick sizes: gpt-1x32's backward
    graph, built with and without the rules in one process, pairs its MLP's c_proj products (one pair more), for a
    GELU kernel more that reads c_fc's saved product again."""
    bench = load_script(Path(__file__).parents[2] / "benchmarks" / "multiout.py", "multiout_benchmark")
    calls = bench.built("gpt-1x32", 1, quick=True, forms="49", system="jitorch.compile(model)")
    (with_kinds, with_bytes, _, with_pairs), (without_kinds, without_bytes, _, without_pairs) = (
        bench.kernel_traffic(calls[k]) for k in ("with", "without"))
    assert with_pairs - without_pairs == 1
    assert with_kinds["pointwise"] - without_kinds["pointwise"] == 1
    assert with_kinds["reduction"] == without_kinds["reduction"] and with_bytes > without_bytes
    assert fusion.UNTIED_PRODUCTS and fusion.UNTIED_REDUCTIONS and fusion.MERGE_REPEATS  # (put back)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (3, 4)])
def test_a_repeat_on_another_side_of_a_reduction_stays_0d_std_next_to_exp(shape):
    """A group's input side and epilogue are loops of their own: merge_repeats dropped a 0-d std's epilogue copy
    of ``x * 2`` (the shapes agree where nothing is reduced) for the input side's, and the kernel failed to build
    (KeyError: %x; tests/jit/test_compiled_warnings.py's std_next_to_other_ops found it in the full suite)."""
    fn = lambda T, x: ((x * 2).std(), (x * 2).exp())  # noqa: E731
    x = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape).astype(np.float32)
    with rules(), np.errstate(invalid="ignore"), pytest.warns(UserWarning) if x.size <= 1 else contextlib.nullcontext():
        got = jt.compile(lambda t: fn(jt, t))(jt.tensor(x))
    with torch.no_grad(), pytest.warns(UserWarning) if x.size <= 1 else contextlib.nullcontext():
        want = fn(torch, torch.tensor(x))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, equal_nan=True)

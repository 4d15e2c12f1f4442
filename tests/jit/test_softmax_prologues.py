"""A row softmax's pointwise prologue (a bias add, an attention's scale and causal mask) fused into its softmax
kernel (`executor.softmax_prologues`, `kernel.build_softmax`): one kernel instead of two, the prologue's value
never written, the result bit for bit what the separate kernels gave, and torch's within float rounding."""

from __future__ import annotations

import platform

import re

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.codegen import cpu
from jitorch.codegen.machine import missing_features, parse
from jitorch.jit import executor
from jitorch.jit.executor import EagerStep, KernelStep


def _kernels(fn, *args):
    """The ops of each kernel of ``fn``'s compiled graph, and the eager steps' ops, in order."""
    ex = jt.compile(fn).lower(*args).executable
    kernels = [list(step.kernel.source.ops) for step in ex.steps if isinstance(step, KernelStep)]
    eager = [n.op.name for step in ex.steps if isinstance(step, EagerStep) for n in step.nodes]
    return ex, kernels, eager


def _unfused(fn, *args, monkeypatch):
    """``fn(*args)`` compiled with the prologues left as kernels of their own (the behaviour before; a bias add
    left so is not folded into its product either: `executor.fold_biases_into_products`)."""
    with monkeypatch.context() as m:
        m.setattr(executor, "softmax_prologues", lambda graph, groups: groups)
        m.setattr(executor, "fold_biases_into_products", lambda graph, steps, layouts: steps)
        ex, kernels, _ = _kernels(fn, *args)
        return ex.run(list(args)), kernels


def _decoder(x, w, b):
    return jt.nn.functional.log_softmax(x @ w + b, dim=-1)


def _attention(q, k, mask):
    att = (q @ k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
    att = att.masked_fill(mask == 0, float("-inf"))
    return jt.nn.functional.softmax(att, dim=-1)


@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_a_bias_add_runs_inside_the_log_softmax_kernel(dtype, monkeypatch):
    g = jt.Generator().manual_seed(0)
    x, w, b = (jt.randn(*s, generator=g, dtype=dtype) * 3 for s in ((37, 20), (20, 101), (101,)))
    ex, kernels, eager = _kernels(_decoder, x, w, b)
    assert kernels == [["add", "log_softmax"]] and eager == ["matmul"]
    assert [s.kernel.source.kind for s in ex.steps if isinstance(s, KernelStep)] == ["softmax"]
    out = ex.run([x, w, b])
    before, kernels_before = _unfused(_decoder, x, w, b, monkeypatch=monkeypatch)
    assert kernels_before == [["add"], ["log_softmax"]]
    assert np.array_equal(out.numpy(), before.numpy())
    ref = torch.log_softmax(torch.from_numpy(x.numpy()) @ torch.from_numpy(w.numpy()) + torch.from_numpy(b.numpy()), -1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5 if dtype is jt.float32 else 1e-12, atol=1e-5)


@pytest.mark.parametrize("heads,t", [(3, 16), (1, 7), (4, 33)])
def test_an_attention_scale_and_causal_mask_run_inside_the_softmax_kernel(heads, t, monkeypatch):
    """The mask broadcasts over batch and heads (rows indexed through the leading dims), its rows are a slice
    of a larger buffer (row stride 40, not t), and masked positions are -inf."""
    g = jt.Generator().manual_seed(1)
    q, k = jt.randn(2, heads, t, 8, generator=g), jt.randn(2, heads, t, 8, generator=g)
    mask = jt.tril(jt.ones(40, 40)).view(1, 1, 40, 40)[:, :, :t, :t]
    ex, kernels, _ = _kernels(_attention, q, k, mask)
    assert kernels == [["mul", "eq", "masked_fill", "softmax"]]  # (the mask's == 0 too: the mask is an input)
    out = ex.run([q, k, mask])
    before, kernels_before = _unfused(_attention, q, k, mask, monkeypatch=monkeypatch)
    assert kernels_before == [["mul", "eq", "masked_fill"], ["softmax"]]
    assert np.array_equal(out.numpy(), before.numpy())
    tq, tk, tm = (torch.from_numpy(a.numpy()) for a in (q, k, mask))
    ref = torch.softmax((tq @ tk.transpose(-2, -1) / 8 ** 0.5).masked_fill(tm == 0, float("-inf")), -1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)


def _targets():
    """The CPUs a kernel compiled in this process may be made for and run on: this host ("", native) and the
    x86-64 levels it can run (JITORCH_CPU's names)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return [""]
    return [""] + [name for name in ("x86-64-v2", "x86-64-v3") if not missing_features(parse(name))]


def _for_cpu(name, monkeypatch, fn):
    """``fn()`` with the CPU backend compiling for ``name`` (JITORCH_CPU) from here on (its JIT made afresh;
    compiled kernels are keyed by the target they were made for)."""
    with monkeypatch.context() as m:
        m.setenv("JITORCH_CPU", name)
        m.setattr(cpu, "_state", {})
        return fn()


@pytest.mark.cpu_independent
@pytest.mark.parametrize("heads,t", [(3, 16), (4, 33)])
def test_the_attention_softmax_sums_its_rows_in_one_order_fused_or_not_on_every_target(heads, t, monkeypatch):
    """Seed 1, the attention test's case. For the x86-64-v2 baseline LLVM vectorised the kernel's sum of
    exponentials (a reassociable sum) 4 lanes by 2 with the scale and mask in its loop and 2 by 2 without: 92
    elements of row 12 differed by an ulp between the fused and unfused kernels. The sum's order is now
    jitorch's (`codegen.lanes`): the same bits fused or not, for every CPU this host can run."""
    g = jt.Generator().manual_seed(1)
    q, k = jt.randn(2, heads, t, 8, generator=g), jt.randn(2, heads, t, 8, generator=g)
    mask = jt.tril(jt.ones(40, 40)).view(1, 1, 40, 40)[:, :, :t, :t]
    results = {}
    for name in _targets():
        def run():
            ex, kernels, _ = _kernels(_attention, q, k, mask)
            assert kernels == [["mul", "eq", "masked_fill", "softmax"]]
            assert cpu.target_id() == cpu._init()["machine"].id() and (not name or f"|{name}|" in cpu.target_id())
            return ex.run([q, k, mask]).numpy(), _unfused(_attention, q, k, mask, monkeypatch=monkeypatch)[0].numpy()
        results[name or "native"] = _for_cpu(name, monkeypatch, run)
    first = results["native"][0]
    assert all(a.tobytes() == first.tobytes() for pair in results.values() for a in pair), list(results)


@pytest.mark.cpu_independent
@pytest.mark.parametrize("dtype", [jt.float32, jt.float64])
def test_softmax_kernels_give_the_same_bits_on_every_target(dtype, monkeypatch):
    """Widths with and without a last partial vector of the sum's lanes (16 float32, 8 float64), shorter than
    one, and long; softmax and log_softmax, with and without a prologue."""
    F = jt.nn.functional
    fns = [lambda x, b: F.softmax(x, -1), lambda x, b: F.log_softmax(x, -1),
           lambda x, b: F.softmax(x * 0.3 + b, -1), lambda x, b: F.log_softmax(x + b, -1)]
    inputs = []
    for cols in (1, 7, 16, 19, 33, 100, 1003):
        g = jt.Generator().manual_seed(cols)
        inputs.append((jt.randn(5, cols, generator=g, dtype=dtype) * 4, jt.randn(cols, generator=g, dtype=dtype)))
    results = {name: _for_cpu(name, monkeypatch, lambda: [jt.compile(f)(x, b).numpy().tobytes()
                                                          for x, b in inputs for f in fns])
               for name in _targets()}
    assert all(r == results[""] for r in results.values())


def test_a_prologue_value_read_elsewhere_stays_its_own_kernel():
    g = jt.Generator().manual_seed(2)
    x, w, b = jt.randn(5, 4, generator=g), jt.randn(4, 9, generator=g), jt.randn(9, generator=g)

    def both(x, w, b):
        y = x @ w + b
        return jt.nn.functional.log_softmax(y, dim=-1), y
    _, kernels, _ = _kernels(both, x, w, b)
    assert ["log_softmax"] in kernels and ["add", "log_softmax"] not in kernels


def test_a_training_step_through_a_fused_attention_softmax_matches_torch():
    """Gradients flow through the fused kernel's output (softmax's backward reads it), as in a GPT step."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 12, 8), (2, 2, 12, 8))]
    mask = np.tril(np.ones((12, 12), np.float32))[None, None]

    def step(lib, q, k, m):
        loss = (lib.nn.functional.softmax((q @ k.transpose(-2, -1) * 0.3).masked_fill(m == 0, float("-inf")), -1)
                * lib.arange(12.0)).sum()
        loss.backward()
        return loss
    q, k = (jt.tensor(a, requires_grad=True) for a in arrays)
    tq, tk = (torch.tensor(a, requires_grad=True) for a in arrays)
    _, kernels, _ = _kernels(lambda q, k, m: step(jt, q, k, m), q, k, jt.tensor(mask))
    assert ["mul", "masked_fill", "softmax"] in kernels  # (the mask's == 0 is saved for the backward)
    q.grad = k.grad = None
    loss = jt.compile(lambda q, k, m: step(jt, q, k, m))(q, k, jt.tensor(mask))
    ref = step(torch, tq, tk, torch.tensor(mask))
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
    for a, b in ((q, tq), (k, tk)):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)


def _decoder_3d(x, w, b):
    """A word language model's decoder: the projection over (time, batch) rows, reshaped to rows of logits."""
    return jt.nn.functional.log_softmax((x @ w + b).view(-1, w.shape[1]), dim=1)


def test_a_bias_add_reshaped_before_the_log_softmax_runs_inside_its_kernel(monkeypatch):
    g = jt.Generator().manual_seed(4)
    x, w, b = jt.randn(7, 5, 12, generator=g), jt.randn(12, 30, generator=g), jt.randn(30, generator=g)
    ex, kernels, eager = _kernels(_decoder_3d, x, w, b)
    assert kernels == [["add", "view", "log_softmax"]] and eager == ["matmul"]
    out = ex.run([x, w, b])
    before, kernels_before = _unfused(_decoder_3d, x, w, b, monkeypatch=monkeypatch)
    assert kernels_before == [["add"], ["log_softmax"]]  # (the view: a tensor header between them)
    assert np.array_equal(out.numpy(), before.numpy())
    ref = torch.log_softmax((torch.from_numpy(x.numpy()) @ torch.from_numpy(w.numpy())
                             + torch.from_numpy(b.numpy())).view(-1, 30), 1)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_a_transpose_before_the_softmax_keeps_the_prologue_apart():
    """A view that reorders elements is no reshape: the prologue's value stays in memory."""
    g = jt.Generator().manual_seed(5)
    x, b = jt.randn(6, 9, generator=g), jt.randn(9, generator=g)
    _, kernels, _ = _kernels(lambda x, b: jt.nn.functional.softmax((x * 2 + b).t(), dim=-1), x, b)
    assert ["softmax"] in kernels and not any("softmax" in k and len(k) > 1 for k in kernels)


@pytest.mark.parametrize("cols,wide", [(33, False), (64, True), (1000, True)])
def test_the_softmax_kernel_sums_without_reassociation_and_wide_rows_get_the_full_width(cols, wide):
    """No instruction of the kernel may reassociate (its sum is `lanes.ordered_sum`'s); on rows of 4 vectors of
    lanes or more (64 float32) the lane loops ask for the target's register width, on shorter rows they do not."""
    x, b = jt.randn(8, cols), jt.randn(cols)
    ex, kernels, _ = _kernels(lambda x, b: jt.nn.functional.softmax(x * 0.5 + b, -1), x, b)
    assert kernels == [["mul", "add", "softmax"]]
    (step,) = [s for s in ex.steps if isinstance(s, KernelStep)]
    text = step.kernel.source.llvm_ir
    assert "reassoc" not in text and " fast " not in text
    # (the normalising pass's loop asks for it in either case; the max pass's loop is `kernel.RUN_LOOP`'s)
    assert (_loops_asking_for_a_width(text) > 1) == wide and '"llvm.loop.vectorize.width"' in text


def _loops_asking_for_a_width(text):
    """How many loops of a kernel's IR text carry an ``llvm.loop`` node that names a vectorisation width."""
    nodes = dict(re.findall(r"^!(\d+) = (.*)$", text, re.M))
    width = {n for n, body in nodes.items() if '"llvm.loop.vectorize.width"' in body}
    return sum(1 for n in re.findall(r"!llvm\.loop !(\d+)", text) if width & set(re.findall(r"!(\d+)", nodes[n])))

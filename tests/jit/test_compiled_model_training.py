"""``jitorch.compile(model)`` trained with an eager backward and optimizer (torch.compile's habit): each step runs
the model's forward graph once and its backward graph once (AOTAutograd's split, no recomputation), the node keeps
only the values the partition saved and frees them after the backward, and losses, gradients and parameters equal
torch's eager training of the same model."""

import collections
import contextlib
import gc
import weakref

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.profiler import profile


def block_class(lib):
    """A GPT block over token embeddings with its loss, as nanoGPT's model computes it inside forward (layer
    norms, causal attention, a GELU MLP, a tied head and the cross entropy), as a ``lib`` module."""
    F = lib.nn.functional

    class Block(lib.nn.Module):
        def __init__(self, vocab=11, dims=16, heads=2):
            super().__init__()
            self.wte = lib.nn.Embedding(vocab, dims)
            self.ln1, self.ln2 = lib.nn.LayerNorm(dims), lib.nn.LayerNorm(dims)
            # (without a bias: the keys' bias has a zero gradient up to rounding, which Adam would scale up to steps)
            self.qkv, self.proj = lib.nn.Linear(dims, 3 * dims, bias=False), lib.nn.Linear(dims, dims)
            self.fc, self.out = lib.nn.Linear(dims, 4 * dims), lib.nn.Linear(4 * dims, dims)
            self.heads = heads

        def forward(self, idx, targets):
            x = self.wte(idx)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            x = x + self.out(F.gelu(self.fc(self.ln2(x))))
            logits = x @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
    return Block


def _blocks():
    """(a jitorch block, its twin under torch with the same parameter values)."""
    jt.manual_seed(0)
    model = block_class(jt)()
    twin = block_class(torch)()
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    return model, twin


def _train(lib, model, idx, targets, steps):
    """nanoGPT's step: AdamW, gradients clipped at norm 1; the losses and the last step's gradients."""
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, [p.grad.numpy().copy() for p in model.parameters()]


def _batch():
    g = jt.Generator().manual_seed(3)
    return jt.randint(0, 11, (3, 8), generator=g), jt.randint(0, 11, (3, 8), generator=g)


def _entry(compiled):
    (function,) = compiled._by_mode.values()
    (entry,) = function.cache.values()
    return entry


def test_a_compiled_model_step_runs_its_forward_graph_once_and_its_backward_graph_once_and_trains_as_torch():
    model, twin = _blocks()
    compiled = jt.compile(model)
    idx, targets = _batch()
    _train(jt, compiled, idx, targets, 1)  # (compiles)
    with profile() as prof:
        losses, grads = _train(jt, compiled, idx, targets, 3)
    graph_calls = collections.Counter(e.name for e in prof.events() if e.kind == "compiled_call")
    assert graph_calls == {"compiled: Block (forward)": 3, "compiled: Block (backward)": 3}
    entry = _entry(compiled)
    # the partition's two graphs: no compiled vector-Jacobian product that runs the forward again
    assert entry.split is not None and entry.backward is None
    torch_idx, torch_targets = (torch.from_numpy(t.numpy()) for t in (idx, targets))
    _train(torch, twin, torch_idx, torch_targets, 1)
    torch_losses, torch_grads = _train(torch, twin, torch_idx, torch_targets, 3)
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5)
    for g, tg in zip(grads, torch_grads):
        np.testing.assert_allclose(g, tg, rtol=2e-4, atol=2e-6)
    for p, q in zip(compiled.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_a_compiled_model_node_keeps_the_partitions_saved_values_and_frees_them_after_the_backward():
    compiled = jt.compile(_blocks()[0])
    idx, targets = _batch()
    loss = compiled(idx, targets)
    node = loss.grad_fn
    split = _entry(compiled).split
    captured = [t for t in split.backward.graph.constant_tensors.values() if isinstance(t, jt.Tensor)]
    # what the backward reads of the call's tensors, the captured tensors it reads (by version), the values the
    # forward graph returned after the loss, and the tensors eager's nodes save that the backward graph does not
    # read (the targets, which the loss's nll_loss saves, and the layer norms' biases: checked by version alone):
    # nothing else is held until the backward
    assert split.checked == (1,) and not split.checked_outputs
    assert {id(t) for t in split.checked_captured} == {id(compiled.ln1.bias), id(compiled.ln2.bias)}
    assert len(node.ctx._saved) == (len(split.inputs_read) + len(captured) + split.saved + len(split.checked)
                                    + len(split.checked_captured))
    assert split.saved == len(split.forward.graph.outputs) - 1
    loss.backward()
    assert node.ctx._saved is None
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_a_compiled_model_backward_retained_accumulates_as_torchs():
    model, twin = _blocks()
    compiled = jt.compile(model)
    idx, targets = _batch()
    torch_idx, torch_targets = (torch.from_numpy(t.numpy()) for t in (idx, targets))
    for m, i, t in ((compiled, idx, targets), (twin, torch_idx, torch_targets)):
        loss = m(i, t)
        loss.backward(retain_graph=True)
        loss.backward()
    assert _entry(compiled).split is not None
    for p, q in zip(compiled.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=2e-4, atol=2e-6)


def test_a_compiled_model_runs_parameter_hooks_once_per_backward_with_the_accumulated_gradient():
    model, twin = _blocks()
    compiled = jt.compile(model)
    idx, targets = _batch()
    torch_idx, torch_targets = (torch.from_numpy(t.numpy()) for t in (idx, targets))
    seen = {"torch": [], "compiled": []}
    for name, m, i, t in (("torch", twin, torch_idx, torch_targets), ("compiled", compiled, idx, targets)):
        m.wte.weight.register_hook(lambda g, name=name: seen[name].append(("hook", g.numpy().copy())))
        m.wte.weight.register_post_accumulate_grad_hook(
            lambda p, name=name: seen[name].append(("after", p.grad.numpy().copy())))
        for _ in range(2):  # (the second backward accumulates into .grad)
            m(i, t).backward()
    assert _entry(compiled).split is not None  # (the hooks run in the eager engine, around the backward graph)
    assert [k for k, _ in seen["compiled"]] == [k for k, _ in seen["torch"]] == ["hook", "after"] * 2
    for (_, a), (_, b) in zip(seen["compiled"], seen["torch"]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_a_compiled_model_backward_refuses_an_output_written_after_the_call_as_torch():
    def logits(T):
        return T.nn.Sequential(T.nn.Linear(5, 7), T.nn.LogSoftmax(-1))

    messages = []
    for T, wrap in ((torch, lambda m: m), (jt, jt.compile)):
        T.manual_seed(0)
        out = wrap(logits(T))(T.randn(4, 5))
        node = out.grad_fn
        out.mul_(2)  # log_softmax's backward reads its output, which the node saved
        with pytest.raises(RuntimeError) as e:
            out.sum().backward()
        messages.append(str(e.value))
    assert node.ctx.entry.split is not None
    assert "modified by an inplace operation" in messages[0]
    assert messages[1].startswith("one of the variables needed for gradient computation has been modified")


def test_the_eager_nll_loss_around_a_compiled_model_scatters_its_gradient_into_zeros_without_copying_them(
        monkeypatch):
    # (the word language model's habit: the compiled model returns log-probabilities, nll_loss runs eagerly; its
    # backward scattered into a copy of a zero tensor of the log-probabilities' size, fresh pages each step)
    from jitorch.ops import indexing
    copies = []
    original = indexing._compute_copy
    monkeypatch.setattr(indexing, "_compute_copy", lambda x: copies.append(x.shape) or original(x))

    def decoder(T):
        return T.nn.Sequential(T.nn.Linear(6, 40), T.nn.LogSoftmax(-1))

    grads = []
    for T, wrap in ((jt, jt.compile), (torch, lambda m: m)):
        T.manual_seed(0)
        model = decoder(T)
        if T is torch:
            with torch.no_grad():
                for p, q in zip(model.parameters(), grads[0][1]):
                    p.copy_(torch.from_numpy(q))
        compiled = wrap(model)
        x = T.from_numpy(np.linspace(-1, 1, 30, dtype=np.float32).reshape(5, 6))
        targets = T.tensor([3, 0, 39, 3, 17])
        with profile() if T is jt else contextlib.nullcontext() as prof:
            T.nn.functional.nll_loss(compiled(x), targets).backward()
        if T is jt:  # (under the profiler the scatter takes the general path, which copies)
            calls = collections.Counter(e.name for e in prof.events() if e.kind == "compiled_call")
            assert calls == {"compiled: Sequential (forward)": 1, "compiled: Sequential (backward)": 1}
            copies.clear()
        model.zero_grad()
        T.nn.functional.nll_loss(compiled(x), targets).backward()
        grads.append(([p.grad.numpy().copy() for p in model.parameters()],
                      [p.detach().numpy().copy() for p in model.parameters()]))
    assert copies == []
    for g, tg in zip(grads[0][0], grads[1][0]):
        np.testing.assert_allclose(g, tg, rtol=1e-5, atol=1e-7)


def test_a_compiled_models_large_gradient_becomes_grad_without_a_copy_unless_numpy_sees_it(monkeypatch):
    # (a gradient of 1 MB or more leaves the backward graph in the caching allocator's memory: it was copied
    # into .grad each step, the word language model's 8 MB tied weight 12-16 ms a step)
    from jitorch.autograd import engine
    copies = []
    original = engine._copy_laid_out
    monkeypatch.setattr(engine, "_copy_laid_out", lambda g, strides: copies.append(g.shape) or original(g, strides))
    grads = []
    for T, wrap in ((jt, jt.compile), (torch, lambda m: m)):
        T.manual_seed(0)
        model = T.nn.Linear(600, 600)  # (applied twice: its gradient is a kernel's sum of two products)
        if T is torch:
            with torch.no_grad():
                for p, q in zip(model.parameters(), grads[0]):
                    p.copy_(torch.from_numpy(q[1]))
        x = T.from_numpy(np.linspace(-1, 1, 1800, dtype=np.float32).reshape(3, 600))
        twice = wrap(T.nn.Sequential(model, T.nn.Tanh(), model))
        twice(x).square().sum().backward()
        grads.append([(p.grad.numpy().copy(), p.detach().numpy().copy()) for p in model.parameters()])
        if T is jt:
            assert copies == []
            kept = []
            model.weight.register_hook(lambda g: kept.append(g.numpy()[:1]))  # a NumPy view of the gradient
            model.zero_grad()
            twice(x).square().sum().backward()
            assert copies == [(600, 600)]
            model.weight.grad.zero_()
            assert kept[0].any()  # (.grad is a copy: the view still sees the gradient)
    for (g, _), (tg, _) in zip(grads[0], grads[1]):
        np.testing.assert_allclose(g, tg, rtol=1e-4, atol=1e-5)


def test_a_compiled_models_output_dies_with_the_step_without_the_cyclic_collector():
    # (the node of the call held its outputs, whose grad_fn it is: the word language model's 28 MB log-probabilities
    # lived on in a reference cycle until a collection, and the next step faulted a fresh 28 MB buffer in, 14-45 ms
    # of system CPU a step)
    jt.manual_seed(0)
    compiled = jt.compile(jt.nn.Sequential(jt.nn.Linear(6, 40), jt.nn.LogSoftmax(-1)))
    x, targets = jt.randn(5, 6), jt.tensor([3, 0, 39, 3, 17])
    gc.disable()
    try:
        for _ in range(2):
            out = compiled(x)
            refs = [weakref.ref(out), weakref.ref(out.grad_fn)]
            jt.nn.functional.nll_loss(out, targets).backward()
            del out
            assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()
    assert _entry(compiled).split is not None


def test_a_compiled_models_gradients_under_create_graph_refuse_a_double_backward_as_torch_compiles():
    # (they came without history: a gradient penalty added to the loss moved nothing, silently; torch.compile's
    # AOTAutograd gives them a node whose backward raises "... does not currently support double backward", where a
    # tensor its backward reads requires grad, and so does this)
    def mlp(T):
        T.manual_seed(0)
        return T.nn.Sequential(T.nn.Linear(3, 4), T.nn.Tanh(), T.nn.Linear(4, 1))

    model, twin = mlp(jt), mlp(torch)
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy()))
    compiled = jt.compile(model)
    x = jt.linspace(-1, 1, 6).view(2, 3)
    (g,) = jt.autograd.grad(compiled(x).square().sum(), [model[0].weight], create_graph=True)
    (tg,) = torch.autograd.grad(twin(torch.from_numpy(x.numpy())).square().sum(), [twin[0].weight])
    np.testing.assert_allclose(g.detach().numpy(), tg.numpy(), rtol=1e-5, atol=1e-7)
    assert g.requires_grad and _entry(compiled).split is not None
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        jt.autograd.grad(g.square().sum(), [model[0].weight])
    loss = compiled(x).square().sum()
    (g,) = jt.autograd.grad(loss, [model[0].weight], create_graph=True)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        (loss + g.square().sum()).backward()
    # without create_graph the gradients are plain, as before
    (g,) = jt.autograd.grad(compiled(x).square().sum(), [model[0].weight])
    assert not g.requires_grad and g.grad_fn is None


def test_a_compiled_function_whose_backward_recomputes_refuses_a_double_backward_too():
    # (returning an input's memory keeps it off the split: its backward is a compiled vector-Jacobian product that
    # recomputes the forward, whose gradients came without history as well)
    def f(x, w):
        return (x @ w).tanh(), w.t()

    compiled = jt.compile(f)
    x = jt.linspace(-1, 1, 6).view(2, 3)
    grads = []
    for fn in (f, compiled):
        w = jt.linspace(-0.5, 0.7, 12).view(3, 4).requires_grad_()
        (g,) = jt.autograd.grad(fn(x, w)[0].square().sum(), [w], create_graph=True)
        assert g.requires_grad
        grads.append(g.detach().numpy())
    (entry,) = compiled.cache.values()
    assert entry.split is None and entry.backward is not None
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        jt.autograd.grad(g.square().sum(), [w])

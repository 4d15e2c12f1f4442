"""jit.partition: the backward graph cut from a compiled call's joint trace, as lean as the gradients allow."""

import copy

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import nn
from jitorch.autograd import engine
from jitorch.jit.partition import split_joint
from jitorch.jit.tracer import trace_with_inputs

PERMUTES = ("t", "transpose", "permute")


def _ops(graph):
    return [node.op.name for node in graph.nodes]


def _split(compiled):
    (entry,) = compiled.cache.values()
    return entry.split


def test_linear_weight_gradients_come_out_of_the_backward_graph_compact_and_become_grad_without_a_copy(
        monkeypatch):
    jt.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
    compiled = jt.compile(copy.deepcopy(model))
    x, y = jt.randn(8, 12), jt.randint(0, 4, (8,))
    nn.functional.cross_entropy(model(x), y).backward()
    copies = []
    copy_laid_out = engine._copy_laid_out
    monkeypatch.setattr(engine, "_copy_laid_out", lambda g, strides: copies.append(g.shape) or copy_laid_out(g, strides))
    nn.functional.cross_entropy(compiled(x), y).backward()
    # each gradient is the product as traced (dy.t() @ x), not a transposed view autograd must copy into .grad
    assert copies == []
    for eager, ours in zip(model.parameters(), compiled.parameters()):
        assert ours.grad.is_contiguous()
        np.testing.assert_array_equal(ours.grad.numpy(), eager.grad.numpy())
    backward = _split(next(iter(compiled._by_mode.values()))).backward.graph
    weight_grads = [backward.outputs[k] for k in (0, 2)]  # (w1, b1, w2, b2): the weights' gradients
    assert [g.node.op.name for g in weight_grads] == ["matmul", "matmul"]
    # the product reads the weight itself: t(t(w)) of the forward's matmul(x, w.t()) and of its backward is w
    assert "t" not in _ops(backward)


def test_the_gradients_match_torch():
    jt.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    reference = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    with torch.no_grad():
        for p, q in zip(reference.parameters(), model.parameters()):
            p.copy_(torch.from_numpy(q.detach().numpy()))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    jt.compile(model)(jt.from_numpy(x)).square().sum().backward()
    reference(torch.from_numpy(x)).square().sum().backward()
    for p, q in zip(reference.parameters(), model.parameters()):
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_a_chain_of_permutations_that_gives_its_base_back_is_read_as_the_base():
    # the backward of x.permute(2, 0, 1).permute(1, 2, 0) permutes the gradient twice, back to its own dims
    f = jt.compile(lambda x, w: x.permute(2, 0, 1).permute(1, 2, 0) * w)
    x, w = jt.randn(2, 3, 4, requires_grad=True), jt.randn(4)
    f(x, w).sum().backward()
    assert not set(PERMUTES) & set(_ops(_split(f).backward.graph))
    np.testing.assert_array_equal(x.grad.numpy(), np.broadcast_to(w.numpy(), (2, 3, 4)))


def test_a_gradient_that_is_the_cotangent_itself_is_returned_so():
    # (w.t() + b).t(): w's gradient is t(t(the cotangent)), which is the cotangent
    b = jt.randn(3, 1)
    f = jt.compile(lambda w: (w.t() + b).t())
    w = jt.randn(2, 3, requires_grad=True)
    cotangent = jt.randn(2, 3)
    f(w).backward(cotangent)
    backward = _split(f).backward.graph
    assert backward.nodes == [] and backward.outputs[0] is backward.inputs[-1]
    np.testing.assert_array_equal(w.grad.numpy(), cotangent.numpy())


def test_permutations_that_do_not_undo_each_other_are_kept():
    def f(x, w):
        return (x.transpose(0, 1).permute(2, 0, 1) * w).sum()
    x, w = jt.randn(2, 3, 4, requires_grad=True), jt.randn(4, 3, 2)
    jt.compile(f)(x, w).backward()
    reference = torch.from_numpy(x.detach().numpy()).requires_grad_()
    f(reference, torch.from_numpy(w.numpy())).backward()
    np.testing.assert_array_equal(x.grad.numpy(), reference.grad.numpy())


def test_the_backward_reads_what_the_forward_computed_rather_than_computing_it_again():
    # layer norm's backward needs the normalised input, whose mean the forward has already taken
    f = jt.compile(lambda x: nn.functional.layer_norm(x, (8,)))
    x = jt.randn(4, 8, requires_grad=True)
    weights = jt.arange(8.0)
    (f(x) * weights).sum().backward()
    split = _split(f)
    assert "mean" in _ops(split.forward.graph) and "mean" not in _ops(split.backward.graph)
    reference = torch.from_numpy(x.detach().numpy()).requires_grad_()
    (torch.nn.functional.layer_norm(reference, (8,)) * torch.arange(8.0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), reference.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_split_joint_merges_repeated_nodes_of_the_joint_trace():
    def joint(x, cotangent):
        y = x.exp()
        return (y,), ((x.exp() * cotangent),)  # exp twice, as a backward rule recomputing its forward would
    x, cotangent = jt.randn(3), jt.randn(3)
    graph, _ = trace_with_inputs(joint, (x, cotangent), {})
    split = split_joint(graph, 1)
    assert _ops(split.forward) == ["exp"] and _ops(split.backward) == ["mul"] and split.saved == 1


def test_cheap_arithmetic_of_a_saved_value_is_computed_again_rather_than_saved():
    # gelu(h) = h * Phi(h): its backward reads h and Phi(h); saving h alone is half of that, and the backward
    # computes Phi again from it
    f = jt.compile(lambda x, w: nn.functional.gelu(x @ w))
    x, w = jt.randn(4, 3), jt.randn(3, 5, requires_grad=True)
    f(x, w).sum().backward()
    split = _split(f)
    forward = split.forward.graph
    saved = forward.outputs[1:]
    assert [v.node.op.name for v in saved] == ["matmul"]
    assert _ops(split.backward.graph)[:1] == ["_normal_cdf"]
    reference = torch.from_numpy(w.detach().numpy()).requires_grad_()
    torch.nn.functional.gelu(torch.from_numpy(x.numpy()) @ reference).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), reference.grad.numpy(), rtol=1e-5, atol=1e-6)


def _saved_and_grads(f, *args):
    """The ops of what ``f``'s forward graph saves, and the gradients of its arguments' sum of outputs."""
    args = [jt.from_numpy(a).requires_grad_() for a in args]
    f(*args).sum().backward()
    return [v.node.op.name for v in _split(f).forward.graph.outputs[1:]], [a.grad.numpy() for a in args if a.grad is not None]


def test_a_chain_of_transcendental_ops_over_saved_values_is_computed_again_with_the_same_bits():
    """Seed 0. exp(a * b)'s result is what sin's backward reads, and a and b are what the product's reads:
    the backward computes exp(a * b) again from them, to the forward's bits (the gradients equal those of a
    split that saves it, the chain's ops taken out of the recomputed set)."""
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(3)]

    def fn(x, w1, w2):
        return ((x @ w1.t()) * (x @ w2.t())).exp().sin()
    saved, grads = _saved_and_grads(jt.compile(fn), *args)
    assert sorted(saved) == ["matmul", "matmul"]
    from jitorch.jit import partition
    arithmetic = partition._RECOMPUTED - {"exp", "erf", "tanh", "sigmoid"}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(partition, "_RECOMPUTED", arithmetic)
        saved_before, grads_before = _saved_and_grads(jt.compile(fn), *args)
    assert sorted(saved_before) == ["exp", "matmul", "matmul"]
    for new, old in zip(grads, grads_before):
        assert new.tobytes() == old.tobytes()


def test_a_chain_whose_sources_are_more_bytes_than_its_result_is_saved():
    # exp(a + b) is saved: computing it again would need a and b, which nothing else in the backward reads (an
    # add's backward reads neither operand; exp(a * b), whose backward reads b, is computed again from a and b:
    # test_partition46)
    f = jt.compile(lambda x, w1, w2: ((x @ w1.t()) + (x @ w2.t())).exp().sin())
    rng = np.random.default_rng(1)
    saved, _ = _saved_and_grads(f, *[rng.standard_normal((6, 5)).astype(np.float32) for _ in range(3)])
    assert "exp" in saved


def test_arithmetic_that_reads_a_captured_tensor_is_saved_not_computed_again():
    # redone in the backward, exp(x) + b would read b there: a write into b before the backward would then
    # raise, where eager's add saved nothing of b
    b = jt.randn(3)
    f = jt.compile(lambda x: (x.exp() + b).sin())
    x = jt.randn(3, requires_grad=True)
    out = f(x)
    expected = (x.detach().exp() + b).cos() * x.detach().exp()
    b.add_(1)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected.numpy(), rtol=1e-6)
    assert "add" in [v.node.op.name for v in _split(f).forward.graph.outputs[1:]]


def _dcgan_like(lib):
    """A generator block and a discriminator head: batch norms (running statistics written by the forward),
    in-place activations, and a ``Flatten(0)`` output, a view of memory the call makes (`output_bases`)."""
    nn_ = lib.nn
    return (nn_.Sequential(nn_.ConvTranspose2d(6, 4, 4, 1, 0, bias=False), nn_.BatchNorm2d(4), nn_.ReLU(True)),
            nn_.Sequential(nn_.Conv2d(4, 3, 2, 2, 0, bias=False), nn_.BatchNorm2d(3), nn_.LeakyReLU(0.2, True),
                           nn_.Conv2d(3, 1, 2, 1, 0, bias=False), nn_.Flatten(0)))


def _gan_steps(lib, G, D, noise, real, steps=3):
    """DCGAN's step, as benchmarks/models.py runs it: D on real and detached fake images, then G through D."""
    opt_d = lib.optim.Adam(D.parameters(), lr=0.01, betas=(0.5, 0.999))
    opt_g = lib.optim.Adam(G.parameters(), lr=0.01, betas=(0.5, 0.999))
    bce = lib.nn.BCEWithLogitsLoss()
    ones, zeros = lib.ones(real.shape[0]), lib.zeros(real.shape[0])
    losses = []
    for _ in range(steps):
        D.zero_grad()
        err_real = bce(D(real), ones)
        err_real.backward()
        fake = G(noise)
        err_fake = bce(D(fake.detach()), zeros)
        err_fake.backward()
        opt_d.step()
        G.zero_grad()
        err_g = bce(D(fake), ones)
        err_g.backward()
        opt_g.step()
        losses.append([err_real.item(), err_fake.item(), err_g.item()])
    return losses


def test_a_compiled_model_that_updates_batch_norm_statistics_runs_split_forward_and_backward_graphs():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((5, 6, 1, 1)).astype(np.float32)
    real = rng.standard_normal((5, 4, 4, 4)).astype(np.float32)
    torch.manual_seed(0)
    reference = _dcgan_like(torch)
    models = _dcgan_like(jt)
    for ours, theirs in zip(models, reference):
        ours.load_state_dict({k: jt.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    want = _gan_steps(torch, *reference, torch.from_numpy(noise), torch.from_numpy(real))
    compiled = [jt.compile(m) for m in models]
    got = _gan_steps(jt, *compiled, jt.tensor(noise), jt.tensor(real))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for ours, theirs in zip(models, reference):  # parameters, running statistics and batch counts
        for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    # every call ran its forward graph and a backward graph cut from the joint trace, none recomputed the forward
    entries = [e for c in compiled for f in c._by_mode.values() for e in f.cache.values()]
    assert len(entries) == 3  # G; D on tensors without grad (real, detached fake); D on G's output
    for entry in entries:
        assert entry.split is not None and entry.backward is None
        forward, backward = entry.split.forward.graph, entry.split.backward.graph
        written = {target.name for target, _ in forward.mutations}
        assert {n.rsplit(".", 1)[1] for n in written} == {"running_mean", "running_var", "num_batches_tracked"}
        assert not written & set(backward.constants)


def test_a_split_whose_backward_would_read_a_buffer_the_forward_writes_is_refused():
    from jitorch.jit.compile import _backward_reads_writes
    buf = jt.ones(3)

    def joint(x, cotangent):
        # as a backward reading ``buf`` would: after the forward's write, where eager's read the value before
        grad = cotangent * buf
        buf.add_(1)
        return (x * 2,), (grad,)
    graph, _ = trace_with_inputs(joint, (jt.randn(3), jt.randn(3)), {})
    split = split_joint(graph, 1)
    assert [t.name for t, _ in split.forward.mutations] == list(split.backward.constants)
    assert _backward_reads_writes(split)
    # the write alone, which the backward does not read, is the forward's
    graph, _ = trace_with_inputs(lambda x, c: (buf.add_(1), ((x * 2,), (c * 2,)))[1], (jt.randn(3), jt.randn(3)), {})
    split = split_joint(graph, 1)
    assert split.forward.mutations and not split.backward.constants and not _backward_reads_writes(split)


class _WritesBuffers(nn.Module):
    """Writes into its buffers a value it also returns (detached), and counts its calls."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("last", jt.zeros(3, 4))
        self.register_buffer("calls", jt.zeros((), dtype=jt.long))

    def forward(self, x):
        y = self.lin(x).tanh()
        self.last.copy_(y.detach())
        self.calls += 1
        self.last.mul_(0.5)
        return y * 2, y


def test_a_split_call_writes_its_buffers_once_and_its_outputs_are_not_the_buffers():
    jt.manual_seed(0)
    model = _WritesBuffers()
    compiled = jt.compile(model)
    reference = torch.nn.Module()
    reference.lin = torch.nn.Linear(4, 4)
    with torch.no_grad():
        reference.lin.weight.copy_(torch.from_numpy(model.lin.weight.detach().numpy()))
        reference.lin.bias.copy_(torch.from_numpy(model.lin.bias.detach().numpy()))
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    ours, theirs = jt.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    for calls in (1, 2):
        z, y = compiled(ours)
        (z.sum() + (y * y).sum()).backward()
        t = reference.lin(theirs).tanh()
        (2 * t.sum() + (t * t).sum()).backward()
        np.testing.assert_allclose(model.last.numpy(), t.detach().numpy() * 0.5, rtol=1e-6)
        assert int(model.calls) == calls
        y.add_(1)  # a write into an output after the call leaves the buffer as it is
        np.testing.assert_allclose(model.last.numpy(), t.detach().numpy() * 0.5, rtol=1e-6)
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(model.lin.weight.grad.numpy(), reference.lin.weight.grad.numpy(), rtol=1e-5,
                                   atol=1e-6)
    for entry in next(iter(compiled._by_mode.values())).cache.values():  # (x.grad None, then not: two traces)
        assert entry.split is not None and sorted(t.name for t, _ in entry.split.forward.graph.mutations) == [
            "fn.calls", "fn.last"]


def test_the_forward_saves_a_value_whole_and_the_backward_makes_its_views_of_it():
    # attention's q, k and v: views split from one product, which the backward had to copy compact at its start
    def attention(T, x, w):
        q, k, v = (x @ w).split(4, dim=-1)
        q, k, v = (t.view(2, 3, 2, 2).transpose(1, 2) for t in (q, k, v))
        return ((q @ k.transpose(-2, -1)).softmax(-1) @ v).sum(1)
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((2, 3, 5)).astype(np.float32), rng.standard_normal((5, 12)).astype(np.float32)
    f = jt.compile(lambda x, w: attention(jt, x, w))
    ours = [jt.tensor(x, requires_grad=True), jt.tensor(w, requires_grad=True)]
    theirs = [torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)]
    f(*ours).square().sum().backward()
    attention(torch, *theirs).square().sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)
    split = _split(f)
    saved = split.forward.graph.outputs[-split.saved:]
    assert all(v.node.op.kind != "view" for v in saved), [v.node.op.name for v in saved]
    assert "matmul" in [v.node.op.name for v in saved]  # x @ w, whole
    assert {"split", "view", "transpose"} <= set(_ops(split.backward.graph))


def test_a_chain_of_cheap_ops_longer_than_pythons_recursion_limit_is_split_as_eager_runs_it():
    """The partition followed a chain of cheap pointwise ops back by recursion: compile(model) of a forward with
    1200 of them in a row raised RecursionError. The gradients equal eager's, bit for bit (the same ops)."""
    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            for _ in range(1200):
                h = h * 1.0001 + 0.001
            return (h * h).sum()

    model = Chain()
    x = jt.randn(3, 4)
    jt.compile(model)(x).backward()
    compiled = model.lin.weight.grad.clone()
    model.zero_grad()
    model(x).backward()
    assert np.array_equal(compiled.numpy(), model.lin.weight.grad.numpy())

"""``jitorch.compile(model)`` of a convnet trained with an eager loss, backward and optimizer (the CNN benchmark's
system): the partition cuts the joint trace after the batch-last sink ran on it, so the activations a backward
reads are saved in the convolution's batch-last layout; a clone (a saved or returned copy) is a kernel, not NumPy's
strided copy; a view group the kernel builder refuses whole (a convolution's windows merged, then transposed for
the weight gradient's product) copies in a kernel and makes the views after the copy as headers; a view that
copies (a convolution's windows merged) is saved by the forward rather than copied again in the backward. Values
as eager's and torch's."""

import collections

import numpy as np
import torch

import jitorch as jt
from jitorch.jit import executor
from jitorch.jit.executor import EagerStep, KernelStep
from jitorch.profiler import profile


def net_class(lib):
    """The MNIST example's convnet in small, with a batch norm after the first convolution and no dropout."""
    F = lib.nn.functional

    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn = lib.nn.Conv2d(1, 3, 3), lib.nn.BatchNorm2d(3)
            self.conv2, self.fc = lib.nn.Conv2d(3, 4, 3), lib.nn.Linear(36, 5)

        def forward(self, x):
            x = F.relu(self.bn(self.conv1(x)))
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return F.log_softmax(self.fc(lib.flatten(x, 1)), dim=1)
    return Net


def _nets():
    jt.manual_seed(0)
    model, twin = net_class(jt)(), net_class(torch)()
    with torch.no_grad():
        for p, q in zip(model.parameters(), twin.parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    return model, twin


def _train(lib, model, x, y, steps):
    opt = lib.optim.Adadelta(model.parameters(), lr=1.0)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = lib.nn.functional.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_compiled_convnet_saves_batch_last_activations_copies_in_kernels_and_trains_as_torch():
    model, twin = _nets()
    compiled = jt.compile(model)
    g = jt.Generator().manual_seed(2)
    x, y = jt.randn(4, 1, 10, 10, generator=g), jt.randint(0, 5, (4,), generator=g)
    _train(jt, compiled, x, y, 1)  # (compiles)
    with profile() as prof:
        losses = _train(jt, compiled, x, y, 3)
    calls = collections.Counter(e.name for e in prof.events() if e.kind == "compiled_call")
    assert calls == {"compiled: Net (forward)": 3, "compiled: Net (backward)": 3}
    (function,) = compiled._by_mode.values()
    (entry,) = function.cache.values()
    split = entry.split
    forward, backward = split.forward, split.backward
    # the first convolution's batch-normed activation is saved as the product lies, (C, H, W, N)
    saved = forward.graph.outputs[len(forward.graph.outputs) - split.saved:]
    assert (3, 8, 8, 4) in [tuple(v.type.shape) for v in saved]
    assert (4, 3, 8, 8) not in [tuple(v.type.shape) for v in saved]
    for graph in (forward, backward):
        for s in graph.steps:  # no step copies through NumPy: a clone, or windows merged by an eager reshape
            names = [n.op.name for n in s.nodes] if isinstance(s, EagerStep) else []
            assert "clone" not in names and not ("as_strided" in names and "view" in names)
    # the two convolutions' windows, merged (a copy), are made once, by forward kernels, and saved
    copies = [s for s in forward.steps if isinstance(s, KernelStep) and s.group.kind == "view"]
    assert len(copies) == 2
    assert {(1, 9, 256), (1, 27, 144)} <= {tuple(v.type.shape) for v in saved}

    tx, ty = torch.from_numpy(x.numpy()), torch.from_numpy(y.numpy())
    _train(torch, twin, tx, ty, 1)
    torch_losses = _train(torch, twin, tx, ty, 3)
    np.testing.assert_allclose(losses, torch_losses, rtol=2e-5)
    for p, q in zip(compiled.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-4, atol=2e-6)
    for b, tb in zip(compiled.buffers(), twin.buffers()):
        np.testing.assert_allclose(b.numpy(), tb.numpy(), rtol=2e-5, atol=1e-6)


def test_a_compiled_convnets_split_equals_the_eager_model_step_for_step():
    model, _ = _nets()
    eager, _ = _nets()
    compiled = jt.compile(model)
    g = jt.Generator().manual_seed(5)
    x, y = jt.randn(4, 1, 10, 10, generator=g), jt.randint(0, 5, (4,), generator=g)
    np.testing.assert_allclose(_train(jt, compiled, x, y, 3), _train(jt, eager, x, y, 3), rtol=1e-6)
    for p, q in zip(compiled.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-7)


def _clones(x):
    lib = jt if isinstance(x, jt.Tensor) else torch
    return (x.permute(2, 0, 1).clone(), x[:, ::2].clone(memory_format=lib.preserve_format),
            x.transpose(0, 1).clone(memory_format=lib.contiguous_format))


def test_a_clone_is_a_copy_kernel_with_eagers_layout_and_bits():
    x = jt.randn(4, 5, 6, generator=jt.Generator().manual_seed(1))
    x.view(-1)[:3] = jt.tensor([float("nan"), -0.0, float("inf")])
    steps = jt.compile(_clones).lower(x).executable.steps
    assert all(isinstance(s, KernelStep) and "clone" in s.kernel.source.ops for s in steps) and len(steps) == 3
    for got, want, ref in zip(jt.compile(_clones)(x), _clones(x), _clones(torch.from_numpy(x.numpy()))):
        assert got.stride() == want.stride() == ref.stride()
        assert got.numpy().tobytes() == want.numpy().tobytes() == ref.numpy().tobytes()


def _windows_product(x, w):
    cols = x.as_strided((2, 3, 3, 6, 6), (64, 8, 1, 8, 1)).reshape(18, 36)
    return cols.t() @ w


def test_windows_transposed_after_their_copy_copy_in_a_kernel_then_view():
    g = jt.Generator().manual_seed(4)
    x, w = jt.randn(2, 8, 8, generator=g), jt.randn(18, 5, generator=g)
    ex = jt.compile(_windows_product).lower(x, w).executable
    (group,) = [grp for grp in ex.groups if [n.op.name for n in grp.nodes] == ["as_strided", "view", "t"]]
    copy, header = executor.copy_then_views(group)
    assert [n.op.name for n in copy.nodes] == ["as_strided", "view"] and [n.op.name for n in header.nodes] == ["t"]
    assert isinstance(ex.steps[0], KernelStep) and list(ex.steps[0].kernel.source.ops) == ["as_strided", "view"]
    assert isinstance(ex.steps[1], EagerStep) and [n.op.name for n in ex.steps[1].nodes] == ["t"]
    got = jt.compile(_windows_product)(x, w)
    assert got.numpy().tobytes() == _windows_product(x, w).numpy().tobytes()
    want = _windows_product(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy()))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_view_group_without_a_reshape_before_its_last_view_is_not_split():
    def f(x):
        return x.as_strided((3, 3), (1, 3)).t()
    x = jt.randn(9)
    ex = jt.compile(f).lower(x).executable
    for group in ex.groups:
        if group.kind == "view":
            assert executor.copy_then_views(group) is None
    assert f(x).numpy().tobytes() == jt.compile(f)(x).numpy().tobytes()

"""Compiled functions that write in place next to autograd: views of results written in place
(``ReLU(inplace=True)`` after a convolution), saved tensors overwritten (torch's error), and
hand-written SGD updates through ``p.data`` or under ``no_grad``, which must compile (no eager
fallback) and match eager and torch."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.autograd.inplace_programs import RAISING, WORKING, inputs, torch_message


def ran_compiled(step):
    """Whether every call of ``step`` ran its graph (no entry fell back to eager)."""
    return bool(step.cache) and all(e.eager_reason is None and e.graph is not None for e in step.cache.values())


@pytest.fixture(autouse=True)
def no_eager_fallback_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.parametrize("program", WORKING, ids=lambda p: p.__name__)
def test_compiled_in_place_writes_no_formula_saved_differentiate_as_torch(program):
    tx, tw = inputs(torch)
    program(torch, tx, tw).sum().backward()
    x, w = inputs(jt)
    step = jt.compile(lambda x, w: program(jt, x, w).sum().backward())
    step(x, w)
    assert ran_compiled(step)
    for got, want in zip((x.grad, w.grad), (tx.grad, tw.grad)):
        assert (got is None) == (want is None)
        if want is not None:
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("program", RAISING, ids=lambda p: p.__name__)
def test_compiled_write_to_a_saved_tensor_raises_torchs_error(program):
    x, w = inputs(jt)
    step = jt.compile(lambda x, w: program(jt, x, w).sum().backward())
    with pytest.raises(RuntimeError) as e:
        step(x, w)
    assert str(e.value) == torch_message(program)


def dcgan_blocks(nn):
    """A DCGAN generator block (ConvTranspose2d without bias, BatchNorm2d, in-place ReLU) and a
    discriminator one (Conv2d without bias, in-place LeakyReLU)."""
    return nn.Sequential(nn.ConvTranspose2d(4, 3, 4, 2, 1, bias=False), nn.BatchNorm2d(3), nn.ReLU(inplace=True),
                         nn.Conv2d(3, 2, 3, 1, 1, bias=False), nn.LeakyReLU(0.2, inplace=True))


def same_parameters(model, reference):
    with jt.no_grad():
        for p, r in zip(model.parameters(), reference.parameters()):
            p.copy_(jt.tensor(r.detach().numpy()))


def test_compiled_dcgan_blocks_with_in_place_activations_train_as_eager_and_torch():
    reference = dcgan_blocks(torch.nn)
    t_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x = np.random.default_rng(0).standard_normal((2, 4, 5, 5)).astype(np.float32)
    runs = {}
    for compiled in (False, True):
        model = dcgan_blocks(jt.nn)
        same_parameters(model, reference)
        opt = jt.optim.SGD(model.parameters(), lr=0.1)

        def step(x):
            opt.zero_grad()
            out = model(x)
            loss = (out * out).mean()
            loss.backward()
            opt.step()
            return loss
        run = jt.compile(step) if compiled else step
        runs[compiled] = [run(jt.tensor(x)).item() for _ in range(3)], model
        if compiled:
            assert ran_compiled(run)
    want = []
    for _ in range(3):
        t_opt.zero_grad()
        out = reference(torch.tensor(x))
        loss = (out * out).mean()
        loss.backward()
        t_opt.step()
        want.append(loss.item())
    for losses, model in runs.values():
        np.testing.assert_allclose(losses, want, rtol=1e-5)
        for p, r in zip(model.parameters(), reference.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-6)


def update_through_data(params, lr):
    for p in params:
        p.data.add_(p.grad, alpha=-lr)


def update_by_subtracting_in_place(params, lr):
    with torch_or_jitorch(params).no_grad():
        for p in params:
            p -= lr * p.grad


def update_by_add_in_place(params, lr):
    with torch_or_jitorch(params).no_grad():
        for p in params:
            p.add_(p.grad, alpha=-lr)


def torch_or_jitorch(params):
    return torch if isinstance(params[0], torch.Tensor) else jt


def two_layers(nn):
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))


def written_constants(step):
    """The names of the captured tensors ``step``'s graph writes back into."""
    (entry,) = step.cache.values()
    return {origin.name for origin, _ in entry.graph.mutations}


@pytest.mark.parametrize("update", [update_through_data, update_by_subtracting_in_place, update_by_add_in_place])
def test_compiled_hand_written_sgd_runs_compiled_and_matches_eager_and_torch(update):
    # the update of PyTorch's word language model example: p.data shares the parameter's memory
    reference = two_layers(torch.nn)
    initial = [p.detach().clone() for p in reference.parameters()]
    rng = np.random.default_rng(0)
    x, target = (rng.standard_normal(shape).astype(np.float32) for shape in ((8, 4), (8, 3)))
    want = []
    for _ in range(4):
        reference.zero_grad()
        loss = ((reference(torch.tensor(x)) - torch.tensor(target)) ** 2).mean()
        loss.backward()
        update(list(reference.parameters()), 0.1)
        want.append(loss.item())
    for compiled in (False, True):
        model = two_layers(jt.nn)
        with jt.no_grad():
            for p, r in zip(model.parameters(), initial):
                p.copy_(jt.tensor(r.numpy()))

        def step(x, target):
            model.zero_grad()
            loss = ((model(x) - target) ** 2).mean()
            loss.backward()
            update(list(model.parameters()), 0.1)
            return loss
        run = jt.compile(step) if compiled else step
        got = [run(jt.tensor(x), jt.tensor(target)).item() for _ in range(4)]
        if compiled:
            assert ran_compiled(run)
            assert written_constants(run) == {"model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"}
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for p, r in zip(model.parameters(), reference.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reshape", [lambda x: x.t_(), lambda x: x.squeeze_(), lambda x: x.transpose_(0, 0)],
                         ids=["t_", "squeeze_", "transpose_"])
def test_an_in_place_view_op_that_keeps_an_inputs_geometry_differentiates_compiled(reshape):
    """Fuzz seed 2500029: the compiled backward re-ran the function on leaves, where ``x.t_()`` of a 1-d input
    (a non-leaf, as eagerly) raised "a leaf Variable that requires grad is being used in an in-place operation"."""
    def fn(x, w):
        reshape(x)
        return x * w

    grads = []
    for run in (fn, jt.compile(fn)):
        leaf, w = jt.arange(4.0, requires_grad=True), jt.tensor(3.0, requires_grad=True)
        (run(leaf * 1, w) * jt.arange(4.0)).sum().backward()
        grads.append((leaf.grad.tolist(), w.grad.item()))
    assert grads[0] == grads[1] == ([0.0, 3.0, 6.0, 9.0], 14.0)


def _made_from_data_then_written(lib, x, returned):
    """A tensor made from Python data, a view of it taken, values that require grad written into it, then
    scaled in place; returns the view or the tensor itself."""
    v = lib.tensor([[0.0, 0.0]])
    view = v.transpose(1, 1)
    v[0] = x.log()
    v.mul_(lib.tensor([[-1.375, -1.625]]))
    return view if returned == "view" else v


@pytest.mark.parametrize("returned", ["view", "itself"])
def test_a_tensor_made_from_data_then_written_with_history_differentiates_compiled(returned):
    """Fuzz seed 7501246: the tracer asked the real tensor (no history), not its fake (a history from the
    write), whether later ops needed grad: the compiled gradient lost the ``mul_`` (the view returned), or
    the output did not require grad (the tensor itself, which now runs eagerly: its fake's history cannot
    reach the tensor a call returns)."""
    want = torch.tensor([2.0, 3.0], requires_grad=True)
    _made_from_data_then_written(torch, want, returned).sum().backward()
    x = jt.tensor([2.0, 3.0], requires_grad=True)
    step = jt.compile(lambda x: _made_from_data_then_written(jt, x, returned))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if returned == "itself" else "error")
        out = step(x)
    out.sum().backward()
    assert np.allclose(x.grad.numpy(), want.grad.numpy())
    assert ran_compiled(step) == (returned == "view")

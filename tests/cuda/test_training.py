"""Training on CUDA tensors (the fake device running the generated kernels): eager and compiled steps of an
MLP with each optimizer give the CPU's losses and parameters, and everything stays on the device."""

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from tests.support import classifier_step

OPTIMIZERS = {"sgd": lambda p: jt.optim.SGD(p, lr=0.1, momentum=0.9),
              "adam": lambda p: jt.optim.Adam(p, lr=0.01),
              "adamw": lambda p: jt.optim.AdamW(p, lr=0.01, weight_decay=0.1)}


def training_step(device, optimizer, compiled):
    """A step of an MLP on a fixed batch (compiled or eager), with its model, optimizer and batch."""
    jt.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    opt = OPTIMIZERS[optimizer](model.parameters())
    rng = np.random.default_rng(0)
    x = jt.tensor(rng.standard_normal((8, 12)).astype(np.float32), device=device)
    y = jt.tensor(rng.integers(0, 4, 8), device=device)

    step = classifier_step(model, opt)
    return (jt.compile(step) if compiled else step), model, opt, (x, y)


def train(device, optimizer, compiled, steps=3):
    """Losses and final parameters of ``steps`` steps."""
    step, model, opt, batch = training_step(device, optimizer, compiled)
    losses = [step(*batch).item() for _ in range(steps)]
    params = list(model.parameters())
    state = [t for s in opt.state.values() for t in s.values() if isinstance(t, jt.Tensor) and t.ndim]
    assert all(t.device.type == device for t in params + state)
    return losses, [p.detach().cpu().numpy() for p in params]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_training_steps_on_cuda_match_the_cpu(fake, optimizer, compiled):
    cpu_losses, cpu_params = train("cpu", optimizer, compiled=False)
    losses, params = train("cuda", optimizer, compiled)
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-5)
    for got, want in zip(params, cpu_params):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_compiled_step_runs_on_the_device_without_waiting_for_it(fake):
    """Cross-entropy's gather and its backward's pick (positions compared with the targets, no scatter into
    zeros) are kernels too: a steady step copies nothing to the host and waits for nothing. The optimizer's learning rate, a 0-d CPU tensor re-read every call,
    goes up to the kernels that read it without waiting."""
    step, _, _, batch = training_step("cuda", "sgd", compiled=True)
    for _ in range(3):
        step(*batch)
    fake.copies.clear()
    fake.launches.clear()
    step(*batch)
    assert {kind for kind, _, _ in fake.copies} == {"htod", "dtod"}
    # the learning rate (4 bytes) and the class positions' arange parameters (48 bytes: the pick's gradient
    # checks the targets through them), each queued without waiting
    assert sorted(n for kind, n, non_blocking in fake.copies if kind == "htod" and non_blocking) == [4, 4, 4, 4, 48]
    assert all(non_blocking for kind, _, non_blocking in fake.copies if kind == "htod")
    ops = [op for launch in fake.launches for op in launch.ops]
    assert {"gather", "eq", "where.self", "matmul"} <= set(ops) and "scatter_add" not in ops

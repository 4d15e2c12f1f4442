"""A group the kernel builder refuses is split into its leading views (tensor headers) and the rest as one
group (`executor.split_refused`), not into one kernel per node: gradient clipping's norm of a bias's gradient
(an ``as_strided`` of a sum, a group output, then its square, sum and sqrt) is one reduction kernel, not three;
values bit for bit."""

from __future__ import annotations

import numpy as np
import torch

import jitorch as jt
from jitorch.jit import executor
from jitorch.jit.executor import EagerStep, KernelStep


def _clipped_step(lin):
    def step(x):
        lin(x).square().sum().backward()
        return jt.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
    return step


def _lin():
    jt.manual_seed(0)
    return jt.nn.Linear(8, 5)


def _kernels(ex):
    return [list(s.kernel.source.ops) for s in ex.steps if isinstance(s, KernelStep)]


def test_a_bias_gradient_norm_is_one_kernel_after_its_header(monkeypatch):
    x = jt.randn(3, 4, 8, generator=jt.Generator().manual_seed(1))
    lin = _lin()
    ex = jt.compile(_clipped_step(lin)).lower(x).executable
    (group,) = [g for g in ex.groups if [n.op.name for n in g.nodes] == ["as_strided", "mul", "sum", "sqrt"]]
    view, rest = executor.split_refused(group)
    assert view.kind == "view" and rest.kind == "reduction" and [n.op.name for n in rest.nodes] == ["mul", "sum", "sqrt"]
    assert rest.inputs == view.outputs and rest.outputs == [group.nodes[-1].outputs[0]]
    assert group.outputs == [view.outputs[0], group.nodes[-1].outputs[0]]  # (the gradient, a group output)
    kernels = _kernels(ex)
    assert kernels.count(["mul", "sum", "sqrt"]) == 2 and ["sqrt"] not in kernels  # (the weight's and the bias's)
    assert any(isinstance(s, EagerStep) and [n.op.name for n in s.nodes] == ["as_strided"] for s in ex.steps)
    norm = jt.compile(_clipped_step(lin))(x)
    grads = [p.grad.numpy().copy() for p in lin.parameters()]

    monkeypatch.setattr(executor, "split_refused", lambda group: [executor._alone(n) for n in group.nodes])
    lin_before = _lin()
    before = jt.compile(_clipped_step(lin_before)).lower(x).executable
    assert ["sqrt"] in _kernels(before)  # (one kernel per node, as before)
    norm_before = jt.compile(_clipped_step(lin_before))(x)
    assert norm.numpy().tobytes() == norm_before.numpy().tobytes()
    assert all(a.tobytes() == p.grad.numpy().tobytes() for a, p in zip(grads, lin_before.parameters()))

    tlin = torch.nn.Linear(8, 5)
    with torch.no_grad():
        for tp, p in zip(tlin.parameters(), _lin().parameters()):
            tp.copy_(torch.from_numpy(p.detach().numpy()))
    tlin(torch.from_numpy(x.numpy())).square().sum().backward()
    tnorm = torch.nn.utils.clip_grad_norm_(tlin.parameters(), 1.0)
    np.testing.assert_allclose(norm.numpy(), tnorm.numpy(), rtol=1e-5)
    for g, tp in zip(grads, tlin.parameters()):
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=1e-5, atol=1e-6)

"""Winograd convolutions (`nn.functional._winograd_conv`) only where exact: in compiled calls, whose graphs check each
Winograd result and its gradient finite and, where one is not (an infinity or NaN among the inputs, weights or
gradients, which the transforms make NaN where the direct sum keeps an infinity), rerun the call eagerly
(`ops.value_checks.EagerRerun`) before writing anything; eager calls keep the direct GEMM."""

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from tests.codegen.test_dcgan56 import conv_step, jitorch_operands, operands

INF, NAN = float("inf"), float("nan")


def nonfinite(x, weight, g, where):
    """Copies of the operands with infinities or a NaN put into ``where``'s."""
    x, weight, g = x.clone(), weight.clone(), g.clone()
    if where == "input":
        x[0, 3, 1, 2], x[-1, 0, -1, -1] = INF, -INF
    elif where == "weight":
        weight[1, 2, 3, 0] = NAN
    elif where == "gradient":
        g[0, 1, 1, 0] = INF
    return x, weight, g


def torch_step(transposed, x, weight, g):
    """Torch's convolution and its gradients, in float64: sums over the padded input as jitorch's direct GEMM (its
    float32 oneDNN kernels skip the padding, where a NaN weight or an infinite gradient meets zeros: fewer NaNs)."""
    x, weight, g = x.double(), weight.double(), g.double()
    xr, wr = x.clone().requires_grad_(), weight.clone().requires_grad_()
    fn = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d
    y = fn(xr, wr, stride=2, padding=1)
    return (y, *torch.autograd.grad(y, (xr, wr), g))


@pytest.mark.parametrize("transposed", [False, True])
def test_infinities_and_nans_in_inputs_weights_or_gradients_give_torchs_values(transposed):
    """One graph for all (a call reruns eagerly, not a retrace): finite operands take its nine products (which round
    otherwise than eager's direct GEMM), non-finite ones give torch's infinities and NaNs where they are, eager's
    values bit for bit."""
    step = conv_step(transposed)
    compiled = jt.compile(step)
    base = operands(transposed, 2, 32, 32, 4, 4, 1, torch.float32)
    for where in ("none", "input", "weight", "gradient"):
        operands_ = nonfinite(*base, where)
        expected = torch_step(transposed, *operands_)
        args = jitorch_operands(*operands_)
        got, eager = compiled(*args), step(*args)
        for a, b, c in zip(got, expected, eager):
            a, b, c = (t.detach().numpy() for t in (a, b, c))
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)  # (NaNs where torch's, infinities of its signs)
            assert np.array_equal(a, c, equal_nan=True) == (where != "none")
        assert all(np.isfinite(t.detach().numpy()).all() for t in got) == (where == "none")
    graph = compiled.lower(*args).graph
    assert [n.op.name for n in graph.nodes].count("bmm") == 3  # nine products each: forward, both gradients
    assert [n.args[1] for n in graph.nodes if n.op.name == "_check_values"] == ["finite_else_eager"] * 2
    assert len(compiled.cache) == 1


def test_a_training_step_that_meets_an_infinity_updates_its_state_once_as_eagerly():
    """The checks raise before the graph writes the batch norm's running statistics, the parameters and the
    optimizer's buffers: the eager rerun updates them once, as eager's call."""
    def model_and_optimizer():
        jt.manual_seed(0)
        model = jt.nn.Sequential(jt.nn.Conv2d(32, 32, 4, 2, 1, bias=False), jt.nn.BatchNorm2d(32))
        return model, jt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def stepper(model, opt):
        def step(x):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            return loss
        return step

    (model, opt), (twin, twin_opt) = model_and_optimizer(), model_and_optimizer()
    compiled, eager = jt.compile(stepper(model, opt)), stepper(twin, twin_opt)
    x = jt.randn(2, 32, 8, 8)
    bad = x.clone()
    bad[1, 5, 3, 3] = INF
    for inputs in (x, x, bad):
        compiled(inputs)
        eager(inputs)
    assert int(model[1].num_batches_tracked) == int(twin[1].num_batches_tracked) == 3
    state = [*model.state_dict().values(), *(s["momentum_buffer"] for s in opt.state.values())]
    twin_state = [*twin.state_dict().values(), *(s["momentum_buffer"] for s in twin_opt.state.values())]
    for a, b in zip(state, twin_state):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
    assert not np.isfinite(model[1].running_mean.numpy()).all()
    checks = [n.args[1] for n in compiled.lower(x).graph.nodes if n.op.name == "_check_values"]
    assert checks == ["finite_else_eager"] * 2


def test_eager_convolutions_keep_the_direct_gemm(monkeypatch):
    """Eager transforms are many small NumPy passes (session 56: the eager DCGAN step 6-12% slower)."""
    def refused(*args):
        raise AssertionError("an eager convolution took Winograd's transforms")
    monkeypatch.setattr(F, "_winograd_conv", refused)
    monkeypatch.setattr(F, "_winograd_conv_transpose", refused)
    for transposed in (False, True):
        base = operands(transposed, 2, 32, 32, 4, 4, 1, torch.float32)
        for a, b in zip(conv_step(transposed)(*jitorch_operands(*base)), torch_step(transposed, *base)):
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_call_rerun_eagerly_draws_the_random_numbers_an_eager_call_draws():
    """A graph that draws (dropout) and reruns the call eagerly (an infinity met its Winograd products) drew its
    numbers twice: the rerun's dropout mask and every later draw were not eager's. The generators' states are
    taken back to the call's start first, for the call that traces the graph too."""
    def step(x, w, g):
        y = F.dropout(F.conv2d(x, w, stride=2, padding=1), 0.5)
        gx, gw = jt.autograd.grad(y, (x, w), g)
        return y, gx, gw
    finite = operands(False, 2, 32, 32, 4, 4, 1, torch.float32)
    compiled = jt.compile(step)
    for where in ("gradient", "none", "gradient", "input"):  # (the first call traces)
        args = jitorch_operands(*nonfinite(*finite, where))
        results = []
        for fn in (compiled, step):
            jt.manual_seed(3)
            results.append([t.detach().numpy() for t in fn(*args)] + [jt.rand(4).numpy()])
        for a, b in zip(*results):
            if where == "none":  # (the graph's products round otherwise than eager's: its mask is eager's)
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
            else:
                assert np.array_equal(a, b, equal_nan=True), where
    assert len(compiled.cache) == 1

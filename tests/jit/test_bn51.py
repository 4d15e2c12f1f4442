"""A batch norm between two convolutions, in a compiled training step (the dcgan generator's and discriminator's
stages): its backward's per-channel sums all run in one kernel, each recomputing its summand from the gradient,
the input and the output (`recompute.into_reductions`, the leaves another reduction of the same shape reads too
counted once: session 51), where the generator's stage wrote two products in a kernel of their own and summed
each in another (3 kernels and 2 whole-size writes more per batch norm). Values against torch (forward, the
gradients, the running statistics) and compiled against eager, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ir.passes import recompute
from jitorch.jit.executor import KernelStep


def stage(lib, dtype, generator):
    """A dcgan stage: (transposed) convolution, batch norm with its affine parameters set off one and zero,
    ReLU (generator) or LeakyReLU (discriminator), and a last convolution; jitorch's weights."""
    nn = lib.nn
    if generator:
        layers = [nn.ConvTranspose2d(4, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(True),
                  nn.ConvTranspose2d(8, 3, 4, 2, 1, bias=False), nn.Tanh()]
    else:
        layers = [nn.Conv2d(3, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.LeakyReLU(0.2, inplace=True),
                  nn.Conv2d(8, 1, 4, 1, 0, bias=False)]
    net = nn.Sequential(*layers).to(getattr(lib, dtype))
    rng = np.random.default_rng(5)
    with lib.no_grad():
        for p in net.parameters():
            p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape)) * 0.3 + (1 if p.ndim == 1 else 0)))
        net[1].bias.copy_(lib.tensor(rng.standard_normal(8) * 0.2))
    return net


def batch(lib, dtype, generator):
    rng = np.random.default_rng(7)
    shape = (6, 4, 4, 4) if generator else (6, 3, 16, 16)
    return lib.tensor(rng.standard_normal(shape), dtype=getattr(lib, dtype))


def step_of(net):
    """loss = <net(x), target>; backward; the parameters' gradients and the running statistics are the results."""
    def step(x, target):
        net.zero_grad()
        loss = (net(x) * target).sum()
        loss.backward()
        return loss
    return step


def run(lib, dtype, generator, compiled):
    net = stage(lib, dtype, generator)
    x = batch(lib, dtype, generator)
    out_shape = (6, 3, 16, 16) if generator else (6, 1, 5, 5)
    target = lib.tensor(np.random.default_rng(9).standard_normal(out_shape), dtype=getattr(lib, dtype))
    step = step_of(net)
    if compiled:
        step = lib.compile(step)
    for _ in range(2):  # (the second call runs the compiled step; both move the running statistics)
        loss = step(x, target)
    results = [loss] + [p.grad for p in net.parameters()] + [net[1].running_mean, net[1].running_var]
    return [np.asarray(r.detach().numpy(), dtype=np.float64) for r in results]


def backward_sum_kernels(generator):
    """The kernels of the stage's compiled float32 step."""
    net = stage(jt, "float32", generator)
    x = batch(jt, "float32", generator)
    target = jt.ones((6, 3, 16, 16) if generator else (6, 1, 5, 5))
    executable = jt.compile(step_of(net)).lower(x, target).executable
    return [st.kernel.source for st in executable.steps if type(st) is KernelStep]


@pytest.mark.parametrize("generator", [True, False], ids=["relu_generator", "leaky_discriminator"])
def test_batch_norm_backward_sums_run_in_one_kernel_reading_no_written_products(generator, monkeypatch):
    made = backward_sum_kernels(generator)
    # the forward's mean and variance, the loss's sum and the backward's sums in one kernel (4: the bias's, the
    # weight's, the mean's and the variance's)
    sums = [k for k in made if k.kind == "reduction" and len(k.outputs) >= 4]
    assert len(sums) == 1
    assert len([k for k in made if k.kind == "reduction"]) == 4
    monkeypatch.setattr(recompute, "_reduction_reads", lambda *a: {})
    before = backward_sum_kernels(generator)
    # before session 51 the generator's stage wrote the sums' products in a kernel and summed two of them alone
    assert len(before) - len(made) == (3 if generator else 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("generator", [True, False], ids=["relu_generator", "leaky_discriminator"])
def test_batch_norm_stage_step_matches_torch_and_eager(generator, dtype):
    want = run(torch, dtype, generator, compiled=False)
    eager = run(jt, dtype, generator, compiled=False)
    got = run(jt, dtype, generator, compiled=True)
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    for w, e, g in zip(want, eager, got):
        np.testing.assert_allclose(e, w, **tol)
        np.testing.assert_allclose(g, w, **tol)
        np.testing.assert_allclose(g, e, **tol)


@pytest.mark.parametrize("generator", [True, False], ids=["relu_generator", "leaky_discriminator"])
def test_batch_norm_stage_step_bits_do_not_follow_the_thread_count(generator):
    # (the reductions' rule: one summation order whatever the thread count; the compiled steps at 1 and 2
    # threads are two compiles of the same graph, their kernels' bits compared)
    before = jt.get_num_threads()
    try:
        jt.set_num_threads(1)
        one = run(jt, "float32", generator, compiled=True)
        jt.set_num_threads(2)
        two = run(jt, "float32", generator, compiled=True)
    finally:
        jt.set_num_threads(before)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dim", [0, -1])
def test_compiled_sums_of_a_zero_dim_tensor_over_its_dim_compile(dim):
    """A 0-d tensor's dim 0 (or -1) names its one element: the pass that groups sums by their reduced dims
    took the dim modulo the tensor's zero dims (ZeroDivisionError at compile time, the suite's sweep of sum,
    mean, prod, amax, argmax and vector_norm caught it)."""
    def fn(x):
        return x.sum(dim) + x.mean(dim) * x.amax(dim)

    x = jt.tensor(1.5)
    got = jt.compile(fn)(x)
    want = fn(torch.tensor(1.5))
    assert got.shape == () and float(got) == float(want)

"""Compiled training steps over captured parameters: backward, optimizer update and Python state
(momentum buffers made on the first step, learning rates a scheduler changes) equal eager."""

import numpy as np
import pytest

import jitorch as jt
from jitorch import optim


def make_params(seed=0):
    g = jt.Generator().manual_seed(seed)
    return [jt.randn(6, 5, generator=g).requires_grad_(), jt.zeros(5, requires_grad=True),
            jt.randn(5, 3, generator=g).requires_grad_()]


def data(seed=1):
    g = jt.Generator().manual_seed(seed)
    return jt.randn(8, 6, generator=g), jt.randint(0, 3, (8,), generator=g)


def make_step(params, opt, zero_first=True):
    w1, b1, w2 = params

    def step(x, y):
        if zero_first:
            opt.zero_grad()
        logits = (x @ w1 + b1).relu() @ w2
        loss = -(logits.log_softmax(-1) * jt.eye(3)[y]).sum(-1).mean()
        loss.backward()
        opt.step()
        return loss
    return step


OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "sgd-momentum-dampening": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.3),
    "sgd-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "adam": lambda ps: optim.Adam(ps, lr=0.01),
    "adamw-amsgrad": lambda ps: optim.AdamW(ps, lr=0.01, amsgrad=True),
    "rmsprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
}


def assert_params_close(a, b):
    for p, q in zip(a, b):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_step_equals_eager_over_several_steps(name):
    eager_ps, comp_ps = make_params(), make_params()
    eager_opt, comp_opt = OPTIMIZERS[name](eager_ps), OPTIMIZERS[name](comp_ps)
    eager = make_step(eager_ps, eager_opt)
    compiled = jt.compile(make_step(comp_ps, comp_opt), fullgraph=True)
    x, y = data()
    for _ in range(4):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=2e-5)
        assert_params_close(comp_ps, eager_ps)
        assert_params_close([p.grad for p in comp_ps], [p.grad for p in eager_ps])
    # the first trace made the optimizer's state and served one call; the steady graph is cached
    assert len(compiled.cache) == 1
    for s_eager, s_comp in zip(eager_opt.state.values(), comp_opt.state.values()):
        for k in s_eager:
            np.testing.assert_allclose(s_comp[k].numpy(), s_eager[k].numpy(), rtol=2e-5, atol=2e-6)


def steady_sgd_step():
    """(parameters, optimizer, compiled step, x, y) after two calls: the optimizer's state made and
    the steady graph cached."""
    ps = make_params()
    opt = optim.SGD(ps, lr=0.1, momentum=0.9)
    compiled = jt.compile(make_step(ps, opt))
    x, y = data()
    compiled(x, y)
    compiled(x, y)
    return ps, opt, compiled, x, y


def test_the_steady_graph_updates_parameters_in_place_in_fused_kernels():
    ps, _, compiled, x, y = steady_sgd_step()
    low = compiled.lower(x, y)
    targets = {t.name for t, _ in low.optimized_graph.mutations}
    assert {"w1", "b1", "w2"} <= targets and len(targets) == 6  # three parameters, three momentum buffers
    assert len(low.executable.plan.inplace) == 6
    ptrs = [p.untyped_storage().data_ptr() for p in ps]
    compiled(x, y)
    assert [p.untyped_storage().data_ptr() for p in ps] == ptrs


@pytest.mark.parametrize("name", ["sgd-momentum-dampening", "adamw-amsgrad", "rmsprop"])
def test_a_scheduler_changing_the_learning_rate_needs_no_new_trace(name):
    eager_ps, comp_ps = make_params(), make_params()
    eager_opt, comp_opt = OPTIMIZERS[name](eager_ps), OPTIMIZERS[name](comp_ps)
    eager_sched = optim.lr_scheduler.ExponentialLR(eager_opt, gamma=0.7)
    comp_sched = optim.lr_scheduler.ExponentialLR(comp_opt, gamma=0.7)
    eager, compiled = make_step(eager_ps, eager_opt), jt.compile(make_step(comp_ps, comp_opt), fullgraph=True)
    x, y = data()
    graphs = set()
    for _ in range(12):  # more learning rates than the recompile limit
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=2e-5)
        graphs.update(id(entry.graph) for entry in compiled.cache.values())
        comp_sched.step()
        eager_sched.step()
        assert_params_close(comp_ps, eager_ps)
    # the first call's trace makes the optimizer's state; then one graph reads each new lr
    assert len(graphs) <= 3 and len(compiled.cache) == 1


def test_other_hyperparameters_are_guarded():
    _, opt, compiled, x, y = steady_sgd_step()
    before = next(iter(compiled.cache.values())).graph
    opt.param_groups[0]["momentum"] = 0.5
    compiled(x, y)
    assert next(iter(compiled.cache.values())).graph is not before


def test_gradients_accumulate_across_calls_without_zero_grad():
    eager_ps, comp_ps = make_params(), make_params()

    def make(ps):
        w1, b1, w2 = ps

        def step(x):
            loss = ((x @ w1 + b1).tanh() @ w2).square().mean()
            loss.backward()
            return loss
        return step

    eager, compiled = make(eager_ps), jt.compile(make(comp_ps))
    x, _ = data()
    for _ in range(3):
        compiled(x)
        eager(x)
        assert_params_close([p.grad for p in comp_ps], [p.grad for p in eager_ps])
    assert len(compiled.cache) == 1  # traced once with .grad None, once with .grad a tensor


def test_a_compiled_step_never_leaves_fake_tensors_in_python_state():
    ps = make_params()
    opt = optim.Adam(ps, lr=0.01)
    compiled = jt.compile(make_step(ps, opt))
    x, y = data()
    compiled(x, y)
    for state in opt.state.values():
        for t in state.values():
            t.numpy()  # a fake tensor has no data and would raise
    for p in ps:
        assert p.grad is not None
        p.grad.numpy()


def test_grads_of_parameters_whose_values_the_backward_never_reads_are_still_set():
    # every gradient here is zero whatever the weight is: optimisation drops the weight from the graph,
    # but the call must still set its .grad
    def step(x):
        y = net(x) * 0
        y.sum().backward()
        return net.bias.grad

    net = jt.nn.Linear(3, 2)
    x = jt.randn(4, 3)
    got = jt.compile(step)(x)
    assert got.tolist() == [0.0, 0.0] and net.weight.grad.tolist() == [[0.0] * 3] * 2


def test_hooks_on_an_input_whose_grad_the_step_sets_run_as_in_eager():
    def step(w, x):
        loss = (x @ w).sum()
        loss.backward()
        return loss

    results = []
    for fn in (step, jt.compile(step)):
        seen = []
        w, x = jt.ones(3, 2, requires_grad=True), jt.arange(12.0).reshape(4, 3)
        fn(w, x)  # traced without hooks
        w.grad = None
        w.register_hook(lambda g: seen.append(1) or g * 2)
        fn(w, x)
        results.append((seen, w.grad.tolist()))
    assert results[0] == results[1] and results[0][0] == [1]


def _torch_adamw_run(lrs):
    """The parameters torch's AdamW reaches from `make_params` over `data`, one step per learning rate."""
    import torch
    ps = [torch.tensor(p.detach().numpy(), requires_grad=True) for p in make_params()]
    opt = torch.optim.AdamW(ps, lr=lrs[0])
    x, y = (torch.tensor(t.numpy()) for t in data())
    for lr in lrs:
        opt.param_groups[0]["lr"] = lr
        opt.zero_grad()
        logits = (x @ ps[0] + ps[1]).relu() @ ps[2]
        (-(logits.log_softmax(-1) * torch.eye(3)[y]).sum(-1).mean()).backward()
        opt.step()
    return ps


def test_the_trace_after_the_optimizer_made_its_state_reuses_the_first_compiled_graph():
    # issue 19: the second call of a compiled step traced again (the first had made AdamW's buffers) and
    # compiled that trace from scratch, though it is the same graph
    ps = make_params()
    opt = optim.AdamW(ps, lr=0.01)
    compiled = jt.compile(make_step(ps, opt), fullgraph=True)
    x, y = data()
    lrs = [0.01, 0.05, 0.02]  # a new rate on the second call: the reused graph reads the new trace's
    for lr in lrs:
        opt.param_groups[0]["lr"] = lr
        compiled(x, y)
    assert compiled.reused_compilations == 1
    assert len(compiled.cache) == 1
    assert_params_close(ps, _torch_adamw_run(lrs))


def test_a_trace_after_state_setup_that_differs_from_the_first_is_compiled_anew():
    # SGD's momentum buffer is the gradient on the first step, a running sum afterwards: two graphs
    eager_ps, comp_ps = make_params(), make_params()
    eager = make_step(eager_ps, optim.SGD(eager_ps, lr=0.1, momentum=0.9))
    compiled = jt.compile(make_step(comp_ps, optim.SGD(comp_ps, lr=0.1, momentum=0.9)), fullgraph=True)
    x, y = data()
    for _ in range(3):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=2e-5)
    assert compiled.reused_compilations == 0
    assert_params_close(comp_ps, eager_ps)

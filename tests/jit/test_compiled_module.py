"""`jitorch.compile(module)`: compiled forward, gradients for the module's parameters through one
compiled backward, in-place buffer updates done once, a graph per train/eval mode."""

import numpy as np

import jitorch as jt
from jitorch import nn
from jitorch.nn import functional as F
from tests.support import classifier_step


def cnn():
    jt.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def batch():
    g = jt.Generator().manual_seed(1)
    return jt.randn(5, 1, 8, 8, generator=g), jt.tensor([0, 1, 2, 0, 1])


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol)


def test_compiled_module_gradients_and_running_stats_equal_eager():
    eager, model = cnn(), cnn()
    compiled = jt.compile(model)
    x, y = batch()
    for _ in range(3):
        F.cross_entropy(eager(x), y).backward()
        loss = F.cross_entropy(compiled(x), y)
        assert loss.grad_fn is not None
        loss.backward()
        for p, q in zip(eager.parameters(), model.parameters()):
            close(q.grad, p.grad)
        close(model[1].running_mean, eager[1].running_mean)  # updated once per call, not again in backward
        close(model[1].running_var, eager[1].running_var)
    assert int(model[1].num_batches_tracked) == 3


def test_eval_mode_gets_its_own_graph_and_equals_eager():
    eager, model = cnn(), cnn()
    compiled = jt.compile(model)
    x, _ = batch()
    compiled(x)
    eager(x)
    eager.eval()
    compiled.eval()
    assert not model.training and not compiled.training
    close(compiled(x), eager(x))
    assert len(compiled._by_mode) == 2


def test_compiled_module_wraps_the_original():
    model = cnn()
    compiled = jt.compile(model)
    assert compiled._orig_mod is model
    assert list(compiled.parameters()) == list(model.parameters())
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    assert jt.compile(nn.Linear(2, 3)).out_features == 3  # attributes reach the original
    assert repr(compiled).startswith("OptimizedModule(\n  (_orig_mod): Sequential(")


def test_compiled_module_fuses_kernels():
    model = cnn()
    x, _ = batch()
    low = jt.compile(model).lower(x)
    assert any("relu" in k.ops for k in low.kernels)


def test_a_training_step_over_a_module_and_optimizer_compiles_into_one_graph():
    eager_model, model = cnn(), cnn()
    eager_opt = jt.optim.SGD(eager_model.parameters(), lr=0.05, momentum=0.9)
    opt = jt.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    eager, compiled = classifier_step(eager_model, eager_opt), jt.compile(classifier_step(model, opt), fullgraph=True)
    x, y = batch()
    for _ in range(4):
        np.testing.assert_allclose(compiled(x, y).item(), eager(x, y).item(), rtol=1e-5)
    for p, q in zip(eager_model.parameters(), model.parameters()):
        close(q, p)
    close(model[1].running_mean, eager_model[1].running_mean)

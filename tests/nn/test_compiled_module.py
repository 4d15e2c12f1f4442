"""`jitorch.compile(module)`: compiled forward, gradients for the module's parameters through one
compiled backward, in-place buffer updates done once, a graph per train/eval mode."""

import warnings

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn
from jitorch.runtime.storage import Storage
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


class CausalMix(nn.Module):
    """Caches a causal mask on itself in ``forward``, as transformer language models do; ``how`` stores it as
    a plain attribute or a registered buffer."""

    def __init__(self, how="attribute"):
        super().__init__()
        jt.manual_seed(0)
        self.proj = nn.Linear(4, 4)
        self.how = how
        if how == "attribute":
            self.mask = None

    def forward(self, x):
        t = x.shape[0]
        if getattr(self, "mask", None) is None:
            mask = jt.ones(t, t).tril()
            if self.how == "attribute":
                self.mask = mask
            else:
                self.register_buffer("mask", mask)
        return self.mask @ self.proj(x)


def test_compiled_module_caching_a_mask_in_forward_stays_usable_eager_and_compiled():
    for how in ("attribute", "buffer"):
        x = jt.randn(3, 4)
        expected = CausalMix(how)(x)
        model = CausalMix(how)
        compiled = jt.compile(model)
        with pytest.warns(UserWarning, match=r"stores tensors it computes in Python state \(self\.mask\)"):
            first = compiled(x)
        assert type(model.mask._storage) is Storage  # a real tensor, not the trace's stand-in
        assert jt.allclose(first, expected)
        assert jt.allclose(model(x), expected)  # eagerly
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert jt.allclose(compiled(x), expected) and jt.allclose(compiled(x), expected)
        assert "mask" in compiled.lower(x).graph.constants  # the later calls run a graph reading the cached mask


def test_a_trace_that_fails_after_storing_a_tensor_leaves_the_module_as_it_was():
    class Fails(nn.Module):
        def forward(self, x):
            self.last = x * 2
            return x if x.sum() > 0 else -x  # data-dependent: the trace fails

    model = Fails()
    with pytest.raises(jt.jit.TraceError, match="on a traced tensor"):
        jt.compile(model, fullgraph=True)(jt.ones(2))
    assert "last" not in vars(model)
    assert model(jt.ones(2)).tolist() == [1.0, 1.0] and model.last.tolist() == [2.0, 2.0]


def test_compiled_function_storing_a_tensor_every_call_settles_on_eager(monkeypatch):
    monkeypatch.setattr(jt.jit.config, "recompile_limit", 3)

    class Keeps:
        last = None

        def __call__(self, x):
            self.last = x + 1
            return x * 2

    keeps = Keeps()
    compiled = jt.compile(keeps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            assert compiled(jt.full((2,), float(i))).tolist() == [2.0 * i] * 2
            assert keeps.last.tolist() == [i + 1.0] * 2


def test_the_training_flags_a_compiled_module_specialises_to_are_read_on_every_call():
    from jitorch.nn.modules.compiled import _training_flags
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(shared, nn.Dropout(0.5), shared), nn.ReLU())
    model[1][1].eval()
    assert _training_flags(model) == tuple(m.training for m in model.modules())  # each module once, in order
    compiled = jt.compile(model)
    x = jt.randn(3, 4)
    compiled(x)
    model[1][1].train()  # a flag set between calls, nothing else: a graph of its own
    compiled(x)
    assert len(compiled._by_mode) == 2

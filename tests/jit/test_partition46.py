"""jit.partition (session 46): what the cut of a compiled module's joint trace saves.

A recomputed chain reads the call's inputs and captured tensors (the forward saving a copy of those eager's
backward does not read), and a chain is computed again where that makes less memory traffic without saving more
bytes (a GELU's pre-activation ``mm + b``, dropout's scaled mask). Each case checks the saved values, the graphs'
ops, and the gradients against the same cut saving everything (bit for bit), eager and torch."""

import contextlib
import copy

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch import nn
from jitorch.jit import partition


def _split(module):
    """The split of a compiled module's one cached call."""
    (entry,) = [e for f in module._by_mode.values() for e in f.cache.values()]
    assert entry.split is not None and entry.backward is None  # (the cut ran, not the recomputing form)
    return entry.split


def _saved(split):
    forward = split.forward.graph
    return forward.outputs[len(forward.outputs) - split.saved:]


def _ops(graph):
    return [node.op.name for node in graph.nodes]


def _torch_copy(model, build):
    reference = build(torch)
    reference.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()})
    return reference


@contextlib.contextmanager
def _everything_saved():
    """Compiles inside cut their joint traces computing no chain again in the backward (views are still made
    again)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(partition, "_recomputed", lambda *args: set())
        yield


def _run_saving_everything(model, *args):
    """The gradients of ``model`` (a module), compiled to save every value its backward reads, after backward of
    its output's sum at ``args``."""
    twin = jt.compile(copy.deepcopy(model))
    with _everything_saved():
        twin(*args).sum().backward()
    assert "clone" not in [v.node.op.name for v in _saved(_split(twin))]
    return [p.grad.numpy() for p in twin.parameters()]


def _check_against_eager(model, run):
    """Run ``run(module)`` (a forward and backward) on ``model`` eagerly, compiled, and compiled saving everything:
    the compiled gradients are the last's bit for bit and eager's to float32 rounding. Returns the compiled
    module."""
    compiled, twin = jt.compile(copy.deepcopy(model)), jt.compile(copy.deepcopy(model))
    run(model)
    run(compiled)
    with _everything_saved():
        run(twin)
    for (name, a), b, c in zip(compiled.named_parameters(), twin.parameters(), model.parameters()):
        assert a.grad.numpy().tobytes() == b.grad.numpy().tobytes(), name
        np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)
    return compiled


def _assert_grads(compiled, everything_saved, eager, reference):
    """``compiled``'s parameter gradients are those of the same cut saving everything bit for bit (what the
    backward computes again has the forward's bits), and eager's and torch's (``reference``) to float32
    rounding."""
    for (name, a), b, c, d in zip(compiled.named_parameters(), everything_saved, eager.parameters(),
                                  reference.parameters()):
        assert a.grad.numpy().tobytes() == b.tobytes(), name
        np.testing.assert_allclose(a.grad.numpy(), c.grad.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)
        np.testing.assert_allclose(a.grad.numpy(), d.grad.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)


class _Classifier:
    """A linear layer and a GELU before a linear decoder whose loss (cross-entropy) the module computes."""

    @staticmethod
    def build(lib):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = lib.nn.Linear(12, 32)
                self.out = lib.nn.Linear(32, 10)

            def forward(self, x, y):
                return lib.nn.functional.cross_entropy(self.out(lib.nn.functional.gelu(self.fc(x))), y)
        lib.manual_seed(0)
        return Net()


def _classifier_case():
    model = _Classifier.build(jt)
    compiled = jt.compile(copy.deepcopy(model))
    reference = _torch_copy(model, _Classifier.build)
    rng = np.random.default_rng(46)
    x = rng.standard_normal((16, 12)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    return model, compiled, reference, x, y


def test_a_gelu_pre_activation_is_computed_again_from_the_product_and_a_copy_of_the_bias():
    model, compiled, reference, x, y = _classifier_case()
    model(jt.tensor(x), jt.tensor(y)).backward()
    compiled(jt.tensor(x), jt.tensor(y)).backward()
    reference(torch.from_numpy(x), torch.from_numpy(y)).backward()
    split = _split(compiled)
    saved = _saved(split)
    kinds = sorted((v.node.op.name, tuple(v.type.shape)) for v in saved)
    # the first layer's product (16, 32) and a copy of its bias, not mm + b; the decoder's product is the logits
    assert ("matmul", (16, 32)) in kinds and ("clone", (32,)) in kinds
    assert ("add", (16, 32)) not in kinds
    # a copy of the GELU's bias (the decoder's log-probs are saved: nothing reads its bias again)
    (clone,) = [v for v in saved if v.node.op.name == "clone"]
    assert clone.node.args[0] is split.forward.graph.constants["fn.fc.bias"]
    # the backward adds the saved copy to the saved product, and reads no captured bias
    backward = split.backward.graph
    copy_input = backward.inputs[len(split.inputs_read) + list(saved).index(clone)]
    (add,) = [n for n in backward.nodes if n.op.name == "add" and copy_input in n.input_values()]
    assert add.args[0] in backward.inputs and tuple(add.args[0].type.shape) == (16, 32)
    assert "fn.fc.bias" not in backward.constants
    _assert_grads(compiled, _run_saving_everything(model, jt.tensor(x), jt.tensor(y)), model, reference)


def test_a_bias_written_between_the_forward_and_the_backward_changes_no_gradient_and_raises_nothing():
    """As eagerly, where GELU saved its input and nothing of the bias: the backward reads the forward's copy."""
    model, _, _, x, y = _classifier_case()

    def run(m):
        loss = m(jt.tensor(x), jt.tensor(y))
        with jt.no_grad():
            m.fc.bias.add_(1.0)
        loss.backward()
    compiled = _check_against_eager(model, run)
    assert "clone" in [v.node.op.name for v in _saved(_split(compiled))]


def test_a_layer_norm_output_a_product_reads_is_saved_not_written_again_by_the_backward():
    """Computing it again from the saved ``x - mean``, ``rstd``, the weight and a copy of the bias would be fewer
    bytes saved, but the weight gradient's product reads it: the backward would write it again."""
    x = jt.randn(6, 8)
    compiled = _check_against_eager(nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 4)),
                                    lambda m: m(x).square().sum().backward())
    saved = [v.node.op.name for v in _saved(_split(compiled))]
    assert "add" in saved and "clone" not in saved  # (the layer norm's output, ... * w + b)


def test_dropout_saves_its_draws_not_the_scaled_mask():
    """The scaled mask ``bernoulli / (1 - p)`` is computed again from the draws (in memory anyway: a random op's
    result) rather than written by the forward's kernel: as many bytes, less traffic. The same draws, so the
    gradients are eager's under the same seed."""
    x = jt.randn(5, 6)

    def run(m):
        jt.manual_seed(3)
        m(x).square().sum().backward()
    compiled = _check_against_eager(nn.Sequential(nn.Linear(6, 16), nn.Dropout(0.25), nn.Linear(16, 3)), run)
    split = _split(compiled)
    saved = [v.node.op.name for v in _saved(split)]
    assert "bernoulli.float_" in saved and "true_divide" not in saved
    assert "true_divide" in _ops(split.backward.graph)


def test_exp_of_a_product_whose_operand_the_backward_reads_is_computed_again_from_the_products():
    """exp(a * b) (b detached): the backward reads b anyway; a is a product's result, in memory anyway, as many
    bytes as exp(a * b), which the forward's kernel would write only to save it."""
    f = jt.compile(lambda x, w1, w2: ((x @ w1.t()) * (x @ w2.t()).detach()).exp().sin())
    rng = np.random.default_rng(1)
    # halved: at unit scale exp(a * b) reaches 19223, where sin's gradient turns an ulp of exp into 1% (torch's
    # float32 gradient is 1.1% off float64's there, jitorch's 0.09%, and which is closer depends on the CPU)
    args = [(rng.standard_normal((6, 5)) / 2).astype(np.float32) for _ in range(3)]
    ours = [jt.from_numpy(a).requires_grad_() for a in args]
    f(*ours).sum().backward()
    (entry,) = f.cache.values()
    split = entry.split
    assert sorted(v.node.op.name for v in _saved(split)) == ["matmul", "matmul"]
    assert "exp" in _ops(split.backward.graph)
    theirs = [torch.from_numpy(a).requires_grad_() for a in args]
    ((theirs[0] @ theirs[1].t()) * (theirs[0] @ theirs[2].t()).detach()).exp().sin().sum().backward()
    for a, b in zip(ours[:2], theirs[:2]):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt-4x128", "lstm"])
def test_compiled_model_steps_of_the_benchmark_models_keep_their_bits(name):
    """benchmarks/models.py's quick workloads, three steps each from the same seed: jitorch.compile(model)'s losses
    and parameters are those of the cut saving everything bit for bit (the GELU inputs and dropout masks computed
    again in the backward), and eager's within float32 rounding (the kernels' sums associate otherwise)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    import models

    def steps(system):
        w = models.workload(jt, name, True)
        nets = w.nets if system == "eager" else tuple(jt.compile(m) for m in w.nets)
        jt.manual_seed(5)
        with _everything_saved() if system == "everything saved" else contextlib.nullcontext():
            losses = [float(w.step(nets, *w.batch)) for _ in range(3)]
        return losses, [p.detach().numpy().copy() for m in w.nets for p in m.parameters()], nets
    losses, params, nets = steps("compiled")
    kept_losses, kept_params, _ = steps("everything saved")
    eager_losses, eager_params, _ = steps("eager")
    assert losses == kept_losses
    for a, b, c in zip(params, kept_params, eager_params):
        assert a.tobytes() == b.tobytes()
        np.testing.assert_allclose(a, c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    saved = [v.node.op.name for n in nets for v in _saved(_split(n))]
    if name == "lstm":
        assert "bernoulli.float_" in saved and "true_divide" not in saved
    else:  # (a copy of each MLP's first bias, not its pre-activation)
        assert saved.count("clone") == 4 and "_normal_cdf" not in saved


def test_an_input_a_recomputed_chain_reads_is_copied_by_the_forward_and_may_be_written_before_the_backward():
    """Seed 2. ``gelu(x @ w + b)`` with the bias an input of the call: the backward computes ``x @ w + b`` again from
    the saved product and the forward's copy of ``b`` (eager's GELU saved its input, and nothing of ``b``), so a
    write into ``b`` after the call changes no gradient."""
    def fn(x, w, b):
        return nn.functional.gelu(x @ w + b)
    f = jt.compile(fn)
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((32, 6), (6, 16), (16,)))
    grads = []
    for run in (f, fn):
        args = [jt.tensor(x), jt.tensor(w).requires_grad_(), jt.tensor(b)]
        out = run(*args)
        args[2].add_(1.0)
        out.sum().backward()
        grads.append(args[1].grad.numpy())
    (entry,) = f.cache.values()
    split = entry.split
    clones = [v for v in _saved(split) if v.node.op.name == "clone"]
    assert [c.node.args[0] for c in clones] == [split.forward.graph.inputs[2]]
    assert "add" not in [v.node.op.name for v in _saved(split)] and 2 not in split.inputs_read
    np.testing.assert_allclose(grads[0], grads[1], rtol=2e-5, atol=2e-6)
    reference = torch.from_numpy(w).requires_grad_()
    torch.nn.functional.gelu(torch.from_numpy(x) @ reference + torch.from_numpy(b)).sum().backward()
    np.testing.assert_allclose(grads[0], reference.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_a_bias_of_an_eighth_of_the_pre_activation_counts_as_saved_bytes():
    """``gelu(x @ w + b)`` over 8 rows: the bias is no broadcast operand (`partition.SMALL_LEAF`), so the product
    and the bias's copy would be more bytes than ``x @ w + b``, which stays saved."""
    f = jt.compile(lambda x, w, b: nn.functional.gelu(x @ w + b))
    f(jt.randn(8, 6), jt.randn(6, 16, requires_grad=True), jt.randn(16)).sum().backward()
    (entry,) = f.cache.values()
    assert [v.node.op.name for v in _saved(entry.split)] == ["add"]

"""The fuzzer's networks trained under ``jitorch.compile(model)`` (``--models``, `models.generate_model`): the bugs its
first campaigns found, each with its seed, and fixed seeds of the new kinds checked against eager jitorch and torch
with the compiler parts they reach (`reach.PARTS`, the fusion forms among them)."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.fuzz.models import SCENARIOS, check_model, generate_model, model_source
from tests.fuzz.reach import Reach



def test_every_scenario_and_layer_kind_is_drawn():
    """Over 200 seeds every scenario is drawn, and the layers of the forms the fusion and the cut meet: two
    reductions over one row, exponentials read by two reductions and a product, a bias and an activation, shared,
    tied, transposed and sliced parameters, a buffer written under no_grad."""
    tags = {t for seed in range(200) for t in generate_model(seed).tags}
    assert set(SCENARIOS) <= tags
    assert {"two reductions", "exp reductions", "bias act", "shared layer", "tied", "param transposed",
            "param sliced", "buffer no_grad", "detach", "sum and logsumexp"} <= tags


def test_a_seed_draws_the_same_program():
    assert model_source(generate_model(31)) == model_source(generate_model(31))
    assert generate_model(31) != generate_model(32)


def _linear_weight_written(T, input_requires_grad):
    """Linear's weight written under no_grad between the forward and the backward: the error, or the gradients."""
    layer = T.nn.Linear(3, 2)
    with T.no_grad():
        layer.weight.copy_(T.tensor([[0.5, -1.0, 0.25], [1.5, 0.75, -0.5]]))
        layer.bias.copy_(T.tensor([0.25, -0.5]))
    x = T.tensor([[1.0, 2.0, -1.0], [0.5, -0.25, 3.0]], requires_grad=input_requires_grad)
    y = T.tanh(layer(x))
    with T.no_grad():
        layer.weight.mul_(0.5)
    try:
        (y * T.tensor([[1.0, -2.0], [0.5, 3.0]])).sum().backward()
    except RuntimeError as e:
        return type(e)
    return layer.weight.grad.numpy(), layer.bias.grad.numpy()


def test_linear_saves_its_weight_only_where_the_input_wants_a_gradient_seed_28():
    """Fuzz seed 28 of ``--models`` (a linear layer's weight zeroed under no_grad after the forward, the input
    requiring no grad): jitorch's ``linear`` rule saved the weight and the input whatever wanted a gradient, so the
    backward raised "modified by an inplace operation" where torch's (``addmm`` saves ``mat2`` only for ``mat1``'s
    gradient) gives the weight's gradient. Now each formula saves its own operand; with an input that requires grad
    both raise."""
    got, want = _linear_weight_written(jt, False), _linear_weight_written(torch, False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b.numpy() if hasattr(b, "numpy") else b, rtol=1e-6)
    assert _linear_weight_written(jt, True) is RuntimeError and _linear_weight_written(torch, True) is RuntimeError
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check_model(generate_model(28)).mismatches


def _clone_reused(T):
    leaf = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = leaf.clone()
    (x * 2).sum().backward()
    (x.view(3, 1).expand(3, 2) + 1).sum().backward()  # the clone's node again, after a backward freed the graph
    return leaf.grad.numpy()


def test_a_node_that_saved_nothing_runs_in_a_second_backward_seed_32():
    """Fuzz seed 32 of ``--models`` (an input cloned from a leaf, a forward and backward, then a second forward of
    the same clone and its backward): the clone's node was freed by the first backward and raised "Trying to
    backward through the graph a second time", where torch's runs again any node that saved no tensor. A node whose
    rule reads nothing (a clone, a view, an add) now keeps what it holds; one that read a Python number still frees
    it and raises, as torch's (``x * 2``: torch wraps the 2 in a saved tensor)."""
    np.testing.assert_array_equal(_clone_reused(jt), _clone_reused(torch))
    for T in (jt, torch):
        y = T.ones(2, requires_grad=True).clone() * 2
        y.sum().backward()
        with pytest.raises(RuntimeError, match="a second time"):
            y.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not check_model(generate_model(32)).mismatches


def _function_reused(T, saves):
    class Double(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if saves:
                ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            if saves:
                ctx.saved_tensors
            return g * 2

    x = T.ones(2, requires_grad=True)
    y = Double.apply(x).sum()
    y.backward()
    try:
        y.backward()
    except RuntimeError as e:
        return type(e)
    return x.grad.tolist()


def test_a_custom_function_or_compiled_call_that_saved_nothing_runs_in_a_second_backward():
    """As a registry op's node (seed 32 above), a custom Function that saved no tensor runs again in a second
    backward, as torch's (jitorch's raised "backward through the graph a second time" at any function node once
    freed); one that saved a tensor still raises there. A compiled call is such a function: ``(x + 1).sum()``
    compiled runs twice as eagerly, ``x.exp().sum()`` raises as eagerly."""
    for saves in (False, True):
        assert _function_reused(jt, saves) == _function_reused(torch, saves)
    assert _function_reused(jt, False) == [4.0, 4.0] and _function_reused(jt, True) is RuntimeError
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f, raises in ((lambda t: (t + 1).sum(), False), (lambda t: t.exp().sum(), True)):
            x = jt.ones(2, requires_grad=True)
            y = jt.compile(f)(x)
            y.backward()
            if raises:
                with pytest.raises(RuntimeError, match="a second time"):
                    y.backward()
            else:
                y.backward()
                assert x.grad.tolist() == [2.0, 2.0]


def test_a_compiled_gradient_penalty_of_a_backward_reading_nothing_that_requires_grad_raises_seed_183():
    """A gradient penalty through a compiled call whose backward read only values without history (an exp's saved
    result, a cotangent of ones) silently lost its second-order term: the gradients had no history and no anchor to
    raise from (d/dx of exp(x)'s gradient squared came out as exp(x) alone, torch's exp(x) + 2 exp(2x)). Found
    writing the ``double backward`` scenario of ``--models`` (its frozen form reaches it); now differentiating them
    raises torch.compile's error, as it did where the backward read a tensor that requires grad."""
    x = jt.tensor([0.5, -1.0, 2.0], requires_grad=True)
    run = jt.compile(lambda t: jt.exp(t).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = run(x)
    g, = jt.autograd.grad(loss, [x], create_graph=True)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="does not currently support double backward"):
        (loss + (g * g).sum()).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = check_model(generate_model(183))
    assert not outcome.mismatches and "double backward" in outcome.runs["compiled"].error


def test_a_compiled_layer_norm_raises_where_eager_does_after_its_input_is_written_seed_44():
    """Fuzz seed 44 of ``--models`` (minimised: one layer norm; its input written after the forward): torch's and
    eager jitorch's backward raise "modified by an inplace operation" (their node saved the input); the compiled
    call's backward graph reads values its forward saved (the row statistics and the normalised rows), checks no
    version of the input and gives the gradient of the forward's values."""
    def written(run, x):
        y = run(x)
        x.mul_(2)
        (y * jt.arange(5.0)).sum().backward()

    layer = jt.nn.LayerNorm(5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        written(layer, jt.tensor([[3.0, 1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 0.0, 1.0, -1.0]]))
    with warnings.catch_warnings(), pytest.raises(RuntimeError, match="modified by an inplace operation"):
        warnings.simplefilter("ignore")
        written(jt.compile(layer), jt.tensor([[3.0, 1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 0.0, 1.0, -1.0]]))


def _input_written(T, activation):
    """The error type of a backward after ``activation``'s input was written, or None."""
    leaf = T.tensor([[0.5, -1.0, 2.0], [1.5, -0.25, 0.75]], requires_grad=True)
    h = leaf.clone()
    y = activation(T.nn.functional, h)
    h.add_(1.0)
    try:
        (y * 1.5).sum().backward()
    except RuntimeError as e:
        return type(e)
    return None


@pytest.mark.parametrize("activation", [lambda F, h: F.leaky_relu(h, 0.1), lambda F, h: F.softplus(h),
                                        lambda F, h: F.elu(h)], ids=["leaky_relu", "softplus", "elu"])
def test_an_activation_whose_input_is_written_raises_as_torch_seed_2042(activation):
    """Fuzz seed 2042 of ``--models`` (minimised: ``F.leaky_relu`` of the input, the input written after the
    forward): torch's leaky_relu, softplus and elu save their input, and their backward raises "modified by an
    inplace operation"; jitorch's compose them of ops that save none (leaky_relu a product by a factor chosen in the
    forward), and its backward gives the gradient of the forward's values."""
    assert _input_written(torch, activation) is RuntimeError
    assert _input_written(jt, activation) is RuntimeError


# (seed, ``rows`` share, the parts its check reaches). Found by `--models --reach`; seed 10 at ``rows=0.5`` draws a
# normalisation written as two reductions, exponentials read by two reductions and a product, row softmaxes, a
# running mean written and not read, and a parameter written between the forward and the backward.
SEEDS = [
    (10, 0.5, {"split", "split saved", "split recomputed", "sibling reductions", "prologue out", "column sum",
              "row softmax"}),
]


@pytest.mark.parametrize("seed, rows, parts", SEEDS)
def test_model_seeds_run_alike_and_reach_their_parts(seed, rows, parts):
    """Fixed ``--models`` seeds: torch, eager and compiled agree (values, parameters, gradients, errors) and the
    check reaches the parts listed: the fusion forms a multi-output reduction kernel and a bias's gradient through
    an activation meet, and the row softmax kernel."""
    program = generate_model(seed, rows)
    assert {"write param", "two reductions", "exp reductions", "row softmax", "buffer no_grad unread"} <= set(
        program.tags)
    with warnings.catch_warnings(), Reach() as reach:
        warnings.simplefilter("ignore")
        found = check_model(program).mismatches
        reached = reach.program(True)
    assert not found, "\n".join(str(m) for m in found)
    assert parts <= reached, parts - reached

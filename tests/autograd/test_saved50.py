"""A write into what a compiled call returned raises at its backward exactly where torch's does, and changes no
gradient where it does not.

A compiled call's backward graph reads the values its forward graph saved. Where one of them is a value the call
also returns (softsign's quotient, which the gradient formula ``-g * (x / d) / d`` reads after the joint trace merged
its ``x / d`` with the forward's), a write into the returned tensor raised where torch's node, which saved the
operands, does not. The cut (`jit.partition`) now gives the backward no returned value that eager's nodes did not
save (`Graph.saved_eagerly`): it computes it again from what it reads anyway, or reads a copy the forward saves. A
call whose backward recomputes its forward (one that writes into an input) checks the versions of the returned
values eager's nodes save (an exp's result), which it used not to. Each write below is checked against torch and
eager jitorch: a raise where torch raises, otherwise torch's gradients; a write into a saved value that the backward
did not notice would give the gradient of the written values.
"""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from tests.autograd.test_saved_versions48 import CASES, _grad_sets, _values


def _returned(T, y, tensors):
    """The forms a call returns its op's result in: a view of it, a product the op's backward may compute too (sqrt's
    gradient divides by ``2 * result``), and the exp of it, whose node saves what it returns."""
    return y.unsqueeze(0), y * 2, y.exp()


def _outcome(T, run, name, which, write):
    """("raise",) where the backward raises torch's modified-by-an-inplace-operation error, else ("ok", the leaves'
    gradients); ``run(T, *tensors)`` gives a tuple of outputs, of which the one at ``write`` (None: none) is written."""
    specs = CASES[name][1]
    leaves = [T.tensor(v, requires_grad=bool(w)) for v, w in zip(_values(name, specs), _grad_sets(specs)[which])]
    outs = run(T, *[t.clone() if t.requires_grad else t for t in leaves])
    if write is not None:
        outs[write].add_(1.0)
    try:
        sum((o * (1.5 + k)).sum() for k, o in enumerate(outs)).backward()
    except RuntimeError as e:
        if "modified by an inplace operation" in str(e):
            return ("raise",)
        raise
    return ("ok", [None if t.grad is None else t.grad.detach().numpy().copy() for t in leaves])


def _same(got, want):
    assert got[0] == want[0], (got[0], want[0])
    if got[0] == "ok":
        for g, w in zip(got[1], want[1]):
            assert (g is None) == (w is None)
            if w is not None:  # (float32 sums of terms that cancel: instance norms' gradients are near zero)
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(w).max())))


def _eager(name):
    call = CASES[name][0]
    return lambda T, *t: _returned(T, call(T, *t), t)


_COMPILED: dict = {}


def _compiled(name, which, writes_input=False):
    """One compiled call per op and grad set, reused by each write; ``writes_input``: the call also writes into an
    input of its own (a step counter), so that its backward recomputes its forward instead of being cut from it."""
    key = (name, which, writes_input)
    if key not in _COMPILED:
        call = CASES[name][0]
        if writes_input:
            compiled = jt.compile(lambda count, *t: (count.add_(1), _returned(jt, call(jt, *t), t))[1])
            _COMPILED[key] = compiled, lambda T, *t: compiled(jt.zeros(()), *t)
        else:
            compiled = jt.compile(lambda *t: _returned(jt, call(jt, *t), t))
            _COMPILED[key] = compiled, lambda T, *t: compiled(*t)
    return _COMPILED[key]


def _split(compiled):
    (entry,) = compiled.cache.values()
    return entry.split


# the ops whose compiled backward read a returned value before (quotients, sqrt's and std's doubled results, var's
# mean) and ops whose nodes save what they return, which a write must still make raise
# (tests/autograd/test_saved_versions48.py's other ops, each grad set, and more returned forms were swept once: none
# differed from eager jitorch)
SWEPT = ["softsign", "normalize", "div", "sqrt", "std", "var", "exp", "sigmoid", "softmax", "relu", "cumprod",
         "logsumexp", "norm", "matmul", "layer_norm", "mse_loss"]


@pytest.mark.parametrize("name", SWEPT)
def test_a_write_into_each_value_a_compiled_call_returns_raises_where_torchs_does_else_changes_no_gradient(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled, run = _compiled(name, "all")
        for write in (None, 0, 1, 2):
            want = _outcome(torch, _eager(name), name, "all", write)
            _same(_outcome(jt, _eager(name), name, "all", write), want)
            _same(_outcome(jt, run, name, "all", write), want)
    # and the cut's own account: the forward graph saves no returned value but those eager's nodes save
    split = _split(compiled)
    graph = split.forward.graph
    n = len(graph.outputs) - split.saved
    assert not {id(v) for k, v in enumerate(graph.outputs[:n]) if k not in split.checked_outputs} & \
        {id(v) for v in graph.outputs[n:]}


@pytest.mark.parametrize("name", ["exp", "softsign", "div", "softmax", "relu", "layer_norm"])
def test_a_compiled_call_that_recomputes_its_forward_raises_where_torch_does_after_a_write_into_what_it_returned(name):
    """A call that writes into an input recomputes its forward in its backward, from its inputs: it checked their
    versions alone, and a write into its exp's result gave the gradient of the forward's values where torch raises."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled, run = _compiled(name, "all", writes_input=True)
        for write in (None, 0, 1, 2):
            _same(_outcome(jt, run, name, "all", write), _outcome(torch, _eager(name), name, "all", write))
    assert _split(compiled) is None


@pytest.mark.parametrize("name, which", [("softsign", "all"), ("normalize", "all"), ("div", "all"), ("div", "rest")])
def test_a_write_into_a_compiled_quotient_raises_nothing_where_torchs_node_saved_its_operands(name, which):
    """softsign's ``x / (1 + |x|)``, normalize's ``x / norm`` and a quotient whose divisor wants a gradient: the
    backward read the returned quotient (its gradient formula's ``x / d``, merged with the forward's), and a write
    into it raised; it now computes the quotient again from the operands that eager's node saved."""
    call = CASES[name][0]
    compiled = jt.compile(lambda *t: call(jt, *t))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _outcome(jt, lambda T, *t: (compiled(*t),), name, which, 0)
    assert got[0] == "ok"
    _same(got, _outcome(torch, lambda T, *t: (call(T, *t),), name, which, 0))
    assert _split(compiled).saved < 3  # (the quotient is computed again: softsign saves its divisor alone)


@pytest.mark.parametrize("name", ["sqrt", "std"])
def test_a_write_into_twice_a_compiled_result_raises_nothing_where_the_backward_doubles_the_result_too(name):
    """sqrt's gradient ``g / (2 * result)`` (std's too): the joint trace merged the backward's ``2 * result`` with a
    returned ``y * 2``, whose write then raised where torch's node, which saved the result, does not."""
    call = CASES[name][0]
    compiled = jt.compile(lambda x: (lambda y: (y, y * 2))(call(jt, x)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for write in (0, 1):
            want = _outcome(torch, lambda T, x: (lambda y: (y, y * 2))(call(T, x)), name, "all", write)
            _same(_outcome(jt, lambda T, x: compiled(x), name, "all", write), want)


def test_a_write_into_the_mean_returned_beside_a_compiled_var_changes_no_gradient():
    """var's gradient reads the mean of its input, which the joint trace merged with a returned mean; torch's node
    saves the input alone. No chain of pointwise ops makes the mean again: the forward saves a copy of it, and the
    gradient after a write into the returned mean is that of the forward's values (as torch's, unwritten)."""
    def run(T, x):
        return x.var(-1), x.mean(-1, keepdim=True)
    compiled = jt.compile(lambda x: run(jt, x))
    _same(_outcome(jt, lambda T, x: compiled(x), "var", "all", 1), _outcome(torch, run, "var", "all", 1))
    _same(_outcome(jt, lambda T, x: compiled(x), "var", "all", None), _outcome(torch, run, "var", "all", None))
    assert "clone" in {n.op.name for n in _split(compiled).forward.graph.nodes}


def test_a_write_into_a_compiled_exp_under_saved_tensor_hooks_raises_nothing_as_torchs():
    """Under saved-tensor hooks torch packs what its nodes save unchecked: a recomputing call's check of its outputs
    follows, as the cut's saved values (packed through the same hooks) do."""
    def run(T, count, x):
        count.add_(1)
        return x.exp()
    results = []
    for T, fn in ((torch, lambda c, x: run(torch, c, x)), (jt, jt.compile(lambda c, x: run(jt, c, x)))):
        x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
        with warnings.catch_warnings(), T.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            warnings.simplefilter("ignore")
            y = fn(T.zeros(()), x * 1)
        y.add_(1)
        (y * 1.5).sum().backward()
        results.append(x.grad.numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-6)

"""The input bias of a fused recurrent layer joins ``b_hh`` (`nn.modules.rnn._folds_input_bias`): LSTM and Elman
layers project their input with a bare product and hand ``b_ih + b_hh`` to ``_rnn_layer``, whose steps add it, so no
pass over every step's gates adds ``b_ih`` and no sum over them gives its gradient; GRU keeps ``b_ih`` in its
projection (its ``b_hn`` sits inside the reset gate's product). Values and gradients against torch, eager and
compiled, float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest

import jitorch as jt
from jitorch import nn

SEQ, BATCH, INPUT, HIDDEN = 6, 4, 8, 16


def _module(mode, dtype, bias=True, layers=2):
    jt.manual_seed(50)
    if mode == "LSTM":
        m = nn.LSTM(INPUT, HIDDEN, layers, bias=bias)
    elif mode == "GRU":
        m = nn.GRU(INPUT, HIDDEN, layers, bias=bias)
    else:
        m = nn.RNN(INPUT, HIDDEN, layers, bias=bias, nonlinearity="tanh")
    return m.to(dtype)


def _graph(m, x):
    """The traced graph of a training loss through ``m``."""
    def loss(x):
        return m(x)[0].pow(2).sum()
    return jt.compile(loss, fullgraph=True).lower(x).graph


def _producer(value):
    return None if value.node is None else value.node.op.name


@pytest.mark.parametrize("mode", ["LSTM", "RNN_TANH"])
def test_the_input_bias_joins_b_hh_no_pass_over_the_gates_adds_it(mode):
    m = _module(mode, jt.float32)
    width = HIDDEN * (4 if mode == "LSTM" else 1)
    graph = _graph(m, jt.randn(SEQ, BATCH, INPUT))
    layers = [n for n in graph.nodes if n.op.name == "_rnn_layer"]
    assert len(layers) == 2
    for node in layers:
        projected, b = node.args[1], node.args[5]
        assert _producer(projected) == "matmul"  # (the bare product: no add of b_ih after it)
        assert _producer(b) == "add" and tuple(b.type.shape) == (width,)
    gates = (SEQ, BATCH, width)

    def shape(v):
        return tuple(getattr(v.type, "shape", ()))
    adds = [n for n in graph.nodes if n.op.name == "add" and gates in map(shape, n.outputs)]
    # (a bias's gradient: the gates' gradient summed over steps and batch; the loss's sum gives a 0-d value)
    bias_sums = [n for n in graph.nodes if n.op.name == "sum" and gates in map(shape, n.input_values())
                 and shape(n.outputs[0])[-1:] == (width,)]
    assert adds == [] and bias_sums == []  # neither b_ih's add in the forward nor its gradient's sum


def test_gru_keeps_its_input_bias_in_the_projection():
    graph = _graph(_module("GRU", jt.float32), jt.randn(SEQ, BATCH, INPUT))
    for node in (n for n in graph.nodes if n.op.name == "_rnn_layer"):
        assert _producer(node.args[1]) == "add"
        assert node.args[5].node is None  # (b_hh: the parameter itself)


def test_no_bias_no_fold():
    graph = _graph(_module("LSTM", jt.float32, bias=False), jt.randn(SEQ, BATCH, INPUT))
    layers = [n for n in graph.nodes if n.op.name == "_rnn_layer"]
    assert layers and all(n.args[5] is None and _producer(n.args[1]) == "matmul" for n in layers)


def test_autocast_keeps_the_composed_steps_and_the_bias_in_the_projection():
    """Under CPU autocast the projection is bfloat16 and the fused op does not serve: the layer is composed as
    before, its bias added by the projection in the lower precision."""
    m = _module("LSTM", jt.float32, layers=1)
    x = jt.randn(SEQ, BATCH, INPUT)
    with jt.autocast("cpu", dtype=jt.bfloat16):
        out, _ = m(x)
    assert out.grad_fn.name() == "StackBackward0"


def _run(lib, m, x, compiled):
    xs = x.clone().requires_grad_(True)

    def loss(x):
        out, state = m(x)
        state = state if isinstance(state, tuple) else (state,)
        return (out * out).sum() + sum((s * s).sum() for s in state)
    value = (lib.compile(loss) if compiled else loss)(xs)
    value.backward()
    grads = [xs.grad] + [p.grad for p in m.parameters()]
    result = [value.detach().numpy()] + [g.detach().numpy().copy() for g in grads]
    for p in m.parameters():
        p.grad = None
    return result


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["LSTM", "RNN_TANH", "GRU"])
def test_values_and_gradients_match_torch(mode, dtype, compiled):
    import torch
    m = _module(mode, getattr(jt, dtype))
    kwargs = dict(num_layers=2, dtype=getattr(torch, dtype))
    t = (torch.nn.LSTM(INPUT, HIDDEN, **kwargs) if mode == "LSTM" else torch.nn.GRU(INPUT, HIDDEN, **kwargs)
         if mode == "GRU" else torch.nn.RNN(INPUT, HIDDEN, nonlinearity="tanh", **kwargs))
    t.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in m.state_dict().items()})
    x = np.random.default_rng(50).normal(size=(SEQ, BATCH, INPUT)).astype(dtype)
    got = _run(jt, m, jt.tensor(x), compiled)
    expected = _run(torch, t, torch.tensor(x), False)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    assert len(got) == len(expected) == 2 + len(list(t.parameters()))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **tol)


def test_compiled_step_equals_eager():
    """The compiled step's values against eager jitorch's, the fold taken in both."""
    m = _module("LSTM", jt.float32)
    x = jt.tensor(np.random.default_rng(51).normal(size=(SEQ, BATCH, INPUT)).astype(np.float32))
    eager, compiled = _run(jt, m, x, False), _run(jt, m, x, True)
    for g, e in zip(compiled, eager):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)

"""RNN, LSTM, GRU and their cells against a NumPy transcription of the recurrences in torch's docs."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch import nn
from jitorch.autograd import gradcheck
from jitorch.nn import functional as F

MODES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _np_step(mode, x, state, w_ih, w_hh, b_ih, b_hh, w_hr=None):
    """One step of torch's documented recurrence, NumPy, batched (N, H); ``state`` is (h,) or (h, c)."""
    h = state[0]
    gi = x @ w_ih.T + (0 if b_ih is None else b_ih)
    gh = h @ w_hh.T + (0 if b_hh is None else b_hh)
    if mode == "RNN_TANH":
        return (np.tanh(gi + gh),)
    if mode == "RNN_RELU":
        return (np.maximum(gi + gh, 0),)
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, axis=-1)
        c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        return (h if w_hr is None else h @ w_hr.T), c
    (x_r, x_z, x_n), (h_r, h_z, h_n) = np.split(gi, 3, axis=-1), np.split(gh, 3, axis=-1)
    r, z = _sigmoid(x_r + h_r), _sigmoid(x_z + h_z)
    n = np.tanh(x_n + r * h_n)
    return ((1 - z) * n + z * h,)


def _np_rnn(mode, params, x, states, num_layers, bidirectional):
    """The stacked recurrence over time-major (L, N, H_in) ``x`` from a state_dict of NumPy arrays;
    returns (output, final states) with torch's shapes."""
    dirs = 2 if bidirectional else 1
    finals = [[] for _ in states]
    layer_in = x
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w = [params.get(name + sfx) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")]
            state = tuple(s[layer * dirs + d] for s in states)
            out = [None] * len(x)
            for t in (range(len(x) - 1, -1, -1) if d else range(len(x))):
                state = _np_step(mode, layer_in[t], state, *w)
                out[t] = state[0]
            outs.append(np.stack(out))
            for kept, s in zip(finals, state):
                kept.append(s)
        layer_in = np.concatenate(outs, axis=-1)
    return layer_in, tuple(np.stack(f) for f in finals)


def _numpy_params(module):
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def _make(mode, *args, **kwargs):
    if mode == "LSTM":
        return nn.LSTM(*args, **kwargs)
    if mode == "GRU":
        return nn.GRU(*args, **kwargs)
    return nn.RNN(*args, nonlinearity="tanh" if mode == "RNN_TANH" else "relu", **kwargs)


@settings(max_examples=30)
@given(mode=st.sampled_from(sorted(MODES)), seq=st.integers(1, 3), batch=st.integers(1, 3),
       input_size=st.integers(1, 3), hidden=st.integers(1, 3), layers=st.integers(1, 2),
       bidirectional=st.booleans(), batch_first=st.booleans(), unbatched=st.booleans(), with_hx=st.booleans(),
       bias=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_recurrence_matches_numpy(mode, seq, batch, input_size, hidden, layers, bidirectional, batch_first,
                                  unbatched, with_hx, bias, seed):
    rng = np.random.default_rng(seed)
    m = _make(mode, input_size, hidden, layers, bias=bias, batch_first=batch_first,
              bidirectional=bidirectional).double()
    dirs = 2 if bidirectional else 1
    x = rng.normal(size=(seq, batch, input_size))
    states = [rng.normal(size=(layers * dirs, batch, hidden)) for _ in range(2 if mode == "LSTM" else 1)]
    exp_out, exp_states = _np_rnn(mode, _numpy_params(m), x, states if with_hx else [0 * s for s in states],
                                  layers, bidirectional)
    if unbatched:
        x, exp_out = x[:, 0], exp_out[:, 0]
        states, exp_states = [s[:, 0] for s in states], [s[:, 0] for s in exp_states]
    elif batch_first:
        x, exp_out = x.transpose(1, 0, 2), exp_out.transpose(1, 0, 2)
    hx = [jt.tensor(s) for s in states]
    hx = (tuple(hx) if mode == "LSTM" else hx[0]) if with_hx else None
    out, got = m(jt.tensor(x), hx)
    got = got if mode == "LSTM" else (got,)
    np.testing.assert_allclose(out.detach().numpy(), exp_out, rtol=1e-10, atol=1e-12)
    assert len(got) == len(exp_states)
    for g, e in zip(got, exp_states):
        np.testing.assert_allclose(g.detach().numpy(), e, rtol=1e-10, atol=1e-12)


def test_lstm_proj_size_matches_numpy(rng):
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2).double()
    x = rng.normal(size=(3, 2, 3))
    h0, c0 = rng.normal(size=(4, 2, 2)), rng.normal(size=(4, 2, 4))
    out, (h, c) = m(jt.tensor(x), (jt.tensor(h0), jt.tensor(c0)))
    exp_out, (exp_h, exp_c) = _np_rnn("LSTM", _numpy_params(m), x, (h0, c0), 2, True)
    assert out.shape == (3, 2, 4) and h.shape == (4, 2, 2) and c.shape == (4, 2, 4)
    for got, exp in ((out, exp_out), (h, exp_h), (c, exp_c)):
        np.testing.assert_allclose(got.detach().numpy(), exp, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls,mode,kwargs", [
    (nn.RNNCell, "RNN_TANH", {}), (nn.RNNCell, "RNN_RELU", {"nonlinearity": "relu"}),
    (nn.LSTMCell, "LSTM", {}), (nn.GRUCell, "GRU", {}), (nn.GRUCell, "GRU", {"bias": False}),
])
@pytest.mark.parametrize("unbatched", [False, True])
@pytest.mark.parametrize("with_hx", [False, True])
def test_cells_match_numpy(cls, mode, kwargs, unbatched, with_hx, rng):
    cell = cls(3, 4, **kwargs).double()
    n_states = 2 if mode == "LSTM" else 1
    x = rng.normal(size=(2, 3))
    states = [rng.normal(size=(2, 4)) if with_hx else np.zeros((2, 4)) for _ in range(n_states)]
    p = _numpy_params(cell)
    expected = _np_step(mode, x, states, p["weight_ih"], p["weight_hh"], p.get("bias_ih"), p.get("bias_hh"))
    if unbatched:
        x, states, expected = x[0], [s[0] for s in states], [e[0] for e in expected]
    hx = (tuple(jt.tensor(s) for s in states) if n_states == 2 else jt.tensor(states[0])) if with_hx else None
    got = cell(jt.tensor(x), hx)
    got = got if n_states == 2 else (got,)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e, rtol=1e-10, atol=1e-12)


def test_default_init_is_uniform_in_one_over_sqrt_hidden():
    jt.manual_seed(0)
    bound = 1 / math.sqrt(25)
    for m in (nn.LSTM(30, 25, num_layers=2), nn.GRUCell(30, 25)):
        values = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
        assert values.min() >= -bound and values.max() <= bound
        # spread over the whole interval: a uniform sample of thousands reaches close to both ends
        assert values.min() < -0.95 * bound and values.max() > 0.95 * bound
        assert abs(values.mean()) < 0.01 and values.std() == pytest.approx(bound / math.sqrt(3), rel=0.05)


def test_parameter_names_and_shapes_match_torch():
    # torch's naming: weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k} (weight_hr_l{k} with
    # proj_size), "_reverse" for the backward direction; gate rows stacked (4 for LSTM, 3 for GRU).
    m = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2)
    expected = []
    for layer, in_size in ((0, 3), (1, 4)):
        for sfx in ("", "_reverse"):
            expected += [(f"weight_ih_l{layer}{sfx}", (16, in_size)), (f"weight_hh_l{layer}{sfx}", (16, 2)),
                         (f"bias_ih_l{layer}{sfx}", (16,)), (f"bias_hh_l{layer}{sfx}", (16,)),
                         (f"weight_hr_l{layer}{sfx}", (2, 4))]
    assert [(k, tuple(v.shape)) for k, v in m.state_dict().items()] == expected
    assert [(k, tuple(v.shape)) for k, v in nn.GRU(3, 5, bias=False).state_dict().items()] == [
        ("weight_ih_l0", (15, 3)), ("weight_hh_l0", (15, 5))]
    assert [(k, tuple(v.shape)) for k, v in nn.RNN(3, 5, 2).state_dict().items()] == [
        ("weight_ih_l0", (5, 3)), ("weight_hh_l0", (5, 5)), ("bias_ih_l0", (5,)), ("bias_hh_l0", (5,)),
        ("weight_ih_l1", (5, 5)), ("weight_hh_l1", (5, 5)), ("bias_ih_l1", (5,)), ("bias_hh_l1", (5,))]
    assert [(k, tuple(v.shape)) for k, v in nn.LSTMCell(3, 5).state_dict().items()] == [
        ("weight_ih", (20, 3)), ("weight_hh", (20, 5)), ("bias_ih", (20,)), ("bias_hh", (20,))]
    assert list(nn.GRUCell(3, 5, bias=False).state_dict()) == ["weight_ih", "weight_hh"]
    assert [len(w) for w in nn.GRU(3, 5, 2, bidirectional=True).all_weights] == [4, 4, 4, 4]


def test_reprs_match_torch():
    assert repr(nn.LSTM(3, 4, 2, batch_first=True, dropout=0.1, bidirectional=True, proj_size=2)) == (
        "LSTM(3, 4, proj_size=2, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)")
    assert repr(nn.RNN(3, 4, nonlinearity="relu", bias=False)) == "RNN(3, 4, bias=False)"
    assert repr(nn.RNNCell(3, 4, nonlinearity="relu")) == "RNNCell(3, 4, nonlinearity=relu)"
    assert repr(nn.GRUCell(3, 4, bias=False)) == "GRUCell(3, 4, bias=False)"


def test_dropout_between_layers_only_in_training():
    m = nn.GRU(3, 4, num_layers=2, dropout=0.5).double()
    x = jt.tensor(np.random.default_rng(0).normal(size=(5, 2, 3)))
    expected, _ = _np_rnn("GRU", _numpy_params(m), x.detach().numpy(), [np.zeros((2, 2, 4))], 2, False)
    m.eval()
    np.testing.assert_allclose(m(x)[0].detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    m.train()
    jt.manual_seed(0)
    a = m(x)[0].detach().numpy()
    jt.manual_seed(0)
    b = m(x)[0].detach().numpy()
    np.testing.assert_array_equal(a, b)  # the same seed draws the same mask
    assert not np.allclose(a, expected)


def test_gradcheck_lstm_and_gru(rng):
    lstm = nn.LSTM(2, 2, num_layers=2, batch_first=True, proj_size=1).double()
    x = jt.tensor(rng.normal(size=(2, 3, 2)), requires_grad=True)
    h0 = jt.tensor(rng.normal(size=(2, 2, 1)), requires_grad=True)
    c0 = jt.tensor(rng.normal(size=(2, 2, 2)), requires_grad=True)

    # gradcheck perturbs its inputs in place, so passing the parameters themselves checks their
    # gradients too, through the module that reads them.
    def run_lstm(x, h0, c0, *params):
        out, (h, c) = lstm(x, (h0, c0))
        return out, h, c

    assert gradcheck(run_lstm, (x, h0, c0, *lstm.parameters()))
    gru = nn.GRU(2, 2, bidirectional=True).double()
    g0 = jt.tensor(rng.normal(size=(2, 3, 2)), requires_grad=True)

    def run_gru(x, h0, *params):
        return gru(x, h0)

    assert gradcheck(run_gru, (x, g0, *gru.parameters()))
    cell = nn.LSTMCell(2, 3).double()
    assert gradcheck(lambda x, *params: cell(x), (x[0].detach().requires_grad_(), *cell.parameters()))


def _raises(exc, match, fn, *args):
    with pytest.raises(exc) as info:
        fn(*args)
    assert str(info.value) == match


def test_errors_as_torch():
    lstm, gru, rnn = nn.LSTM(10, 20), nn.GRU(10, 20), nn.RNN(10, 20)
    x = jt.randn(5, 3, 10)
    _raises(RuntimeError, "input.size(-1) must be equal to input_size. Expected 10, got 7", lstm, jt.randn(5, 3, 7))
    _raises(RuntimeError, "Expected hidden size (1, 3, 20), got [2, 3, 20]", gru, x, jt.zeros(2, 3, 20))
    _raises(RuntimeError, "Expected hidden[0] size (1, 3, 20), got [2, 3, 20]", lstm, x,
            (jt.zeros(2, 3, 20), jt.zeros(1, 3, 20)))
    _raises(RuntimeError, "Expected hidden[1] size (1, 3, 20), got [2, 3, 20]", lstm, x,
            (jt.zeros(1, 3, 20), jt.zeros(2, 3, 20)))
    _raises(ValueError, "LSTM: Expected input to be 2D or 3D, got 4D instead", lstm, jt.randn(5, 3, 10, 1))
    _raises(ValueError, "GRU: Expected input to be 2D or 3D, got 1D instead", gru, jt.randn(5))
    _raises(ValueError, "RNN: Expected input to be 2D or 3D, got 1D tensor instead", rnn, jt.randn(5))
    _raises(RuntimeError, "For unbatched 2-D input, hx and cx should also be 2-D but got (3-D, 3-D) tensors",
            lstm, jt.randn(5, 10), (jt.zeros(1, 3, 20), jt.zeros(1, 3, 20)))
    _raises(RuntimeError, "For batched 3-D input, hx should also be 3-D but got 2-D tensor", gru, x, jt.zeros(3, 20))
    _raises(ValueError, "RNN input dtype (jitorch.float64) does not match weight dtype (jitorch.float32). Convert "
            "input: input.to(jitorch.float32), or convert model: model.to(jitorch.float64)",
            lstm, jt.randn(5, 3, 10, dtype=jt.float64))
    cell = nn.LSTMCell(10, 20)
    _raises(RuntimeError, "input has inconsistent input_size: got 7 expected 10", cell, jt.randn(3, 7))
    _raises(RuntimeError, "Input batch size 3 doesn't match hidden0 batch size 2", cell, jt.randn(3, 10),
            (jt.zeros(2, 20), jt.zeros(3, 20)))
    _raises(RuntimeError, "hidden1 has inconsistent hidden_size: got 21, expected 20", cell, jt.randn(3, 10),
            (jt.zeros(3, 20), jt.zeros(3, 21)))
    _raises(ValueError, "LSTMCell: Expected input to be 1D or 2D, got 3D instead", cell, jt.randn(3, 10, 1))
    _raises(ValueError, "LSTMCell: Expected hx[0] to be 1D or 2D, got 3D instead", cell, jt.randn(3, 10),
            (jt.zeros(3, 20, 1), jt.zeros(3, 20)))
    _raises(ValueError, "GRUCell: Expected hidden to be 1D or 2D, got 3D instead", nn.GRUCell(10, 20),
            jt.randn(3, 10), jt.zeros(3, 20, 1))
    with pytest.raises(TypeError, match="PackedSequence is not supported"):
        lstm([x])
    _raises(RuntimeError, "Unknown nonlinearity: foo", nn.RNNCell(10, 20, nonlinearity="foo"), jt.randn(3, 10))


def test_constructor_errors_as_torch():
    _raises(ValueError, "Unknown nonlinearity 'sigmoid'. Select from 'tanh' or 'relu'.", nn.RNN, 10, 20, 1,
            "sigmoid")
    _raises(ValueError, "dropout should be a number in range [0, 1] representing the probability of an element "
            "being zeroed", lambda: nn.GRU(10, 20, dropout=1.5))
    _raises(ValueError, "hidden_size must be greater than zero", nn.RNN, 10, 0)
    _raises(TypeError, "hidden_size should be of type int, got: float", nn.RNN, 10, 2.0)
    _raises(ValueError, "num_layers must be greater than zero", nn.LSTM, 10, 2, 0)
    _raises(ValueError, "proj_size has to be smaller than hidden_size", lambda: nn.LSTM(10, 2, proj_size=2))
    _raises(ValueError, "proj_size should be a positive integer or zero to disable projections",
            lambda: nn.LSTM(10, 2, proj_size=-1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.GRU(3, 4, dropout=0.5)
    assert [str(w.message) for w in caught] == [
        "dropout option adds dropout after all but last recurrent layer, so non-zero dropout expects num_layers "
        "greater than 1, but got dropout=0.5 and num_layers=1"]


def _lstm_training(compiled):
    """Three SGD steps of an LSTM classifier + regression head; (losses, final parameters, step fn)."""
    jt.manual_seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    head = nn.Linear(4, 3)
    params = list(lstm.parameters()) + list(head.parameters())
    opt = jt.optim.SGD(params, lr=0.5, momentum=0.9)
    rng = np.random.default_rng(1)
    x = jt.tensor(rng.normal(size=(2, 4, 3)).astype(np.float32))
    y = jt.tensor(np.array([0, 2]))

    def step(x, y):
        opt.zero_grad()
        out, (h, c) = lstm(x)
        logits = head(out[:, -1])
        loss = F.cross_entropy(logits, y) + F.mse_loss(c, jt.zeros_like(c))
        loss.backward()
        opt.step()
        return loss

    run = jt.compile(step, fullgraph=True) if compiled else step
    losses = [run(x, y).item() for _ in range(3)]
    return losses, [p.detach().numpy().copy() for p in params], run, (x, y)


def test_compiled_lstm_training_step_equals_eager():
    eager_losses, eager_params, _, _ = _lstm_training(False)
    losses, params, run, args = _lstm_training(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    assert eager_losses[2] < eager_losses[0]  # the step trains: the loss falls
    for got, exp in zip(params, eager_params):
        np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-5)
    # one graph: each LSTM layer one fused recurrence node (no unrolled loop), the rest in fused kernels
    lowered = run.lower(*args)
    assert [node.op.name for node in lowered.graph.nodes].count("_rnn_layer") == 2
    assert lowered.kernels


# The fused recurrence (jitorch/ops/recurrences.py) against torch -------------------------------------

TORCH_CASES = [  # (mode, layers, bidirectional, batch_first, proj_size, bias)
    ("RNN_TANH", 1, False, False, 0, True), ("RNN_TANH", 2, True, True, 0, False),
    ("RNN_RELU", 2, False, False, 0, True), ("RNN_RELU", 1, True, True, 0, True),
    ("LSTM", 1, False, False, 0, True), ("LSTM", 2, True, True, 0, True), ("LSTM", 2, True, False, 2, True),
    ("LSTM", 1, False, True, 3, False), ("GRU", 1, True, False, 0, True), ("GRU", 2, False, True, 0, False),
]


def _torch_twin(m, mode, torch_dtype):
    """torch's module of ``m``'s configuration, with ``m``'s weights."""
    import torch
    kwargs = dict(num_layers=m.num_layers, bias=m.bias, batch_first=m.batch_first, bidirectional=m.bidirectional,
                  dtype=torch_dtype)
    if mode == "LSTM":
        t = torch.nn.LSTM(m.input_size, m.hidden_size, proj_size=m.proj_size, **kwargs)
    elif mode == "GRU":
        t = torch.nn.GRU(m.input_size, m.hidden_size, **kwargs)
    else:
        t = torch.nn.RNN(m.input_size, m.hidden_size, nonlinearity=m.nonlinearity, **kwargs)
    t.load_state_dict({k: torch.tensor(v) for k, v in _numpy_params(m).items()})
    return t


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode,layers,bidirectional,batch_first,proj,bias", TORCH_CASES)
def test_fused_recurrence_values_and_gradients_match_torch(mode, layers, bidirectional, batch_first, proj, bias,
                                                            dtype, rng):
    import torch
    extra = {"proj_size": proj} if mode == "LSTM" else {}
    m = _make(mode, 3, 4, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional, **extra)
    m = m.to(getattr(jt, dtype))
    t = _torch_twin(m, mode, getattr(torch, dtype))
    dirs = 2 if bidirectional else 1
    x = rng.normal(size=(2, 5, 3) if batch_first else (5, 2, 3)).astype(dtype)
    states = [rng.normal(size=(layers * dirs, 2, proj or 4)).astype(dtype)]
    if mode == "LSTM":
        states.append(rng.normal(size=(layers * dirs, 2, 4)).astype(dtype))
    weight = rng.normal(size=(5, 2, dirs * (proj or 4))).astype(dtype)  # of the output, time-major

    def run(lib, module, tensor):
        xs = tensor(x, requires_grad=True)
        hs = [tensor(s, requires_grad=True) for s in states]
        out, final = module(xs, tuple(hs) if mode == "LSTM" else hs[0])
        final = final if mode == "LSTM" else (final,)
        w = tensor(weight).transpose(0, 1) if batch_first else tensor(weight)
        loss = (out * w).sum() + sum((f * f).sum() for f in final)
        loss.backward()
        grads = [xs.grad] + [h.grad for h in hs] + [p.grad for p in module.parameters()]
        return [v.detach().numpy() for v in (out, *final, *grads)]

    got = run(jt, m, jt.tensor)
    expected = run(torch, t, torch.tensor)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == "float64" else dict(rtol=2e-5, atol=2e-6)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, **tol)


def _fused_graph_nodes(m, x):
    """The op names of the graph ``jitorch.compile`` traces of a training loss through ``m``."""
    def loss(x):
        return m(x)[0].pow(2).sum()
    compiled = jt.compile(loss, fullgraph=True)
    return [node.op.name for node in compiled.lower(x).graph.nodes]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_fused_layer_is_one_node_in_eager_autograd_and_in_the_traced_graph(mode):
    m = _make(mode, 3, 4, 2, bidirectional=True)
    x = jt.randn(20, 2, 3)
    out, _ = m(x)
    assert out.grad_fn.name() == "CatBackward0"
    assert {fn.name() for fn, _ in out.grad_fn.next_functions} == {"RnnLayerBackward0"}
    names = _fused_graph_nodes(m, x)
    assert names.count("_rnn_layer") == 4  # 2 layers x 2 directions, for 20 time steps: no unrolled loop
    assert len(names) < 60


def test_fused_layer_falls_back_to_composed_steps_for_half_types():
    m = nn.GRU(3, 4).to(jt.bfloat16)
    out, _ = m(jt.randn(3, 2, 3, dtype=jt.bfloat16))
    assert out.grad_fn.name() == "StackBackward0"


@pytest.mark.parametrize("mode", ["GRU", "LSTM"])
def test_fused_layer_refuses_states_of_another_dtype_than_the_weights(mode):
    m = _make(mode, 3, 4)
    states = (jt.randn(1, 1, 4, dtype=jt.float64), jt.randn(1, 1, 4))
    with pytest.raises(RuntimeError, match="^mat1 and mat2 must have the same dtype, but got Double and Float$"):
        m(jt.randn(2, 1, 3), states if mode == "LSTM" else states[0])


def test_double_backward_through_a_fused_layer_raises():
    m = nn.LSTM(2, 3).double()
    x = jt.randn(4, 1, 2, dtype=jt.float64, requires_grad=True)
    (g,) = jt.autograd.grad(m(x)[0].sum(), x, create_graph=True)
    with pytest.raises(NotImplementedError, match="the derivative for '_rnn_layer_backward' is not implemented"):
        g.sum().backward()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck_fused_layer_op(mode, reverse, rng):
    hidden, proj = 3, (2 if mode == "LSTM" else None)
    width = MODES[mode] * hidden

    def leaf(*shape):
        return jt.tensor(rng.normal(size=shape), requires_grad=True)
    args = [leaf(4, 2, width), leaf(2, proj or hidden), leaf(2, hidden) if mode == "LSTM" else None,
            leaf(width, proj or hidden), leaf(width), leaf(proj, hidden) if proj else None]
    given = [k for k, a in enumerate(args) if a is not None]
    op = jt.ops.registry.OPS["_rnn_layer"]

    def layer(*tensors):
        full = list(args)
        for k, t in zip(given, tensors):
            full[k] = t
        return op(mode, *full, reverse)[:3 if mode == "LSTM" else 2]
    assert gradcheck(layer, [args[k] for k in given])

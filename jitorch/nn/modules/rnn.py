"""Recurrent layers: RNN, LSTM, GRU and their single-step cells, as ``torch.nn``.

The input projection of a whole sequence is one matmul ahead of the recurrence, as in cuDNN
and torch's CPU kernels (its bias, but GRU's, added by the recurrence's steps: `_folds_input_bias`).
Each layer and direction of RNN/LSTM/GRU then runs as one fused op,
``_rnn_layer`` (jitorch/ops/recurrences.py: a NumPy loop over time with a hand-written backward),
so eager autograd records one node per layer and ``jitorch.compile`` traces one node instead of an
unrolled loop. Where that op cannot serve (not a float32/float64 CPU tensor: CUDA, half types,
autocast's lower precision), the layer is composed from jitorch ops, one Python step per time
step, as the cells always are.
"""

from __future__ import annotations

import math
import numbers
import warnings

from ...ops.registry import FUNCTIONS as _fn
from ...ops.registry import OPS as _ops
from ...runtime import dtypes as _dt
from ...runtime.autocast_mode import STATE as _AUTOCAST
from ...tensor import Tensor
from .. import init
from ..parameter import Parameter
from ._functional import F
from .module import Module
from .utils import factory

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# One time step of each recurrence. ``xp`` is the input projection ``x @ W_ih.T + b_ih``
# (already computed); ``state`` is (h,) or, for LSTM, (h, c). Each returns the new state.

def _rnn_tanh_step(xp, state, w_hh, b_hh, w_hr=None):
    return ((xp + F.linear(state[0], w_hh, b_hh)).tanh(),)


def _rnn_relu_step(xp, state, w_hh, b_hh, w_hr=None):
    return ((xp + F.linear(state[0], w_hh, b_hh)).relu(),)


def _lstm_step(xp, state, w_hh, b_hh, w_hr=None):
    """Gates in torch's order i, f, g, o; ``w_hr`` projects h (LSTM's ``proj_size``)."""
    h, c = state
    i, f, g, o = (xp + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(xp, state, w_hh, b_hh, w_hr=None):
    """Gates r, z, n; the reset gate multiplies ``W_hn h + b_hn`` (b_hn inside), as torch."""
    h = state[0]
    x_r, x_z, x_n = xp.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    # torch's form of (1 - z) * n + z * h: the same value, the same rounding as torch.
    return (n + z * (h - n),)


_STEPS = {"RNN_TANH": _rnn_tanh_step, "RNN_RELU": _rnn_relu_step, "LSTM": _lstm_step, "GRU": _gru_step}


def _uniform_all(module, hidden_size):
    """torch's default for every recurrent weight and bias: U(-1/sqrt(hidden), 1/sqrt(hidden))."""
    stdv = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0
    for weight in module.parameters():
        init.uniform_(weight, -stdv, stdv)


# Cells -----------------------------------------------------------------------------------------

class RNNCellBase(Module):
    """Shared parameters of the cells: ``weight_ih`` (chunks*hidden, input), ``weight_hh``
    (chunks*hidden, hidden) and the biases ``bias_ih``/``bias_hh`` (chunks*hidden,)."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = Parameter(factory("empty", (num_chunks * hidden_size, input_size), device, dtype))
        self.weight_hh = Parameter(factory("empty", (num_chunks * hidden_size, hidden_size), device, dtype))
        if bias:
            self.bias_ih = Parameter(factory("empty", (num_chunks * hidden_size,), device, dtype))
            self.bias_hh = Parameter(factory("empty", (num_chunks * hidden_size,), device, dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch."""
        _uniform_all(self, self.hidden_size)

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if "nonlinearity" in self.__dict__ and self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _batched(self, input, hx, states):
        """(input, states, is_batched) with a batch dim added to unbatched (1-D) ones, zeros for
        missing states, and torch's checks of the dims and sizes; ``hx`` is None or a tuple of
        ``states`` tensors."""
        cell = self._cell_name
        if input.dim() not in (1, 2):
            raise ValueError(f"{cell}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        if hx is not None:
            for k, h in enumerate(hx):
                if h.dim() not in (1, 2):
                    label = "hidden" if len(hx) == 1 else f"hx[{k}]"
                    raise ValueError(f"{cell}: Expected {label} to be 1D or 2D, got {h.dim()}D instead")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if hx is None:
            hx = tuple(_fn["zeros"]((input.size(0), self.hidden_size), dtype=input.dtype, device=input.device)
                       for _ in range(states))
        elif not is_batched:
            hx = tuple(h.unsqueeze(0) for h in hx)
        if input.size(1) != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.size(1)} expected {self.input_size}")
        for k, h in enumerate(hx):
            if input.size(0) != h.size(0):
                raise RuntimeError(f"Input batch size {input.size(0)} doesn't match hidden{k} batch size {h.size(0)}")
            if h.size(1) != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got {h.size(1)}, "
                                   f"expected {self.hidden_size}")
        return input, hx, is_batched

    def _step(self, kind, input, hx):
        xp = F.linear(input, self.weight_ih, self.bias_ih)
        return _STEPS[kind](xp, hx, self.weight_hh, self.bias_hh)


class RNNCell(RNNCellBase):
    """One Elman step ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)`` with act tanh or relu,
    as ``torch.nn.RNNCell``; input (N, input_size) or (input_size,), returns h'."""

    _cell_name = "RNNCell"

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, None if hx is None else (hx,), 1)
        if self.nonlinearity == "tanh":
            kind = "RNN_TANH"
        elif self.nonlinearity == "relu":
            kind = "RNN_RELU"
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        (h,) = self._step(kind, input, hx)
        return h if is_batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (gates i, f, g, o), as ``torch.nn.LSTMCell``: ``hx`` is (h, c) or None,
    returns (h', c')."""

    _cell_name = "LSTMCell"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, hx, 2)
        h, c = self._step("LSTM", input, hx)
        return (h, c) if is_batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step (gates r, z, n), as ``torch.nn.GRUCell``; returns h'."""

    _cell_name = "GRUCell"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        input, hx, is_batched = self._batched(input, None if hx is None else (hx,), 1)
        (h,) = self._step("GRU", input, hx)
        return h if is_batched else h.squeeze(0)


# Multi-layer recurrent networks ---------------------------------------------------------------

class RNNBase(Module):
    """The stacked, optionally bidirectional recurrence shared by RNN, LSTM and GRU, with torch's
    parameters ``weight_ih_l{k}``, ``weight_hh_l{k}``, ``bias_ih_l{k}``, ``bias_hh_l{k}`` (and
    ``weight_hr_l{k}`` for a projected LSTM), suffixed ``_reverse`` for the backward direction."""

    _name = "RNN"  # the name in input-dim errors; LSTM and GRU override it

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=3)
        if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names = []
        self._all_weights = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction == 1 else "")
                shapes = [("weight_ih", (gate_size, layer_input)), ("weight_hh", (gate_size, real_hidden))]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size > 0:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                names = []
                for base, shape in shapes:
                    setattr(self, base + suffix, Parameter(factory("empty", shape, device, dtype)))
                    names.append(base + suffix)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self):
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch."""
        _uniform_all(self, self.hidden_size)

    def flatten_parameters(self):
        """Does nothing, as torch's on CPU: it only repacks weights for cuDNN, which jitorch does not
        use; kept so that code calling it runs unchanged."""

    @property
    def all_weights(self):
        """The parameters of each layer and direction, in torch's order: [[w_ih, w_hh, b_ih, b_hh], ...]."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _layer_weights(self, names):
        """(w_ih, w_hh, b_ih, b_hh, w_hr) of one layer and direction, None where absent."""
        params = {name.split("_l")[0]: getattr(self, name) for name in names}
        return tuple(params.get(k) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"))

    def _check_input(self, input):
        weight_dtype = self.weight_ih_l0.dtype
        if input.dtype != weight_dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight_dtype}). "
                             f"Convert input: input.to({weight_dtype}), or convert model: "
                             f"model.to({input.dtype})")
        if input.dim() != 3:
            raise RuntimeError(f"input must have 3 dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.size(-1)}")

    def _state_sizes(self, input):
        """The expected (h_0 size, c_0 size) of a batched, time-major or batch-first ``input``."""
        batch = input.size(0) if self.batch_first else input.size(1)
        layers = self.num_layers * (2 if self.bidirectional else 1)
        h = (layers, batch, self.proj_size if self.proj_size > 0 else self.hidden_size)
        return h, (layers, batch, self.hidden_size)

    def _run(self, input, states):
        """The recurrence over batched ``input`` with initial ``states`` (a tuple of (layers*dirs, N, H)
        tensors): (output, final states), with torch's layouts."""
        if self.batch_first:
            input = input.transpose(0, 1)
        directions = 2 if self.bidirectional else 1
        initial = [s.unbind(0) for s in states]
        finals = [[] for _ in states]
        layer_input = input
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_weights(self._all_weights[index])
                state = tuple(s[index] for s in initial)
                if _folds_input_bias(self.mode, layer_input, w_ih, w_hh, b_ih, b_hh):
                    projected, b_hh = F.linear(layer_input, w_ih), b_ih + b_hh
                    run = _fused_layer
                else:
                    projected = F.linear(layer_input, w_ih, b_ih)
                    run = _fused_layer if _fusable(projected, w_hh) else _composed_layer
                out, state = run(self.mode, projected, state, w_hh, b_hh, w_hr, direction == 1)
                outputs.append(out)
                for kept, s in zip(finals, state):
                    kept.append(s)
            layer_input = outputs[0] if directions == 1 else _fn["cat"](outputs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        output = layer_input.transpose(0, 1) if self.batch_first else layer_input
        return output, tuple(_fn["stack"](kept) for kept in finals)

    def _forward(self, input, hx):
        """The forward of RNN/GRU (one state) and LSTM (two): ``hx`` is None or a tuple of states."""
        if not isinstance(input, Tensor):
            raise TypeError(f"{self._name}: expected input to be a Tensor, got {type(input).__name__} "
                            "(PackedSequence is not supported by jitorch)")
        if input.dim() not in (2, 3):
            extra = " tensor" if self._name == "RNN" else ""  # only RNN's message says "tensor" in torch
            raise ValueError(f"{self._name}: Expected input to be 2D or 3D, got {input.dim()}D{extra} instead")
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        lstm = self.mode == "LSTM"
        what = "hx and cx" if lstm else "hx"
        if not is_batched:
            input = input.unsqueeze(batch_dim)
            if hx is not None:
                if any(h.dim() != 2 for h in hx):
                    raise RuntimeError(f"For unbatched 2-D input, {what} should also be 2-D but got "
                                       f"{_dims(hx, lstm)} tensor{'s' if lstm else ''}")
                hx = tuple(h.unsqueeze(1) for h in hx)
        elif hx is not None and any(h.dim() != 3 for h in hx):
            raise RuntimeError(f"For batched 3-D input, {what} should also be 3-D but got "
                               f"{_dims(hx, lstm)} tensor{'s' if lstm else ''}")
        expected = self._state_sizes(input)[:2 if lstm else 1]
        if hx is None:
            hx = tuple(_fn["zeros"](size, dtype=input.dtype, device=input.device) for size in expected)
        self._check_input(input)
        for k, (h, size) in enumerate(zip(hx, expected)):
            if tuple(h.shape) != size:
                label = f"hidden[{k}] size" if lstm else "hidden size"
                raise RuntimeError(f"Expected {label} {size}, got {list(h.shape)}")
        # torch's kernels check this after the shapes; the loop would have no step to stack
        if input.size(1 if self.batch_first else 0) == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        output, states = self._run(input, hx)
        if not is_batched:
            output = output.squeeze(batch_dim)
            states = tuple(s.squeeze(1) for s in states)
        return output, states


def _fusable(projected, w_hh):
    """Whether the fused op ``_rnn_layer`` serves a layer: CPU tensors of float32 or float64 alike (not
    CUDA, not the half types, not autocast's lower-precision projection of float weights)."""
    return (projected.device.type == "cpu" and projected.dtype is w_hh.dtype
            and projected.dtype in (_dt.float32, _dt.float64))


def _folds_input_bias(mode, layer_input, w_ih, w_hh, b_ih, b_hh):
    """Whether a layer's input bias joins ``b_hh`` ahead of the fused op ``_rnn_layer``, whose steps add ``b_hh``
    to their pre-activations (in the cell's kernel, where compiled): the input projection is then a bare product,
    without a pass of its own over every step's gates to add ``b_ih`` (an LSTM language model's layer: 700 x 800
    floats, 0.22 ms of a 140 ms step, and its gradient's sum over them, 0.13 ms), and both biases get the op's
    one gradient of ``b_hh``. torch's CPU LSTM (oneDNN) adds the two biases alike. Not GRU's: its ``b_hn`` is inside
    the reset gate's product. Only where the op serves (`_fusable`: CPU float32 or float64 of one dtype, no
    autocast, whose lower precision the projection would take)."""
    return (mode != "GRU" and b_ih is not None and b_hh is not None and _AUTOCAST.key is None
            and layer_input.device.type == "cpu" and layer_input.dtype in (_dt.float32, _dt.float64)
            and all(t.dtype is layer_input.dtype and t.device.type == "cpu" for t in (w_ih, w_hh, b_ih, b_hh)))


def _fused_layer(mode, projected, state, w_hh, b_hh, w_hr, reverse):
    """One layer and direction as the op ``_rnn_layer``: (output, final states)."""
    output, h_n, c_n, _ = _ops["_rnn_layer"](mode, projected, state[0], state[1] if mode == "LSTM" else None,
                                              w_hh, b_hh, w_hr, reverse)
    return output, ((h_n, c_n) if mode == "LSTM" else (h_n,))


def _composed_layer(mode, projected, state, w_hh, b_hh, w_hr, reverse):
    """One layer and direction composed of jitorch ops, one step per time step: (output, final states)."""
    step = _STEPS[mode]
    projected = projected.unbind(0)
    length = len(projected)
    out = [None] * length
    for t in (reversed(range(length)) if reverse else range(length)):
        state = step(projected[t], state, w_hh, b_hh, w_hr)
        out[t] = state[0]
    return _fn["stack"](out), state


def _dims(hx, lstm):
    """How torch names the dims of the states in its errors: "2-D" or "(3-D, 3-D)"."""
    return f"({hx[0].dim()}-D, {hx[1].dim()}-D)" if lstm else f"{hx[0].dim()}-D"


class RNN(RNNBase):
    """A multi-layer Elman RNN (tanh or relu), as ``torch.nn.RNN``: input (L, N, H_in), (N, L, H_in)
    with ``batch_first`` or (L, H_in); returns (output, h_n)."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None):
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        output, (h_n,) = self._forward(input, None if hx is None else (hx,))
        return output, h_n


class LSTM(RNNBase):
    """A multi-layer LSTM, as ``torch.nn.LSTM`` (with ``proj_size``): ``hx`` is (h_0, c_0) or None;
    returns (output, (h_n, c_n))."""

    _name = "LSTM"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        output, (h_n, c_n) = self._forward(input, None if hx is None else tuple(hx))
        return output, (h_n, c_n)


class GRU(RNNBase):
    """A multi-layer GRU, as ``torch.nn.GRU``; returns (output, h_n)."""

    _name = "GRU"

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         device=device, dtype=dtype)

    def forward(self, input, hx=None):
        output, (h_n,) = self._forward(input, None if hx is None else (hx,))
        return output, h_n

"""Random small networks trained under ``jitorch.compile(model)``: ``generate_model(seed)`` and `check_model`.

A model program is a module class (``Net``: linear layers, some sharing a parameter or reading one through a
transpose or a slice, activations, layer norms, normalisations written out as two reductions over the same rows,
softmax-like blocks whose exponentials feed two reductions and a product, batch centring, a buffer written under
``no_grad`` in the forward, ``detach``) and a training scenario (``scenario``): forward calls, losses, backward
calls and optimizer steps in the orders that make a compiled call's saved values matter. Between a forward and
its backward the scenario may step the optimizer (the backward of a second loss of that forward then reads the
new parameters), write into a parameter under ``no_grad`` (directly, or through a view), write into an input,
run a second forward, back-propagate twice (``retain_graph``) or through two outputs in turn, or differentiate a
gradient (``create_graph``, a gradient penalty).

Rendered, a program is::

    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.p0 = T.nn.Linear(6, 9)
            ...
        def forward(self, x0, x1):
            h = self.p0(x0)
            ...
            return (h, s2)
    def scenario(model, run, opt, x0, x1, R, L):
        o = run(x0, x1)
        L(o, 0).backward(retain_graph=True)
        opt.step()
        ...

``run`` is the module itself (torch, jitorch eager) or ``jitorch.compile`` of it; ``L(o, k)`` a weighted sum of
the outputs (weights fixed by ``k``); ``R(label, *values)`` records the values, every parameter, buffer and
gradient. The same text runs in each mode with the same parameter values (`_initialise`); the records are
compared as `oracle.check`'s are: jitorch eager and compiled against torch, compiled against eager. Where torch
raises (a tensor its backward saved was written), jitorch must raise the same type of error; the one difference
allowed is torch.compile's: a compiled call's backward gives gradients without history, so differentiating them
again raises (`differentiable._NoDoubleBackward`).
"""

from __future__ import annotations

import random
import warnings
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import torch

import jitorch

from .oracle import TOLERANCE, TORCH_TOLERANCE, Mismatch, Output, compare_output, record_value, signature

MODEL_MODES = ("torch", "eager", "compiled")
SCENARIOS = ("train", "step between", "write param", "write param view", "write input", "retain", "two outputs",
             "double backward", "second forward")
DOUBLE_BACKWARD = "jitorch.compile does not currently support double backward"


@dataclass(frozen=True)
class ModelProgram:
    """A generated network and scenario; `model_source` renders them."""

    seed: int
    dtype: str
    inputs: tuple      # ((name, shape, requires_grad), ...)
    init: tuple        # lines of ``__init__`` after ``super().__init__()``
    forward: tuple     # lines of ``forward``
    outputs: tuple
    scenario: tuple    # lines of ``scenario``
    optimizer: str     # an expression of ``T`` and ``model``
    tags: tuple = ()   # the layers' and steps' kinds, for statistics and `reach`

    @property
    def grad(self):
        return True

    @property
    def scenario_kind(self):
        """The scenario's kind (one of `SCENARIOS`)."""
        return next(t for t in self.tags if t in SCENARIOS)


def model_source(program):
    """The program's Python text (``T``: the library; ``F``: its ``nn.functional``)."""
    args = ", ".join(name for name, _, _ in program.inputs)
    lines = ["class Net(T.nn.Module):", "    def __init__(self):", "        super().__init__()"]
    lines += [f"        {line}" for line in program.init]
    lines += [f"    def forward(self, {args}):"]
    lines += [f"        {line}" for line in program.forward]
    outs = ", ".join(program.outputs)
    lines += [f"        return ({outs},)"]
    lines += [f"def scenario(model, run, opt, {args}, R, L):"]
    lines += [f"    {line}" for line in program.scenario]
    return "\n".join(lines) + "\n"


class _Builder:
    """Draws one network: a hidden value ``h`` of feature width ``self.d`` through layers, naming parameters
    ``p0, p1, ...``."""

    ACTIVATIONS = ("F.relu(h)", "F.gelu(h)", "T.tanh(h)", "T.sigmoid(h)", "F.silu(h)", "F.softplus(h)",
                   "F.leaky_relu(h, 0.1)", "F.elu(h)", "F.gelu(h, approximate='tanh')")

    def __init__(self, rng, lead, rows=0.0, more=None):
        self.rng = rng
        self.rows, self.more = rows, more  # the share of layers a row softmax follows, drawn from ``more``
        self.lead = lead          # the leading dims of h: (B,) or (B, S)
        self.init, self.forward, self.tags = [], [], []
        self.linears = {}         # name -> (out, in)
        self.params = []          # every parameter's attribute path
        self.n = 0
        self.d = 0
        self.extra = []           # values returned besides h
        self.unsaved_by_jitorch = []  # parameters no scenario writes into (`_layernorm`)

    def name(self):
        self.n += 1
        return f"p{self.n - 1}"

    def tag(self, t):
        self.tags.append(t)

    def linear(self, out, bias=None):
        name = self.name()
        bias = self.rng.random() < 0.7 if bias is None else bias
        self.init.append(f"self.{name} = T.nn.Linear({self.d}, {out}, bias={bias})")
        self.linears[name] = (out, self.d)
        self.params += [f"{name}.weight"] + ([f"{name}.bias"] if bias else [])
        self.forward.append(f"h = self.{name}(h)")
        self.d = out
        self.tag("linear" if bias else "linear nobias")

    def layer(self):
        r = self.rng
        kind = r.choice(["linear", "linear", "act", "act", "shared", "view param", "tied", "layernorm",
                         "two reductions", "exp reductions", "centre", "buffer", "detach", "bias act", "residual",
                         "inplace", "logsumexp"])
        getattr(self, "_" + kind.replace(" ", "_"))()
        if self.rows and self.more.random() < self.rows:  # (a generator of its own: rows=0 draws what it drew)
            self._row_softmax()

    def _row_softmax(self):
        """A softmax or log-softmax over the rows of a value computed pointwise (the row kernel, which reads each
        row again from cache), its result read by a row sum and the next layer."""
        if self.more.random() < 0.5:
            self.forward += ["a = F.softmax(h * 0.5, -1)", "h = a * h - (a * h).sum(-1, keepdim=True)"]
        else:
            self.forward.append("h = F.log_softmax(T.tanh(h), -1) + h")
        self.tag("row softmax")

    def _linear(self):
        self.linear(self.rng.choice([3, 4, 5, 7, 8, 9, 17]))

    def _act(self):
        self.forward.append(f"h = {self.rng.choice(self.ACTIVATIONS)}")
        self.tag("activation")

    def _shared(self):
        """A linear layer called again (its parameters read twice in one forward)."""
        same = [n for n, (o, i) in self.linears.items() if o == i == self.d]
        if not same:
            return self.linear(self.d)
        self.forward.append(f"h = self.{self.rng.choice(same)}(h)")
        self.tag("shared layer")

    def _view_param(self):
        """A weight read through a transpose or a slice."""
        fits = [(n, o, i) for n, (o, i) in self.linears.items() if o == self.d or i >= self.d]
        if not fits:
            return self._linear()
        n, o, i = self.rng.choice(fits)
        if o == self.d and (i < self.d or self.rng.random() < 0.5):
            self.forward.append(f"h = F.linear(h, self.{n}.weight.t())")
            self.d = i
            self.tag("param transposed")
        else:
            self.forward.append(f"h = h @ self.{n}.weight[:, :{self.d}].t()")
            self.d = o
            self.tag("param sliced")

    def _tied(self):
        """A new linear layer whose weight is an earlier one's (``self.b.weight = self.a.weight``)."""
        fits = [n for n, (o, i) in self.linears.items() if i == self.d]
        if not fits:
            return self._linear()
        src = self.rng.choice(fits)
        out = self.linears[src][0]
        self.linear(out, bias=True)
        name = f"p{self.n - 1}"
        self.init.append(f"self.{name}.weight = self.{src}.weight")
        self.params.remove(f"{name}.weight")
        self.tags[-1] = "tied"

    def _layernorm(self):
        name = self.name()
        self.init.append(f"self.{name} = T.nn.LayerNorm({self.d})")
        self.params += [f"{name}.weight", f"{name}.bias"]
        # torch's layer norm saves its bias (to test that it is defined); jitorch's saves it too since session 48
        # (tests/autograd/test_saved_versions48.py), and a write into it raises in both; it stays no target of the
        # scenarios so that the fixed seeds draw the programs they drew
        self.unsaved_by_jitorch.append(f"{name}.bias")
        self.forward.append(f"h = self.{name}(h)")
        self.tag("layernorm")

    def _two_reductions(self):
        """A normalisation written out: a mean and a variance over the same rows, the centred values read by
        the second reduction and by the scaling."""
        name = self.name()
        self.init.append(f"self.{name} = T.nn.Parameter(T.ones({self.d}))")
        self.params.append(name)
        self.forward += ["m = h.mean(-1, keepdim=True)", "c = h - m", "v = (c * c).mean(-1, keepdim=True)",
                         f"h = c * T.rsqrt(v + 1e-5) * self.{name}"]
        if self.rng.random() < 0.3:
            self.extra.append("v")
        self.tag("two reductions")

    def _exp_reductions(self):
        """Exponentials read by two reductions over one space and by a product (what a multi-output reduction
        kernel takes)."""
        e = "T.exp(h - h.amax(-1, keepdim=True).detach())" if self.rng.random() < 0.5 else "T.exp(T.tanh(h))"
        name = self.name()
        self.init.append(f"self.{name} = T.nn.Linear({self.d}, {self.d}, bias=False)")
        self.linears[name] = (self.d, self.d)
        self.params.append(f"{name}.weight")
        self.forward += [f"e = {e}", "s = e.sum(-1, keepdim=True)", "t = (e * h).sum(-1, keepdim=True)",
                         f"h = e / s * t + self.{name}(e)"]
        if self.rng.random() < 0.3:
            self.extra.append("s")
        self.tag("exp reductions")

    def _logsumexp(self):
        self.forward += ["q = (h * h).sum(-1, keepdim=True)", "h = h - h.logsumexp(-1, keepdim=True) + q * 0.1"]
        self.tag("sum and logsumexp")

    def _centre(self):
        dims = "0" if len(self.lead) == 1 else "(0, 1)"
        self.forward.append(f"h = h - h.mean({dims}, keepdim=True)")
        self.tag("batch centre")

    def _buffer(self):
        """A running mean written under no_grad in the forward, then subtracted (the compiled call runs eagerly: its
        outputs depend on values it overwrites), or, as a batch norm's running statistics in training, written and
        not read (the call is cut into a forward writing the buffer and a backward). Which, drawn from ``more``."""
        name = self.name().replace("p", "b")
        dims = "0" if len(self.lead) == 1 else "(0, 1)"
        self.init.append(f"self.register_buffer('{name}', T.zeros({self.d}))")
        update = ["with T.no_grad():", f"    self.{name}.mul_(0.5).add_(h.mean({dims}) * 0.5)"]
        if self.more.random() < 0.5:
            self.forward += update + [f"h = h - self.{name}"]
            self.tag("buffer no_grad")
        else:
            self.forward += update + [f"h = h - h.mean({dims}, keepdim=True).detach()"]
            self.tag("buffer no_grad unread")

    def _detach(self):
        self.forward.append(self.rng.choice(["h = h + 0.5 * h.detach()", "h = h * T.sigmoid(h.detach())"]))
        self.tag("detach")

    def _bias_act(self):
        """A product, a bias parameter of its own and an activation: the backward's column sum of the
        activation's gradient."""
        name, bias = self.name(), self.name()
        out = self.rng.choice([4, 8, 9, 17])
        self.init += [f"self.{name} = T.nn.Parameter(T.zeros({out}, {self.d}))",
                      f"self.{bias} = T.nn.Parameter(T.zeros({out}))"]
        self.params += [name, bias]
        act = self.rng.choice(self.ACTIVATIONS).replace("(h", f"(h @ self.{name}.t() + self.{bias}")
        self.forward.append(f"h = {act}")
        self.d = out
        self.tag("bias act")

    def _residual(self):
        name = self.name()
        self.init.append(f"self.{name} = T.nn.Linear({self.d}, {self.d})")
        self.linears[name] = (self.d, self.d)
        self.params += [f"{name}.weight", f"{name}.bias"]
        self.forward.append(f"h = h + {self.rng.choice(self.ACTIVATIONS).replace('(h', f'(self.{name}(h)')}")
        self.tag("residual")

    def _inplace(self):
        """An in-place op on a product's result (which no node saved)."""
        self._linear()
        self.forward.append(self.rng.choice(["h.mul_(1.5)", "h.add_(0.25)"]))
        self.tags[-1] = "inplace after linear"


def _draw_network(rng, x0_width, lead, x1_width, rows, more):
    b = _Builder(rng, lead, rows, more)
    b.d = x0_width
    b.forward.append("h = x0")
    for _ in range(rng.randint(2, 6)):
        b.layer()
        if x1_width and rng.random() < 0.25 and "x1" not in "".join(b.forward):
            name = b.name()
            b.init.append(f"self.{name} = T.nn.Linear({x1_width}, {b.d})")
            b.params += [f"{name}.weight", f"{name}.bias"]
            b.forward.append(rng.choice([f"h = h + self.{name}(x1)", f"h = h * T.tanh(self.{name}(x1))"]))
            b.tag("second input")
    if not b.params:
        b._linear()
    if x1_width and "x1" not in "".join(b.forward):
        b.forward.append("h = h + x1.sum(-1, keepdim=True)" if rng.random() < 0.5 else "h = h * x1.mean()")
    return b


def _draw_scenario(rng, b, inputs):
    """The scenario's lines and tags."""
    lines, tags = [], []
    grads = [name for name, _, rg in inputs if rg]
    param = rng.choice([p for p in b.params if p not in b.unsaved_by_jitorch] or b.params)
    path = "model." + param

    def forward(o="o"):
        lines.append(f"{o} = run({', '.join(n for n, _, _ in inputs)})")

    steps = rng.choice(["train", "step between", "write param", "write param view", "write input", "retain",
                        "two outputs", "double backward", "second forward", "step between", "write param"])
    tags.append(steps)
    if steps == "train":
        for k in range(rng.randint(1, 3)):
            forward()
            lines += [f"l = L(o, {k})", "l.backward()", f"R('backward {k}', l)", "opt.step()", f"R('step {k}')"]
            lines.append(rng.choice(["opt.zero_grad()", "opt.zero_grad(set_to_none=False)", "pass"]))
    elif steps == "step between":
        forward()
        lines += ["l0, l1 = L(o, 0), L(o, 1)", "l0.backward(retain_graph=True)", "R('first', l0)", "opt.step()",
                  "R('stepped')", "l1.backward()", "R('second', l1)"]
    elif steps in ("write param", "write param view"):
        forward()
        write = rng.choice(["mul_(0.5)", "add_(0.25)", "zero_()"])
        target = path if steps == "write param" else f"{path}[0]"
        lines += ["with T.no_grad():", f"    {target}.{write}", "l = L(o, 0)", "l.backward()", "R('after write', l)",
                  "opt.step()", "R('step')"]
    elif steps == "write input":
        name = rng.choice([n for n, _, _ in inputs])
        forward()
        lines += [f"{name}.{rng.choice(['mul_(2.0)', 'add_(1.0)'])}", "l = L(o, 0)", "l.backward()",
                  "R('after input write', l)"]
    elif steps == "retain":
        forward()
        lines += ["l = L(o, 0)", "l.backward(retain_graph=True)", "R('first', l)", "l.backward()", "R('second')"]
    elif steps == "two outputs":
        forward()
        retain = rng.random() < 0.7
        lines += [f"L(o[:1], 0).backward(retain_graph={retain})", "R('first')", "L(o[-1:], 1).backward()",
                  "R('second')"]
    elif steps == "double backward":
        # (frozen parameters: a penalty of an input's gradient through a backward that may read nothing requiring grad)
        frozen = grads and rng.random() < 0.3
        if frozen:
            lines.append("model.requires_grad_(False)")
            tags.append("frozen")
        forward()
        inputs_wrt = [f"[{g}]" for g in grads]
        wrt = rng.choice(inputs_wrt if frozen else ["list(model.parameters())", *inputs_wrt])
        lines += ["l = L(o, 0)", f"g = T.autograd.grad(l, {wrt}, create_graph=True)",
                  "R('gradient', *g)", "pen = sum((t * t).sum() for t in g)"]
        # the penalised loss differentiated by backward() or, half the time, by autograd.grad for the same tensors,
        # whose engine runs only the nodes on a way to them (trust55: a compiled call's raising node there was
        # skipped, the penalty's second-order term silently dropped); drawn from a generator of the program's own
        # text, so that the seeds' programs are those drawn before
        if random.Random(repr(lines)).random() < 0.5:
            lines += [f"gg = T.autograd.grad(l + pen, {wrt})", "R('penalised', pen, *gg)"]
        else:
            lines += ["(l + pen).backward()", "R('penalised', pen)"]
    else:  # a second forward after a parameter write, before the backward of both
        forward("o")
        lines += ["with T.no_grad():", f"    {path}.mul_(0.75)"]
        forward("o2")
        lines += ["l = L(o, 0) + L(o2, 1)", "l.backward()", "R('both', l)", "opt.step()", "R('step')"]
    return lines, tags


def generate_model(seed, rows=0.0, convs=0.0):
    """The model program of ``seed`` (Python's seeded generators: the same on every machine); a ``rows`` share of its
    layers followed by a row softmax (`_Builder._row_softmax`, drawn from a generator of their own: ``rows=0``
    draws the programs drawn before it was an option); a ``convs`` share of the programs of one leading dim take
    images through a convolution stem (`_conv_stem`, a generator of its own too)."""
    rng = random.Random(seed)
    lead = rng.choice([(3,), (5,), (2, 4), (3, 3)])
    x0_width = rng.choice([4, 5, 6, 8, 17])
    x1_width = rng.choice([0, 3, 6])
    inputs = [("x0", lead + (x0_width,), rng.random() < 0.6)]
    if x1_width:
        inputs.append(("x1", lead + (x1_width,), rng.random() < 0.4))
    b = _draw_network(rng, x0_width, lead, x1_width, rows, random.Random(f"{seed} rows"))
    outputs = ["h"] + list(dict.fromkeys(b.extra))[:1]
    scenario, steps = _draw_scenario(rng, b, inputs)
    optimizer = rng.choice(["T.optim.SGD(model.parameters(), lr=0.1)",
                            "T.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)",
                            "T.optim.AdamW(model.parameters(), lr=0.01, eps=1e-3)"])
    dtype = "float64" if rng.random() < 0.2 else "float32"
    stem = random.Random(f"{seed} convs")
    if convs and len(lead) == 1 and stem.random() < convs:
        inputs[0] = _conv_stem(stem, b, inputs[0])
    return ModelProgram(seed, dtype, tuple(inputs), tuple(b.init), tuple(b.forward), tuple(outputs),
                        tuple(scenario), optimizer, tuple(b.tags + steps))


def _conv_stem(rng, b, x0):
    """Makes ``x0`` an image batch ``(B, C, H, W)`` (returns its new declaration) that a stem turns into the features
    the network ``b`` reads: a ``Conv2d`` (strides, padding, groups, a bias or not, its weight channels-last at
    times), maybe a ``BatchNorm2d`` in training mode (running statistics: buffers), an activation and a pooling to
    one value per channel; the input is made channels-last in the forward half the time. The stem's parameters are
    no target of the scenario's writes (drawn before it), but the optimizer steps them."""
    name, (batch, width), requires_grad = x0[0], x0[1], x0[2]
    c = rng.choice((1, 2, 3, 4))
    kernel, stride, padding = rng.choice((1, 2, 3)), rng.choice((1, 1, 2)), rng.choice((0, 1))
    groups = c if width % c == 0 and rng.random() < 0.3 else 1
    shape = (batch, c, rng.choice((3, 4, 7)), rng.choice((3, 5, 8)))
    conv = f"T.nn.Conv2d({c}, {width}, {kernel}, stride={stride}, padding={padding}, groups={groups}, " \
           f"bias={rng.random() < 0.7})"
    if rng.random() < 0.4:
        conv += ".to(memory_format=T.channels_last)"
    init = [f"self.s0 = {conv}"]
    params = ["s0.weight"] + (["s0.bias"] if "bias=True" in conv else [])
    h = "self.s0(x0)"
    if rng.random() < 0.4:
        init.append(f"self.s1 = T.nn.BatchNorm2d({width})")
        params += ["s1.weight", "s1.bias"]
        h = f"self.s1({h})"
    forward = ["x0 = x0.contiguous(memory_format=T.channels_last)"] if rng.random() < 0.5 else []
    act = rng.choice(("F.relu", "F.gelu", "T.tanh"))
    pool = rng.choice(("F.adaptive_avg_pool2d({}, 1).flatten(1)", "{}.amax((2, 3))",
                       "F.max_pool2d({}, 2, ceil_mode=True).mean((2, 3))"))
    forward.append(f"x0 = {pool.format(f'{act}({h})')}")
    b.init[:0], b.forward[:0], b.params[:0] = init, forward, params
    b.tags.append("conv stem" + (" channels_last" if "channels_last" in "".join(init + forward) else ""))
    return name, shape, requires_grad


# Running and comparing -----------------------------------------------------------------------------------------

@dataclass
class ModelRecord:
    """A mode's run: ``(label, {what: Output})`` per ``R`` call, and the error that ended it."""

    steps: list = field(default_factory=list)
    error: str = ""


def _values(name, shape, low=-1.0, high=1.0):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    return rng.uniform(low, high, size=shape)


def _initialise(T, model, dtype):
    """Every parameter and buffer set to values drawn from its name (the same in each library)."""
    with T.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            shape = tuple(t.shape)
            if len(shape) >= 2:
                values = _values(name, shape) / np.sqrt(shape[-1])
            elif name.endswith("weight") or not name.split(".")[-1].startswith(("bias", "b")) and shape:
                values = _values(name, shape, 0.5, 1.5)
            else:
                values = _values(name, shape, -0.5, 0.5)
            t.copy_(T.tensor(values, dtype=getattr(T, dtype)))


def _loss(T, dtype):
    def L(outputs, k):
        total = None
        for i, o in enumerate(outputs):
            w = T.tensor(_values(f"loss {k} {i}", tuple(o.shape)), dtype=o.dtype)
            term = (o * w).sum()
            total = term if total is None else total + term
        return total
    return L


def run_model(program, mode):
    """The records of ``program``'s scenario in ``mode``."""
    T = torch if mode == "torch" else jitorch
    rec = ModelRecord()
    ns = {"T": T, "F": T.nn.functional, "__name__": "fuzzmodel"}
    try:
        exec(compile(model_source(program), f"<fuzz model {program.seed}>", "exec"), ns)
        model = ns["Net"]()
        dt = getattr(T, program.dtype)
        model.to(dt)
        _initialise(T, model, program.dtype)
        run = jitorch.compile(model) if mode == "compiled" else model
        opt = eval(program.optimizer, {"T": T, "model": model})
        leaves, xs = [], []
        for name, shape, requires_grad in program.inputs:
            leaf = T.tensor(_values(name, shape, -2.0, 2.0), dtype=dt, requires_grad=requires_grad)
            leaves.append((name, leaf))
            xs.append(leaf.clone() if requires_grad else leaf)

        def R(label, *values):
            state = {f"value {i}": record_value(T, v.detach(), []) for i, v in enumerate(values)}
            for name, p in model.named_parameters():
                state[name] = record_value(T, p.detach(), [])
                state[f"{name}.grad"] = record_value(T, p.grad, []) if p.grad is not None else Output("none")
            for name, b in model.named_buffers():
                state[name] = record_value(T, b, [])
            for name, leaf in leaves:
                if leaf.requires_grad:
                    state[f"{name}.grad"] = record_value(T, leaf.grad, []) if leaf.grad is not None else Output("none")
            rec.steps.append((label, state))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ns["scenario"](model, run, opt, *xs, R, _loss(T, program.dtype))
    except Exception as e:  # the record says which error; the comparison decides whether it is one
        rec.error = f"{type(e).__name__}: {e}"
    return rec


def _error_type(error):
    return error.split(":")[0]


def compare_models(got, want, mode, reference, against_torch=False):
    """Mismatches between two runs: each recorded step's values, parameters, buffers and gradients; the
    type of the error that ended a run (the allowed one: a compiled backward's gradients have no history)."""
    table = TORCH_TOLERANCE if against_torch else TOLERANCE
    found = []
    for (label, g), (_, w) in zip(got.steps, want.steps):
        for name in w:
            if name not in g:
                found.append(Mismatch(mode, reference, label, name, "missing"))
                continue
            for what, detail in compare_output(g[name], w[name], table, strides=False):
                found.append(Mismatch(mode, reference, label, f"{name} {what}", detail))
    if found:
        return found
    if mode == "compiled" and DOUBLE_BACKWARD in got.error and not want.error:
        return found
    if _error_type(got.error) != _error_type(want.error) or len(got.steps) != len(want.steps):
        at = got.steps[-1][0] if got.steps else "start"
        found.append(Mismatch(mode, reference, f"after {at}", "error",
                              f"{got.error or 'no error'} vs {want.error or 'no error'}"))
    return found


@dataclass
class ModelOutcome:
    """What checking a model program found: its mismatches, and each mode's run (`ModelRecord`)."""

    mismatches: list
    runs: dict


def check_model(program, modes=MODEL_MODES):
    """Run ``program`` in ``modes``: jitorch eager against torch, compiled against eager and torch."""
    runs = {mode: run_model(program, mode) for mode in modes}
    found = []
    if "torch" in runs and "eager" in runs:
        found += compare_models(runs["eager"], runs["torch"], "eager", "torch", against_torch=True)
    if "compiled" in runs:
        if "eager" in runs:
            found += compare_models(runs["compiled"], runs["eager"], "compiled", "eager")
        if "torch" in runs:
            found += compare_models(runs["compiled"], runs["torch"], "compiled", "torch", against_torch=True)
    return ModelOutcome(found, runs)


def minimise_model(program, mismatch, modes=MODEL_MODES, budget=60):
    """A smaller program (forward lines dropped one at a time, last first, each kept only while the check still
    fails as ``mismatch`` did: `oracle.signature`) within ``budget`` checks."""
    key = signature(mismatch)
    checks, changed = 0, True
    while changed and checks < budget:
        changed = False
        for i in reversed(range(1, len(program.forward))):
            if program.forward[i].startswith((" ", "with")) or checks >= budget:
                continue  # (a no_grad block's lines go together or not at all: kept)
            candidate = replace(program, forward=program.forward[:i] + program.forward[i + 1:])
            checks += 1
            if any(signature(m) == key for m in check_model(candidate, modes).mismatches):
                program, changed = candidate, True
    return program

"""A compiled function reading Python state through containers (a global list ``W[0]``, a closure dict
``cfg["w"]``, nested containers, a module's ``ParameterList``/``ModuleList``/``ModuleDict`` or plain list
attribute) is guarded on what it read: replacing, appending, popping or reassigning an element between
calls traces again. Before, only closure cells, globals and attribute chains were guarded, so these calls
silently reused the old graph (the old tensor, the old length, the old number). Each test compares with
eager after every mutation and counts the traces."""

import copy

import pytest

import jitorch as jt
from jitorch import nn
from tests.jit.test_compile import counting

W = [jt.tensor([1.0, 2.0]), jt.tensor([3.0, 4.0])]
SCALES = [2.0, 3.0]
NESTED = {"layers": [{"w": jt.tensor([1.0, -1.0])}, {"w": jt.tensor([2.0, 2.0])}], "scale": [1.5]}
X = jt.tensor([0.5, -2.0])


@pytest.fixture(autouse=True)
def _restore_globals():
    """Put the module's containers back after each test changes them."""
    saved = list(W), list(SCALES), copy.copy(NESTED["layers"]), [dict(d) for d in NESTED["layers"]], set(ALLOWED)
    yield
    W[:], SCALES[:], NESTED["layers"][:] = saved[0], saved[1], saved[2]
    for layer, before in zip(NESTED["layers"], saved[3]):
        layer.clear()
        layer.update(before)
    NESTED["scale"][:] = [1.5]
    ALLOWED.clear()
    ALLOWED.update(saved[4])


def counting_wrapper(fn):
    """`counting` as a decorator made with ``functools.wraps`` is: the function it wraps is read through
    ``__wrapped__``, its parameters named."""
    counted = counting(fn)
    counted.__wrapped__ = fn
    return counted


def steps(fn, mutations, x=X):
    """Call ``jt.compile(fn)`` once and again after each mutation, checking each call against eager;
    the number of times Python ran ``fn`` (traces)."""
    counted = counting(fn)
    compiled = jt.compile(counted)
    assert compiled(x).tolist() == fn(x).tolist()
    for mutate in mutations:
        mutate()
        assert compiled(x).tolist() == fn(x).tolist(), mutate
    return counted.runs


def test_a_global_list_indexed_by_a_constant_is_guarded_on_its_elements():
    def f(x):
        return x * W[0] + W[1]
    runs = steps(f, [lambda: W.__setitem__(0, jt.tensor([5.0, 6.0])),
                     lambda: W.insert(0, jt.tensor([-1.0, 1.0])),
                     lambda: W.pop(0)])
    assert runs == 3  # after the pop the list holds what it held after the first change: that graph


def test_a_global_list_iterated_is_guarded_on_its_length():
    def f(x):
        for w in W:
            x = x * w
        return x
    runs = steps(f, [lambda: W.append(jt.tensor([10.0, 10.0])), lambda: W.pop(), lambda: W.pop()])
    assert runs == 3  # the first graph holds again after the first pop


def test_numbers_in_a_global_list_are_guarded_by_value():
    def f(x):
        return x * SCALES[0] + sum(SCALES)
    runs = steps(f, [lambda: SCALES.__setitem__(0, 5.0),
                     lambda: SCALES.__setitem__(0, float("5.0")),  # an equal number: no new trace
                     lambda: SCALES.append(1.0)])
    assert runs == 3


def test_a_closure_dict_is_guarded_on_its_keys_tensors_and_numbers():
    cfg = {"w": jt.tensor([1.0, 2.0]), "s": 2.0}

    def f(x):
        out = x * cfg["w"] * cfg["s"]
        for key in cfg:
            if key.startswith("extra"):
                out = out + cfg[key]
        return out
    runs = steps(f, [lambda: cfg.__setitem__("w", jt.tensor([3.0, 3.0])),
                     lambda: cfg.__setitem__("s", 3),
                     lambda: cfg.__setitem__("extra", jt.tensor([7.0, 7.0])),
                     lambda: cfg.pop("extra")])
    assert runs == 4  # the graph of the third state holds again after the pop


def test_a_tuple_of_a_tensor_and_a_number_is_guarded():
    pair = (jt.tensor([1.0, 2.0]), 2.0)

    def f(x):
        return x * pair[0] * pair[1]

    def rebind():
        nonlocal pair
        pair = (pair[0], 4.0)
    assert steps(f, [rebind]) == 2


def test_nested_containers_are_guarded_at_every_level():
    def f(x):
        for layer in NESTED["layers"]:
            x = x * layer["w"]
        return x * NESTED["scale"][0]
    runs = steps(f, [lambda: NESTED["layers"][0].__setitem__("w", jt.tensor([4.0, 4.0])),
                     lambda: NESTED["scale"].__setitem__(0, 4.0),
                     lambda: NESTED["layers"].append({"w": jt.tensor([0.5, 0.5])}),
                     lambda: NESTED["layers"][2]["w"].mul_(2)])  # in place: the graph reads it anew
    assert runs == 4


class Containers(nn.Module):
    def __init__(self):
        super().__init__()
        self.pl = nn.ParameterList([nn.Parameter(jt.tensor([1.0, 2.0])), nn.Parameter(jt.tensor([0.5, 0.5]))])
        self.ml = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
        self.md = nn.ModuleDict({"a": nn.Linear(2, 2)})
        self.plain = [jt.tensor([2.0, 3.0])]
        self.scales = [2.0]

    def forward(self, x):
        for p in self.pl:
            x = x * p
        for layer in self.ml:
            x = layer(x)
        for key in self.md:
            x = self.md[key](x)
        return x * self.plain[0] * self.scales[0] + self.ml[0].weight.sum()


def test_module_containers_and_list_attributes_are_guarded():
    jt.manual_seed(0)
    model = Containers()
    mutations = [
        lambda: model.pl.__setitem__(0, nn.Parameter(jt.tensor([3.0, 1.0]))),
        lambda: model.pl.append(nn.Parameter(jt.tensor([2.0, 2.0]))),
        lambda: model.ml.append(nn.Linear(2, 2)),
        lambda: model.ml.__setitem__(0, nn.Linear(2, 2)),
        lambda: model.md.__setitem__("b", nn.Linear(2, 2)),
        lambda: model.md.__setitem__("a", nn.Linear(2, 2)),
        lambda: model.plain.__setitem__(0, jt.tensor([-1.0, 1.0])),
        lambda: model.scales.__setitem__(0, 7.0),
        lambda: setattr(model.ml[1], "weight", nn.Parameter(jt.ones(2, 2))),
        lambda: model.md.pop("b"),
    ]
    compiled = jt.compile(model)
    with jt.no_grad():
        assert compiled(X).tolist() == model(X).tolist()
        for mutate in mutations:
            mutate()
            assert compiled(X).tolist() == model(X).tolist(), mutate


def test_a_sequential_appended_to_traces_again():
    model = nn.Sequential(nn.Linear(2, 2))
    compiled = jt.compile(model)
    with jt.no_grad():
        compiled(X)
        model.append(nn.ReLU())
        assert compiled(-X.abs()).tolist() == model(-X.abs()).tolist()


def test_unchanged_containers_need_no_new_trace():
    cfg = {"w": jt.tensor([1.0, 2.0]), "layers": [jt.tensor([2.0, 2.0])], "s": 2.0}

    def f(x):
        return x * cfg["w"] * cfg["layers"][0] * cfg["s"]
    runs = steps(f, [lambda: cfg["w"].add_(1.0),        # in place: the graph reads the tensor at each call
                     lambda: cfg.__setitem__("s", 2.0),   # an equal number
                     lambda: None])
    assert runs == 1


def test_a_module_passed_as_an_argument_is_guarded_like_a_captured_one():
    def step(model, x):
        return model(x) * model.scale

    model = nn.Linear(2, 2)
    model.scale = 2.0
    counted = counting_wrapper(step)
    compiled = jt.compile(counted)
    with jt.no_grad():
        assert compiled(model, X).tolist() == step(model, X).tolist()
        model.weight = nn.Parameter(jt.ones(2, 2))
        assert compiled(model, X).tolist() == step(model, X).tolist()
        model.scale = 3.0
        assert compiled(model, X).tolist() == step(model, X).tolist()
        assert compiled(model, X).tolist() == step(model, X).tolist()
    assert counted.runs == 3


def test_an_object_passed_as_an_argument_is_guarded_on_the_attributes_read():
    class Config:
        pass

    cfg = Config()
    cfg.w, cfg.s = jt.tensor([1.0, 2.0]), 2.0

    def f(cfg, x):
        return x * cfg.w * cfg.s

    counted = counting_wrapper(f)
    compiled = jt.compile(counted)
    assert compiled(cfg, X).tolist() == f(cfg, X).tolist()
    cfg.w = jt.tensor([5.0, 5.0])
    assert compiled(cfg, X).tolist() == f(cfg, X).tolist()
    cfg.s = 0.5
    assert compiled(cfg, X).tolist() == f(cfg, X).tolist()
    assert counted.runs == 3


def test_hyperparameters_of_library_modules_are_guarded_by_value():
    norm = nn.LayerNorm(2)
    compiled = jt.compile(norm)
    with jt.no_grad():
        assert compiled(X).tolist() == norm(X).tolist()
        norm.eps = 10.0
        assert compiled(X).tolist() == norm(X).tolist()
    leaky = nn.LeakyReLU(0.1)
    compiled = jt.compile(leaky)
    assert compiled(-X.abs()).tolist() == leaky(-X.abs()).tolist()
    leaky.negative_slope = 0.5
    assert compiled(-X.abs()).tolist() == leaky(-X.abs()).tolist()
    drop = nn.Dropout(0.0)
    compiled = jt.compile(drop)
    assert compiled(X).tolist() == X.tolist()
    drop.p = 1.0
    assert compiled(X).tolist() == drop(X).tolist() == [0.0, 0.0]


def test_a_nested_user_module_reading_its_own_attribute_is_guarded():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            return self.inner(x)

    model = Outer()
    compiled = jt.compile(model)
    assert compiled(X).tolist() == model(X).tolist()
    model.inner.scale = 3.0
    assert compiled(X).tolist() == model(X).tolist() == [1.5, -6.0]


def test_plain_objects_in_a_list_are_guarded_on_their_attributes():
    class Block:
        def __init__(self, w, s):
            self.w, self.s = w, s

    blocks = [Block(jt.tensor([1.0, 2.0]), 2.0), Block(jt.tensor([0.5, 0.5]), 1.0)]

    def f(x):
        for b in blocks:
            x = x * b.w * b.s
        return x
    runs = steps(f, [lambda: setattr(blocks[1], "s", 4.0), lambda: setattr(blocks[0], "w", jt.tensor([3.0, 3.0]))])
    assert runs == 3


def test_attributes_read_from_modules_in_a_module_list_are_guarded():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.alpha = 2.0
            self.act = jt.relu

        def forward(self, x):
            return x

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([Block(), Block()])

        def forward(self, x):
            for b in self.blocks:
                x = b.act(x * b.alpha) - 1
            return x + sum([b.alpha for b in self.blocks])  # a comprehension's own local too

    model = Model()
    compiled = jt.compile(model)
    with jt.no_grad():
        assert compiled(X).tolist() == model(X).tolist()
        model.blocks[1].alpha = 5.0
        assert compiled(X).tolist() == model(X).tolist()
        model.blocks[0].act = jt.tanh
        assert compiled(X).tolist() == model(X).tolist()


ALLOWED = {"double"}


def test_a_global_set_is_guarded_on_its_elements():
    def f(x):
        return x * 2 if "triple" not in ALLOWED else x * 3
    assert steps(f, [lambda: ALLOWED.add("triple"), lambda: ALLOWED.discard("triple")]) == 2


def test_a_function_appending_to_a_list_it_captures_is_not_traced_again():
    """A container the traced code changes is its output, not its input: guarding it would trace at every
    call (the trace's Python effects happen once, when it traces)."""
    seen = []

    def f(x):
        seen.append(tuple(x.shape))
        return x + 1
    assert steps(f, [lambda: None, lambda: None]) == 1
    assert len(seen) == 1 + 3  # the trace, and the three eager calls `steps` compares with


def test_the_retrace_reason_names_the_entry_that_changed():
    cfg = {"w": jt.ones(2), "s": 2.0}

    def f(x):
        return x * W[0] * cfg["w"] * cfg["s"] + W[1]
    compiled = jt.compile(f)
    reasons = []
    for change in [lambda: W.__setitem__(0, jt.ones(2)), lambda: W.append(jt.ones(2)),
                   lambda: cfg.__setitem__("s", 3.0), lambda: cfg.__setitem__("z", 3.0)]:
        compiled(X)
        change()
        assert compiled(X).tolist() == f(X).tolist()
        reasons.append(compiled.retrace_reason)
    assert reasons == ["no longer true: W[0] is the same Tensor", "no longer true: len(W) == 2",
                       "no longer true: cfg['s'] == 2.0", "no longer true: cfg has the keys 'w', 's'"]
    drop = nn.Dropout(0.1)
    compiled = jt.compile(drop)
    with jt.no_grad():
        compiled(X)
        drop.p = 0.2
        compiled(X)
    (function,) = compiled._by_mode.values()
    assert function.retrace_reason == "no longer true: self.p == 0.1"


def test_a_mutable_dataclass_argument_is_guarded_on_the_fields_read():
    import dataclasses

    @dataclasses.dataclass
    class Options:
        scale: float
        shift: jt.Tensor

    def f(opts, x):
        return x * opts.scale + opts.shift

    opts = Options(2.0, jt.tensor([1.0, 1.0]))
    compiled = jt.compile(f)
    assert compiled(opts, X).tolist() == f(opts, X).tolist()
    opts.scale = 3.0
    assert compiled(opts, X).tolist() == f(opts, X).tolist()
    opts.shift = jt.tensor([0.0, 5.0])
    assert compiled(opts, X).tolist() == f(opts, X).tolist()

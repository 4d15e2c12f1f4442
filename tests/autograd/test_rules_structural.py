"""Derivative rules of the structural ops (views, shape ops, products, indexing, sorting, casts, copies).

Every rule is gradchecked (float64 central differences) on the op's samples
(tests/ops/samples.py: non-contiguous, broadcast, 0-d and empty inputs) and on
extra cases for the tricky formulas (matmul broadcasting, einsum diagonals,
overlapping as_strided, scatter_reduce). Rules must not depend on the layout
of the incoming gradient, and must trace into a graph that the interpreter
runs to the eager values (so that compiled backward passes work).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitorch as jt
import jitorch.autograd.rules.structural  # noqa: F401  (declares the rules tested here)
from jitorch.autograd import gradcheck, gradgradcheck, no_grad
from jitorch.autograd.rule import NONDIFFERENTIABLE, RULES, Args
from jitorch.ir.interpreter import interpret
from jitorch.jit import TraceError
from jitorch.jit.tracer import trace_with_inputs
from jitorch.ops.registry import OPS
from jitorch.runtime.pytree import tree_leaves
from tests.autograd.slots import floating, tensor_slots
from tests.ops.samples import bind, samples
from tests.support import tensor_and_array

FAMILIES = ("view", "shape", "matmul", "index", "sort", "cast", "copy", "other")
WRITERS = ("copy", "fill.Scalar", "fill.Tensor", "zero")  # creation-kind ops that take a tensor to overwrite
STRUCTURAL = sorted(n for n, op in OPS.items()
                    if op.composite is None and (op.kind in FAMILIES or n in WRITERS))
# values that require grad but whose derivative is torch's not-implemented error (tests/func/test_fuzz42_tangents.py)
NO_DERIVATIVE = ("_unique", "_unique_consecutive")
DIFFERENTIABLE = [n for n in STRUCTURAL if n not in NONDIFFERENTIABLE and n not in NO_DERIVATIVE]


def _with(args, slots, tensors):
    """``args`` with the tensors at ``slots`` replaced."""
    args = [list(a) if isinstance(a, tuple) else a for a in args]
    for (i, j), t in zip(slots, tensors):
        if j is None:
            args[i] = t
        else:
            args[i][j] = t
    return tuple(tuple(a) if isinstance(a, list) else a for a in args)


def _differentiable_samples(name):
    """(op, args, slots) of the float64 samples of ``name`` with floating inputs and outputs;
    the floating inputs require grad."""
    op = OPS[name]
    found = []
    fallback = op.attrs.get("autograd_fallback")  # (torch's fallback: no derivative, test_scatter_with_reduce...)
    for s in samples(op, jt.float64):
        args = bind(op, s)
        if fallback is not None and fallback(args):
            continue
        slots = list(tensor_slots(op, args))
        with no_grad():
            outs = tree_leaves(op(*args))
        if not slots or not any(floating(o) for o in outs):
            continue
        leaves = [(args[i] if j is None else args[i][j]).detach().requires_grad_() for i, j in slots]
        found.append((op, _with(args, slots, leaves), slots))
    return found


def _float_outputs(result):
    return tuple(o for o in tree_leaves(result) if floating(o))


def _check(fn, inputs):
    """First and second derivatives against finite differences (the rules' own ops must have rules too)."""
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


def _check_sample(op, args, slots):
    leaves = [args[i] if j is None else args[i][j] for i, j in slots]
    _check(lambda *ts: _float_outputs(op(*_with(args, slots, ts))), tuple(leaves))


def test_every_structural_op_has_a_rule_or_is_declared_nondifferentiable():
    missing = [n for n in STRUCTURAL if n not in RULES and n not in NONDIFFERENTIABLE]
    assert not missing, f"structural ops without a derivative rule: {missing}"


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradients_on_samples(name):
    cases = _differentiable_samples(name)
    assert cases, f"{name}: no sample with floating inputs and outputs"
    for op, args, slots in cases:
        _check_sample(op, args, slots)


def _leaf(shape, layout="contiguous", seed=0, low=-2.0, high=2.0):
    arr = np.random.default_rng(seed).uniform(low, high, shape)
    return tensor_and_array(arr, layout)[0].requires_grad_()


MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((4,), (2, 4, 3)), ((2, 2, 3), (3,)),
                 ((2, 3, 4), (4, 2)), ((3, 4), (2, 4, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 2, 3), (4, 1, 3, 2))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_gradients_sum_broadcast_batches_back(shapes):
    a, b = (_leaf(s, "transposed" if len(s) > 1 else "strided", seed=k) for k, s in enumerate(shapes))
    _check(jt.matmul, (a, b))


EINSUMS = [("ii->i", [(3, 3)]), ("ii->", [(3, 3)]), ("ij->", [(2, 3)]), ("iij->ji", [(2, 2, 3)]),
           ("i,j->ij", [(2,), (3,)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]), ("ij,jk", [(2, 3), (3, 4)]),
           ("...ij,...jk->...ik", [(1, 2, 3), (2, 3, 2)]), ("ij,ij->i", [(2, 3), (1, 3)]),
           ("ii,i->i", [(3, 3), (3,)])]


@pytest.mark.parametrize("equation,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum_gradients(equation, shapes):
    tensors = [_leaf(s, "transposed" if len(s) > 1 else "contiguous", seed=k) for k, s in enumerate(shapes)]
    _check(lambda *ts: jt.einsum(equation, *ts), tuple(tensors))


AS_STRIDED = [("contiguous", (3, 3), (1, 1), 0),   # overlapping windows
              ("contiguous", (2, 2), (0, 1), 1),   # a repeated row
              ("offset", (2, 3), (3, 1), 4),       # an input that starts inside its storage
              ("transposed", (2, 2), (1, 3), 1),   # an input whose storage order differs from its own
              ("contiguous", (2, 3, 2), (2, 4, 1), 0),  # every storage element once, permuted (a copy back)
              ("transposed", (3, 2, 2), (4, 1, 2), 0)]


@pytest.mark.parametrize("layout,size,stride,offset", AS_STRIDED)
def test_as_strided_gradients_follow_the_storage(layout, size, stride, offset):
    x = _leaf((3, 4), layout)
    _check(lambda t: t.as_strided(size, stride, offset), (x,))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients(reduce, include_self):
    x = _leaf((3, 4), "transposed", low=0.5)
    src = _leaf((3, 5), seed=1, low=0.5)
    index = jt.tensor([[0, 1, 0, 3, 1], [2, 2, 2, 0, 1], [3, 3, 0, 0, 0]])
    _check(lambda s, v: s.scatter_reduce(1, index, v, reduce, include_self=include_self), (x, src))


def test_scatter_reduce_prod_with_zeros_in_src():
    x = _leaf((2, 3), seed=2, low=0.5)
    src = jt.tensor([[0.0, 2.0, 0.0, 1.5], [0.0, 3.0, 0.5, 2.0]], dtype=jt.float64, requires_grad=True)
    index = jt.tensor([[0, 1, 2, 2], [1, 1, 0, 2]])  # row 0: one zero per target; row 1: a single zero
    _check(lambda s, v: s.scatter_reduce(1, index, v, "prod"), (x, src))


def test_scatter_with_a_larger_src():
    x = _leaf((3, 4), seed=3)
    src = _leaf((4, 5), "strided", seed=4)
    index = jt.tensor([[0, 1], [2, 3], [3, 0]])  # (no index twice in a row: which write wins is unspecified)
    _check(lambda s, v: s.scatter(1, index, v), (x, src))


SCATTERS_WITH_REDUCE = {
    "function": lambda T, x, i, v: T.scatter(x, 0, i, v, reduce="add"),
    "number": lambda T, x, i, v: x.scatter(0, i, 2.0, reduce="multiply"),
    "in place": lambda T, x, i, v: x.clone().scatter_(0, i, v, reduce="multiply"),
    "out": lambda T, x, i, v: T.scatter(x, 0, i, v, reduce="add", out=T.zeros(4)),
}


@pytest.mark.parametrize("form", sorted(SCATTERS_WITH_REDUCE))
def test_scatter_with_reduce_has_no_derivative_as_in_torch(form):
    """torch's autograd fallback serves scatter with reduce=: its result requires grad and a backward through
    it raises. Found by the fuzzer (seed 2510209): jitorch's rule for it made plain scatter save its
    result, so that writing the result in place refused a backward torch runs."""
    torch = pytest.importorskip("torch")
    outcomes = []
    for T in (jt, torch):
        x, v = T.ones(4, requires_grad=True), T.tensor([2.0, 3.0], requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch's deprecation of reduce=)
            y = SCATTERS_WITH_REDUCE[form](T, x, T.tensor([0, 1]), v)
        with pytest.raises(RuntimeError) as error:
            y.sum().backward()
        outcomes.append((y.requires_grad, str(error.value)))
    assert outcomes[0] == outcomes[1]
    x = jt.ones(4, requires_grad=True) * 1
    y = x.scatter(0, jt.tensor([0, 1]), jt.tensor([2.0, 3.0]))
    y.exp2_()  # plain scatter saves its index alone
    y.sum().backward()


def test_to_copy_gives_the_gradient_in_the_input_dtype():
    x = jt.tensor([1.0, 2.0], dtype=jt.float32, requires_grad=True)
    (x.to(jt.float64) * jt.tensor([3.0, 4.0], dtype=jt.float64)).sum().backward()
    assert x.grad.dtype is jt.float32 and x.grad.tolist() == [3.0, 4.0]


def test_overwriting_ops_pass_zeros_to_self_and_the_gradient_to_src():
    x = jt.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=jt.float64, requires_grad=True)
    src = jt.tensor([5.0, 6.0], dtype=jt.float64, requires_grad=True)
    y = OPS["copy"](x, src, False)  # the functional form of x.copy_(src)
    (y * jt.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=jt.float64)).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert src.grad.tolist() == [4.0, 6.0]


# The incoming gradient's layout and tracing ------------------------------------------------

def _rule_inputs(op, args, seed=0):
    """(eager output, a random gradient for it, the same gradient in a strided layout)."""
    rng = np.random.default_rng(seed)
    with no_grad():
        out = op(*args)

    def one(o):
        if not isinstance(o, jt.Tensor):
            return o, o
        if not o.dtype.is_floating_point:
            return jt.zeros_like(o), jt.zeros_like(o)
        arr = rng.standard_normal(tuple(o.shape))
        return tensor_and_array(arr)[0], tensor_and_array(arr, "strided")[0]

    if isinstance(out, jt.Tensor):
        g, strided = one(out)
    else:
        pairs = [one(o) for o in out]
        g, strided = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    return out, g, strided


def _run_rule(op, g, args, out):
    """The rule called as the engine calls it: on the arguments as the op received them."""
    with no_grad():
        return RULES[op.name].backward(g, Args(op.schema, op.convert(args)), out)


def _assert_same(got, expected):
    got, expected = tree_leaves(got), tree_leaves(expected)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert (a is None) == (b is None)
        if a is not None:
            assert tuple(a.shape) == tuple(b.shape)
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_rules_do_not_depend_on_the_layout_of_the_gradient(name):
    for op, args, _ in _differentiable_samples(name):
        out, g, strided = _rule_inputs(op, args)
        _assert_same(_run_rule(op, strided, args, out), _run_rule(op, g, args, out))


def _indexes_with_mask(op, args):
    """Whether an index argument (``Tensor?[] indices``) holds a bool mask."""
    return any(a.name == "indices" and any(t is not None and t.dtype is jt.bool for t in v)
               for a, v in zip(op.schema.args, args))


# rules whose gradient takes a mask's elements (masked_select), a size the data decides, as torch's do
MASK_SIZED_RULES = ("masked_scatter",)


def _traces(fn, *args):
    try:
        return trace_with_inputs(fn, args, {})
    except TraceError:
        return None


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_rules_trace_to_graphs_that_give_the_eager_gradients(name):
    for op, args, _ in _differentiable_samples(name):
        if _traces(lambda *a: op(*a), *args) is None:
            continue  # the forward itself cannot be traced (data-dependent shapes, storage-addressing)
        out, g, _ = _rule_inputs(op, args)

        def backward(g, *args):
            with no_grad():
                return RULES[op.name].backward(g, Args(op.schema, op.convert(args)), op(*args))

        if _indexes_with_mask(op, args) or name in MASK_SIZED_RULES:  # a data-dependent size: the tracer says so
            with pytest.raises(TraceError, match="depends on the tensors' values"):
                trace_with_inputs(backward, (g, *args), {})
            continue
        graph, inputs = trace_with_inputs(backward, (g, *args), {})
        got, _ = interpret(graph, inputs)
        _assert_same(got, _run_rule(op, g, args, out))


@pytest.mark.parametrize("batch", [(), (5,), (2, 3)])
def test_linear_weight_gradient_is_contiguous_as_the_weight(batch):
    # matmul's gradient for weight.t() is computed in that transposed layout, the batch folded into the rows
    x = jt.randn(*batch, 4, 3, requires_grad=True, dtype=jt.float64)
    w = jt.randn(6, 3, requires_grad=True, dtype=jt.float64)
    g = jt.randn(*batch, 4, 6, dtype=jt.float64)
    jt.matmul(x, w.t()).backward(g)
    assert w.grad.is_contiguous()
    rows = x.detach().numpy().reshape(-1, 3)
    np.testing.assert_allclose(w.grad.numpy(), g.numpy().reshape(-1, 6).T @ rows, rtol=1e-12)


@pytest.mark.parametrize("shape,dim,index_shape", [
    ((5, 7), 1, (5, 1)), ((5, 7), 0, (1, 7)), ((3, 4, 6), -1, (3, 4, 1)), ((3, 4, 6), 1, (3, 1, 6)),
    ((5, 7), 1, (5, 2)), ((5, 7), 1, (3, 1)),  # several picks per line, and lines left out: the scatter
])
def test_gather_gradients_one_pick_per_line_and_general(shape, dim, index_shape, rng):
    import torch
    x = rng.normal(size=shape)
    index = rng.integers(0, shape[dim], size=index_shape)
    g = rng.normal(size=index_shape)
    got = jt.tensor(x, requires_grad=True)
    got.gather(dim, jt.tensor(index)).backward(jt.tensor(g))
    expected = torch.tensor(x, requires_grad=True)
    expected.gather(dim, torch.tensor(index)).backward(torch.tensor(g))
    np.testing.assert_array_equal(got.grad.numpy(), expected.grad.numpy())
    assert gradcheck(lambda t: t.gather(dim, jt.tensor(index)), [jt.tensor(x, requires_grad=True)])


def test_nll_loss_backward_compiles_without_a_scatter_into_zeros():
    """The pick of each row's target: its gradient is a comparison of positions with the targets, fused
    into the kernels of log_softmax's backward, not a (rows, classes) zero tensor scattered into."""
    logits = jt.randn(6, 50, requires_grad=True)
    targets = jt.randint(0, 50, (6,))

    def step(x, y):
        loss = jt.nn.functional.cross_entropy(x, y)
        loss.backward()
        return loss
    compiled = jt.compile(step)
    compiled(logits, targets)
    expected = logits.grad.clone()
    logits.grad = None
    step(logits, targets)
    np.testing.assert_allclose(expected.numpy(), logits.grad.numpy(), rtol=1e-6, atol=1e-7)
    names = [n.op.name for n in compiled.lower(logits, targets).graph.nodes]
    assert "scatter_add" not in names and "new_zeros" not in names and "movedim" not in names
    assert names.count("eq") == 2, names  # ignore_index's mask, and the positions compared with the targets


def test_an_eager_nll_loss_backward_scatters_into_zeros():
    """Eagerly (an LSTM language model's loss after a compiled model) the pick's gradient is one scatter into
    zeros, as torch's: the comparison of positions made two more tensors of the logits' size for no fusion.
    (nll_loss's own eager pick is one node since session 54, tests/nn/test_cross_entropy54.py: the pick here is
    the composition it computes while traced.)"""
    import torch
    x = jt.randn(6, 50, requires_grad=True)
    targets = jt.randint(0, 50, (6,))
    loss = -x.log_softmax(1).gather(1, targets.unsqueeze(1)).squeeze(1).mean()
    with jt.profiler.profile() as prof:
        loss.backward()
    ops = {e.key for e in prof.key_averages()}
    # (in place: the functional scatter would copy the zeros first)
    assert "aten::scatter_add_" in ops and not {"aten::eq", "aten::where", "aten::scatter_add"} & ops
    reference = torch.tensor(x.detach().numpy(), requires_grad=True)
    torch.nn.functional.nll_loss(reference.log_softmax(1), torch.tensor(targets.numpy())).backward()
    np.testing.assert_allclose(x.grad.numpy(), reference.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bad", [10, -1])
@pytest.mark.parametrize("captured", [False, True])
def test_out_of_range_target_raises_in_a_compiled_step_that_drops_the_loss(bad, captured):
    """Regression: with gather's gradient a comparison of positions, a compiled step that does not return the
    loss had no gather left (the forward's is dead), and an out-of-range target gave a wrong gradient silently
    where eager (and the scatter before) raise. The positions' index_select checks the targets now."""
    model = jt.nn.Linear(8, 10)
    x, y = jt.randn(4, 8), jt.randint(0, 10, (4,))

    def step(*batch):
        model.zero_grad()
        jt.nn.functional.cross_entropy(model(batch[0] if batch else x), batch[1] if batch else y).backward()

    compiled = jt.compile(step)
    batch = () if captured else (x, y)
    compiled(*batch)
    y[2] = bad
    with pytest.raises((IndexError, RuntimeError), match="out of"):
        compiled(*batch)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        step(*batch)


def test_a_step_capturing_its_targets_compiles_into_one_graph():
    """Regression: cross-entropy checked the targets' range in Python whenever the target tensor held data, so a
    compiled step reading its batch from a closure (benchmarks/distributed.py's DDP step) fell back to eager."""
    model = jt.nn.Linear(8, 10)
    x, y = jt.randn(4, 8), jt.randint(0, 10, (4,))

    def step():
        model.zero_grad()
        loss = jt.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss
    compiled = jt.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compiled()
    want_grad = model.weight.grad.clone()
    np.testing.assert_allclose(got.item(), step().item(), rtol=1e-6)
    np.testing.assert_allclose(want_grad.numpy(), model.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    names = [n.op.name for n in compiled.lower().graph.nodes]
    # (the log-softmax as its row statistics where its log-probs are only picked: jitorch/ir/passes/lse.py)
    assert "_log_softmax_stats" in names and "index_select" in names, names


@pytest.mark.parametrize("loss", ["multi_margin_loss", "multilabel_margin_loss", "gaussian_nll_loss"])
def test_losses_over_captured_targets_compile(loss):
    """Regression: the losses' data checks ran on captured tensors inside a trace and sent it back to eager."""
    x = jt.rand(4, 5, requires_grad=True)
    y = {"multi_margin_loss": jt.randint(0, 5, (4,)), "multilabel_margin_loss": jt.tensor([[1, 3, -1, 0, 0]] * 4),
         "gaussian_nll_loss": jt.rand(4, 5)}[loss]
    var = jt.rand(4, 5) + 0.5
    fn = getattr(jt.nn.functional, loss)

    def f(t):
        return fn(t, y, var) if loss == "gaussian_nll_loss" else fn(t, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = jt.compile(f)(x)
    np.testing.assert_allclose(got.item(), f(x).item(), rtol=1e-5)

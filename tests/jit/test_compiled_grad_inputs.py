"""Compiled functions called on tensors that require grad behave as eager and torch: an input that is not
a leaf (a clone of a parameter) may be written in place, outputs require grad exactly when eager's do,
inputs no output depends on get no gradient, and the compiled backward checks the version counters of
only the tensors it reads (found by the differential fuzzer's gradient runs)."""

import warnings

import numpy as np
import pytest
import torch

import jitorch as jt


def ran_compiled(fn):
    """Whether every call of ``fn`` ran its graph (no entry fell back to eager)."""
    return bool(fn.cache) and all(e.eager_reason is None and e.graph is not None for e in fn.cache.values())


def write_into_row(T, x):
    x[-2] = 1.0


def write_through_strided_view(T, x):
    x[::2] = 1


def sign_in_place(T, x):
    x.sign_()


def put_in_place(T, x):
    x.put_(T.tensor([0]), T.tensor([-1.5]))


def index_put_in_place(T, x):
    x[T.tensor([1, 0])] = -2


WRITES = [write_into_row, write_through_strided_view, sign_in_place, put_in_place, index_put_in_place]


def grad_after_write(T, write, compiled):
    """The gradient of a leaf through a clone of it that the function writes into (then summed)."""
    leaf = T.tensor([[0.5, -1.0], [2.0, 3.0], [-0.25, 4.0]], requires_grad=True)
    x = leaf.clone()

    def fn(x):
        write(T, x)
        return ()

    (jt.compile(fn) if compiled else fn)(x)
    (x * x).sum().backward()
    return x, leaf.grad


@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.__name__)
def test_compiled_in_place_write_into_a_non_leaf_input_is_allowed_and_keeps_its_history(write):
    x, grad = grad_after_write(jt, write, compiled=True)
    tx, tgrad = grad_after_write(torch, write, compiled=False)
    np.testing.assert_allclose(x.detach().numpy(), tx.detach().numpy())
    np.testing.assert_allclose(grad.numpy(), tgrad.numpy())


@pytest.mark.parametrize("write", WRITES, ids=lambda w: w.__name__)
def test_compiled_in_place_write_into_a_leaf_input_raises_torchs_error(write):
    def fn(x):
        write(jt, x)
        return ()

    with pytest.raises(RuntimeError) as want:
        write(torch, torch.ones(3, 2, requires_grad=True))
    with pytest.raises(RuntimeError) as got:
        jt.compile(fn)(jt.ones(3, 2, requires_grad=True))
    assert str(got.value) == str(want.value)


def test_compiled_leafness_of_an_input_is_guarded():
    """A graph traced for a non-leaf input is not reused for a leaf, whose in-place write raises."""
    def fn(x):
        x[0] = 1.0
        return ()

    step = jt.compile(fn)
    step(jt.ones(3, requires_grad=True).clone())
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        step(jt.ones(3, requires_grad=True))
    assert len(step.cache) == 1  # the leaf's trace raised as eager does: nothing cached


def test_compiled_write_under_no_grad_into_a_non_leaf_input_stays_compiled():
    leaf = jt.tensor([1.0, 2.0], requires_grad=True)
    x = leaf.clone()

    def fn(x):
        with jt.no_grad():
            x.mul_(3)
        return x * 2

    step = jt.compile(fn)
    step(x).sum().backward()
    assert ran_compiled(step) and step.cache[next(iter(step.cache))].graph.mutations
    np.testing.assert_allclose(x.detach().numpy(), [3.0, 6.0])
    np.testing.assert_allclose(leaf.grad.numpy(), [2.0, 2.0])


def integer_index_write(T, x, i):
    i[T.tensor([0, 1, 3])] = 3
    return x * 2


def integer_compare_in_place(T, x, i):
    v = i[:]
    v.le_(v)
    return T.arccos(x.pow(1.0) / 10)


def index_put_through_a_view(T, x, i):
    v = i[..., :]
    v[T.tensor([0, 3, 1])] = i[2].clone()
    return x[T.tensor([-3])]


@pytest.mark.parametrize("program", [integer_index_write, integer_compare_in_place, index_put_through_a_view],
                         ids=lambda p: p.__name__)
def test_compiled_backward_ignores_writes_into_integer_tensors_it_does_not_read(program):
    grads = []
    for T, compiled in ((torch, False), (jt, True)):
        leaf = T.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
        fn = jt.compile(lambda x, i: program(jt, x, i)) if compiled else (lambda x, i: program(torch, x, i))
        fn(leaf.clone(), T.tensor([1, 2, 3, 4])).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    assert ran_compiled(fn)


def test_compiled_backward_raises_when_a_tensor_it_reads_was_written_after_the_call():
    def fn(x, w):
        return x * w

    messages = []
    for T, f in ((torch, fn), (jt, jt.compile(fn))):
        x, w = T.ones(3, requires_grad=True), T.tensor([1.0, 2.0, 3.0])
        y = f(x, w)
        w.add_(1)
        with pytest.raises(RuntimeError) as e:
            y.sum().backward()
        messages.append(str(e.value))
    assert "modified by an inplace operation" in messages[0]
    assert messages[1].startswith("one of the variables needed for gradient computation has been modified")


def overwrite_then_read(T, c, buf):
    def fn(x):
        buf.add_(1)
        c.add_(1)
        return x * c * buf
    return fn


def test_compiled_backward_of_outputs_reading_tensors_the_call_overwrote_sees_their_new_values():
    """The compiled backward recomputes from the tensors after the call: such a call runs eagerly."""
    grads = []
    for T in (torch, jt):
        c, buf = T.tensor([1.0, 2.0]), T.tensor([3.0, 4.0])
        fn = overwrite_then_read(T, c, buf)
        fn = jt.compile(fn) if T is jt else fn
        x = T.tensor([1.0, 1.0], requires_grad=True)
        fn(x.clone()).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0])
    np.testing.assert_allclose(grads[1], [2.0 * 4.0, 3.0 * 5.0])


def test_compiled_batch_norm_updates_running_statistics_and_stays_compiled_with_grad():
    bn = jt.nn.BatchNorm1d(3)
    step = jt.compile(lambda x: bn(x))
    x = jt.randn(4, 3, requires_grad=True)
    step(x).sum().backward()
    assert ran_compiled(step) and x.grad is not None
    assert not np.allclose(bn.running_mean.numpy(), 0.0)


def test_compiled_output_of_a_captured_tensor_without_grad_does_not_require_grad():
    c = jt.tensor([1.0, 2.0, 3.0, 4.0])

    def fn(x):
        return jt.select(c, 0, -4), c.argmin(0, True), x * 2

    first, index, doubled = jt.compile(fn)(jt.ones(3, requires_grad=True).clone())
    assert not first.requires_grad and first.grad_fn is None and not index.requires_grad
    assert doubled.requires_grad


def test_compiled_output_of_an_integer_cast_does_not_require_grad_and_unused_inputs_get_no_grad():
    def fn(T, a, x, b):
        out = T.zeros(5)
        T.arctan(x.to(T.int16), out=out)
        return x + 1, out.to(T.float64)

    results = []
    for T, compiled in ((torch, False), (jt, True)):
        leaves = [T.tensor([0.5, 1.5, 2.5, -1.0, 3.0], requires_grad=True) for _ in range(3)]
        f = (lambda a, x, b: fn(jt, a, x, b)) if compiled else (lambda a, x, b: fn(torch, a, x, b))
        f = jt.compile(f) if compiled else f
        plus, cast = f(*[t.clone() for t in leaves])
        plus.sum().backward()
        results.append((cast.requires_grad, [None if t.grad is None else t.grad.numpy() for t in leaves]))
    (want_cast, want_grads), (cast, grads) = results
    assert cast is want_cast is False
    assert [g is None for g in grads] == [g is None for g in want_grads] == [True, False, True]
    np.testing.assert_allclose(grads[1], want_grads[1])


def test_compiled_backward_inside_the_function_through_a_non_leaf_input_runs_eagerly():
    """The gradient of a non-leaf input flows on into its history, which a graph cannot follow."""
    leaf = jt.tensor([1.0, 2.0], requires_grad=True)

    def fn(x):
        (x * x).sum().backward()
        return x.detach() + 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jt.compile(fn)(leaf * 3)
    assert any("not a leaf" in str(w.message) for w in caught)
    np.testing.assert_allclose(leaf.grad.numpy(), [18.0, 36.0])


def test_compiled_gradient_flows_into_the_history_of_a_captured_non_leaf_tensor():
    p = jt.tensor([1.0, 2.0], requires_grad=True)
    w = p * 3
    x = jt.tensor([1.0, 5.0], requires_grad=True)
    step = jt.compile(lambda x: x * w)
    step(x).sum().backward()
    assert ran_compiled(step)
    np.testing.assert_allclose(p.grad.numpy(), [3.0, 15.0])
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])


def test_compiled_hook_on_a_non_leaf_input_runs_eagerly_once_per_call():
    seen = []

    def fn(x):
        x.register_hook(lambda g: seen.append(g))
        return x * 2

    leaf = jt.ones(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jt.compile(fn)(leaf.clone()).sum().backward()
    assert any("adds a hook to a tensor that outlives the call" in str(w.message) for w in caught)
    assert len(seen) == 1


@pytest.mark.parametrize("make", ["hann_window", "zeros", "detached input"])
def test_compiled_returned_new_leaf_that_requires_grad_is_a_leaf_as_torchs(make):
    """Fuzz seed 7202672: a tensor the function makes with requires_grad=True (``hann_window(1,
    requires_grad=True)``, ``x.detach().requires_grad_()``) is returned eagerly as a leaf that requires grad; the
    compiled call returned a graph output that did not. Such a call runs eagerly; returning an input or a captured
    parameter as it is stays compiled."""
    def program(T, x):
        if make == "hann_window":
            return T.hann_window(1, requires_grad=True), x + 1
        if make == "zeros":
            return T.zeros(3, requires_grad=True), x + 1
        return x.detach().requires_grad_(), x + 1
    want = program(torch, torch.ones(3))
    for fn in (lambda x: program(jt, x), jt.compile(lambda x: program(jt, x))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = fn(jt.ones(3))
        assert [(t.requires_grad, t.is_leaf, t.tolist()) for t in got] == \
            [(t.requires_grad, t.is_leaf, t.tolist()) for t in want]
    w = jt.ones(2, requires_grad=True)
    kept = jt.compile(lambda x: (x, w, x * w))
    x = jt.ones(2, requires_grad=True)
    out = kept(x)
    assert out[0] is x and out[1] is w and ran_compiled(kept)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_compiled_gradient_of_a_captured_parameter_read_only_by_a_folded_fill_is_zeros(compiled):
    """Fuzz seed 7203079: ``fill(c0, -1).sqrt_()`` gives the captured ``c0`` a zero gradient (fill's derivative);
    constant folding took the read of ``c0`` out of the compiled graph, whose node then did not take ``c0``: its
    .grad stayed None (without the sqrt_, the output did not even require grad)."""
    grads = []
    for T in (torch, jt):
        c0 = T.ones(4, requires_grad=True)

        def fn(x):
            v = T.fill(c0, -1)
            v.sqrt_()
            return v, v * 2
        if compiled and T is jt:
            fn = jt.compile(fn)
        out = fn(T.tensor(0.5))
        assert [o.requires_grad for o in out] == [True, True]
        (out[0].sum() + out[1].sum()).backward()
        grads.append(c0.grad.tolist())
    assert grads[0] == grads[1] == [0.0] * 4


@pytest.mark.parametrize("shape", [(), (2,), (2, 3)])
def test_compiled_gradient_of_an_input_given_an_in_place_view_op_after_its_use(shape):
    """Fuzz seed 7203530: ``v = remainder(x, c); x.swapaxes_(-1, 0); return v``: eagerly the backward from
    ``v`` reaches ``x`` (through x's history before the swapaxes_); the compiled call looked for x's history as
    it was at the end (the swapaxes_ node) and gave no gradient."""
    def program(T, x):
        v = T.remainder(x, T.tensor(1.875))
        x.swapaxes_(-1, 0)
        return v * 3
    grads = []
    for T, fn in ((torch, lambda x: program(torch, x)), (jt, lambda x: program(jt, x)),
                  (jt, jt.compile(lambda x: program(jt, x)))):
        x = T.full(shape, 2.5, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(x * 1).sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == grads[2]

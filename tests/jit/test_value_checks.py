"""Checks of values in compiled calls: a bad value raises torch's exception, with its message, before the call
writes an output or an input in place, as eagerly (`jitorch.ops.value_checks`).

Each case runs on torch, eagerly and compiled (twice: the first call traces); the compiled graph must hold the
check node (``_check_values``) with the rule that raised, and an input the function updates in place after the
check must keep its values."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.ops.registry import OPS


def _bce(lib, p, y):
    return lib.nn.functional.binary_cross_entropy(p, y)


def _bce_of_sigmoid(lib, x, y):
    return lib.nn.functional.binary_cross_entropy(x.sigmoid() * 2, y)


def _nll(lib, x, t):
    return lib.nn.functional.nll_loss(x, t)


def _cross_entropy(lib, x, t):
    return lib.nn.functional.cross_entropy(x, t, label_smoothing=0.1)


def _one_hot(lib, t):
    return lib.nn.functional.one_hot(t, 3) * 2


def _gaussian_nll(lib, x, y, var):
    return lib.nn.functional.gaussian_nll_loss(x, y, var)


def _multi_margin(lib, x, t):
    return lib.nn.functional.multi_margin_loss(x, t)


def _multilabel_margin(lib, x, t):
    return lib.nn.functional.multilabel_margin_loss(x, t)


def _max_unpool(lib, x, i):
    return lib.nn.functional.max_unpool1d(x, i, 2)


def _embedding_bag(lib, i, w, offsets):
    return lib.nn.functional.embedding_bag(i, w, offsets)


def _dead(lib, use):
    """A function computing ``use(lib, x, i)`` and returning something else: the indexing op is dead code."""
    return lambda lib_, x, i: (use(lib_, x, i), x * 2)[1]


X45 = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
# name -> (function of (library, *tensors), its arguments as NumPy arrays, the rule of the check that raises)
CASES = {
    "bce_outside_0_1": (_bce, [np.float32([0.5, 1.5, 0.2]), np.float32([1, 0, 1])], "probabilities"),
    "bce_nan": (_bce, [np.float32([0.5, np.nan, 0.2]), np.float32([1, 0, 1])], "probabilities"),
    "bce_of_computed_input": (_bce_of_sigmoid, [np.float32([0.5, -2.0, 3.0]), np.float32([1, 0, 1])],
                              "probabilities"),
    "nll_target_too_big": (_nll, [X45, np.int64([1, 2, 5, 0])], "class_targets"),
    "nll_target_negative": (_nll, [X45, np.int64([1, -1, 2, 0])], "class_targets"),
    "cross_entropy_target": (_cross_entropy, [X45, np.int64([1, 2, 7, 0])], "class_targets"),
    "one_hot_class": (_one_hot, [np.int64([0, 3, 1])], "one_hot_classes"),
    "one_hot_negative": (_one_hot, [np.int64([0, -1, 1])], "one_hot_classes"),
    "quantile_outside_0_1": (lambda lib, x, q: x.quantile(q) * 2, [X45[0], np.float32([0.5, 1.5])], "quantiles"),
    "quantile_nan": (lambda lib, x, q: x.nanquantile(q), [X45[0], np.float32([np.nan])], "quantiles"),
    "gaussian_nll_variance": (_gaussian_nll, [X45[0], X45[1], np.float32([1, 1, -1, 1, 1])],
                              "nonnegative_variance"),
    "multi_margin_target": (_multi_margin, [X45, np.int64([1, 2, 5, 0])], "margin_targets"),
    "multilabel_margin_target": (_multilabel_margin, [X45, np.int64([[1, 7, -1, 0, 0]] * 4)], "multilabel_targets"),
    "max_unpool_index": (_max_unpool, [X45[None, :2, :2], np.int64([[[0, 9], [1, 2]]])], "unpool_indices"),
    "embedding_bag_index": (_embedding_bag, [np.int64([0, 2, 9]), X45, np.int64([0, 2])], "bag_indices"),
    "cholesky_not_positive_definite": (lambda lib, a: lib.linalg.cholesky(a) * 2, [-np.eye(3, dtype=np.float32)],
                                       "linalg_failures"),
    "cholesky_batch_element": (lambda lib, a: lib.cholesky(a), [np.float32([np.eye(2), -np.eye(2)])],
                               "linalg_failures"),
    "inv_singular": (lambda lib, a: lib.linalg.inv(a) + 1, [np.float32([[1, 2], [2, 4]])], "linalg_failures"),
    "solve_singular": (lambda lib, a: lib.linalg.solve(a, a[0]), [np.float32([[1, 2], [2, 4]])], "linalg_failures"),
    "lu_factor_zero_pivot": (lambda lib, a: lib.linalg.lu_factor(a)[0], [np.zeros((2, 2), np.float32)],
                             "linalg_failures"),
    "index_reduce_index": (lambda lib, x, i: x.index_reduce(0, i, x[:2], "prod"), [X45, np.int64([0, 4])],
                           "indices_in_range"),
    "dead_index_select": (_dead(None, lambda lib, x, i: x.index_select(0, i)), [X45, np.int64([0, 4])], "op"),
    "dead_gather": (_dead(None, lambda lib, x, i: x.gather(1, i)), [X45, np.int64([[0], [5], [1], [1]])], "op"),
    "dead_getitem": (_dead(None, lambda lib, x, i: x[i]), [X45, np.int64([1, 4])], "op"),
    "dead_take": (_dead(None, lambda lib, x, i: x.take(i)), [X45, np.int64([3, 20])], "op"),
    "dead_scatter": (_dead(None, lambda lib, x, i: x.scatter(0, i, 1.0)), [X45, np.int64([[0, 6]])], "op"),
    "dead_index_add": (_dead(None, lambda lib, x, i: x.index_add(0, i, x[:2])), [X45, np.int64([0, 4])], "op"),
    "dead_index_put": (_dead(None, lambda lib, x, i: x.index_put((i,), x[0])), [X45, np.int64([0, -5])], "op"),
    "dead_embedding": (_dead(None, lambda lib, x, i: lib.nn.functional.embedding(i, x)), [X45, np.int64([0, 4])],
                       "op"),
}


def _run(fn, lib, arrays):
    tensors = [lib.tensor(a.copy()) for a in arrays]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (torch.cholesky's deprecation)
            fn(lib, *tensors)
    except Exception as e:  # noqa: BLE001  (what each library raises is the subject)
        return type(e).__name__.lstrip("_"), str(e)  # (torch.linalg.LinAlgError is torch._C._LinAlgError)
    return None


def _compiled(fn, arrays, tail):
    """The compiled function (``tail(p)`` run after ``fn``: an in-place update of input p), its error and p."""
    p = jt.ones(3)
    g = jt.compile(lambda p, *ts: (fn(jt, *ts), tail(p))[0])
    errors = []
    for _ in range(2):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g(p, *[jt.tensor(a.copy()) for a in arrays])
        except Exception as e:  # noqa: BLE001
            errors.append((type(e).__name__, str(e)))
    return g, p, errors


@pytest.mark.parametrize("case", CASES)
def test_a_compiled_call_raises_torchs_error_for_a_bad_value_before_writing(case):
    fn, arrays, rule = CASES[case]
    want = _run(fn, torch, arrays)
    assert want is not None
    assert _run(fn, jt, arrays) == want
    g, p, errors = _compiled(fn, arrays, lambda p: p.mul_(3))
    assert errors == [want, want]
    assert p.tolist() == [1.0, 1.0, 1.0]  # the update after the check was not written
    graph = g.lower(p, *[jt.tensor(a) for a in arrays]).executable.graph
    checks = [n for n in graph.nodes if n.op.name == "_check_values"]
    assert rule in [n.args[1] for n in checks]


@pytest.mark.parametrize("case", ["bce_of_computed_input", "nll_target_too_big", "dead_gather"])
def test_good_values_pass_the_checks_with_eagers_results(case):
    fn, arrays, _ = CASES[case]
    good = [np.clip(a, 0, 1) if a.dtype.kind == "f" else a % 4 for a in arrays]
    if case == "bce_of_computed_input":
        good[0] = good[0] - 5
    want = fn(jt, *[jt.tensor(a) for a in good])
    g, p, errors = _compiled(fn, good, lambda p: p.mul_(3))
    assert errors == []
    got = g(jt.ones(3), *[jt.tensor(a) for a in good])
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    assert p.tolist() == [9.0, 9.0, 9.0]


def test_a_dead_indexing_op_leaves_a_check_that_replays_it_and_nothing_else():
    """Dead-code elimination removes an unused ``index_select`` but leaves a ``_check_values`` of rule "op"
    naming it, over the same tensors; no kernel or eager step computes the selection."""
    f = jt.compile(lambda x, i: (x.index_select(0, i), x * 2)[1])
    low = f.lower(jt.tensor(X45), jt.tensor([0, 1]))
    names = [n.op.name for n in low.executable.graph.nodes]
    assert "index_select" not in names and names.count("_check_values") == 1
    (check,) = [n for n in low.executable.graph.nodes if n.op.name == "_check_values"]
    assert check.args[1] == "op" and check.args[2][0] == "index_select"
    assert check.args[0] == [low.executable.graph.inputs[0], low.executable.graph.inputs[1]]


def test_checks_run_before_the_steps_they_need_not_wait_for():
    """The executor moves a check up to just after what makes its values: here before the kernel that updates
    the parameter in place, which the trace recorded before the loss."""
    def step(p, x, t):
        p.sub_(x.sum() * 0.1)
        return jt.nn.functional.nll_loss(x, t)

    low = jt.compile(step).lower(jt.ones(3), jt.tensor(X45), jt.tensor([0, 1, 2, 3]))
    kinds = [getattr(s, "nodes", [])[0].op.name if hasattr(s, "reason") else "kernel" for s in low.executable.steps]
    assert kinds[0] == "_check_values"


def test_the_check_op_is_kept_by_every_pass_and_is_not_differentiable():
    from jitorch.ir.passes.rewrite import has_effects
    from jitorch.ir.graph import Node

    assert has_effects(Node(OPS["_check_values"], ([], "probabilities", [])))
    x = jt.tensor([0.5], requires_grad=True)
    loss = jt.nn.functional.binary_cross_entropy(x, jt.tensor([1.0]))
    loss.backward()
    assert x.grad is not None and re.fullmatch(r"-?[0-9.]+", str(float(x.grad[0])))


def test_checks_of_cuda_tensors_run_eagerly_and_not_in_a_compiled_call():
    """On the (fake) CUDA device an eager check copies its tensors to the host and raises; a compiled call copies
    nothing to the host and waits for nothing (tests/cuda/test_training.py), so it skips the checks of tensors
    in device memory: a bad target is then found by the gather's check on the device, reported at the next
    synchronization as its RuntimeError (documented)."""
    from jitorch.backends.cuda.fake import FakeBackend
    from jitorch.runtime.cuda_backend import use_backend

    with use_backend(FakeBackend()):
        x = jt.tensor(X45, device="cuda")
        bad = jt.tensor([1, 2, 7, 0], device="cuda")
        with pytest.raises(IndexError, match=r"^Target 7 is out of bounds\.$"):
            _cross_entropy(jt, x, bad)
        g = jt.compile(lambda x, t: _cross_entropy(jt, x, t))
        good = jt.tensor([1, 2, 3, 0], device="cuda")
        want = _cross_entropy(jt, x, good)
        got = g(x, good)
        assert got.device.type == "cuda" and float(got) == pytest.approx(float(want), rel=1e-6)
        with pytest.raises(RuntimeError, match="index 7 is out of bounds"):
            float(g(x, bad))


def test_an_input_updated_by_the_kernel_that_computes_a_checked_value_is_not_written_before_the_check():
    """``s = 2 sigmoid(x); bce(s, y); x.add_(s)``: one kernel computes ``s`` and ``x + s``, which the plan would
    write straight into ``x``; the check of ``s`` runs after that kernel, so ``x`` is updated through a buffer of
    its own, written back after the checks (`Plan`), and a bad ``s`` leaves ``x`` as it was, as eagerly."""
    def f(x, y):
        s = x.sigmoid() * 2
        loss = jt.nn.functional.binary_cross_entropy(s, y)
        x.add_(s)
        return loss

    g = jt.compile(f)
    for _ in range(2):
        x = jt.tensor([0.5, -2.0, 3.0])
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            g(x, jt.tensor([1.0, 0.0, 1.0]))
        assert x.tolist() == [0.5, -2.0, 3.0]
    low = g.lower(x, jt.tensor([1.0, 0.0, 1.0]))
    assert low.executable.plan.inplace == {}
    x = jt.tensor([-5.0, -6.0, -7.0])
    g(x, jt.tensor([1.0, 0.0, 1.0]))
    np.testing.assert_allclose(x.numpy(), np.float32([-5, -6, -7]) + 2 / (1 + np.exp(np.float32([5, 6, 7]))),
                               rtol=1e-6)


@pytest.mark.parametrize("index, error", [([2, 0, 2], None), ([2, 5], "index 5 is out of bounds for dimension 1 with size 5")])
def test_a_dead_index_fill_by_a_0d_value_tensor_replays_with_the_value_0d_seed_7820309(index, error):
    """Fuzz seed 7820309: the check left for an unused ``index_fill`` replayed it with its 0-d fill value made
    1-d (``np.ascontiguousarray`` gives at least one dim), so a compiled call raised "only supports a
    0-dimensional value tensor" where eager returns. Good indices now pass, bad ones raise eager's error."""
    def f(x, i, v):
        x.index_fill(1, i, v)
        return x * 2

    args = (jt.tensor(X45), jt.tensor(index), jt.tensor(2.0))
    g = jt.compile(f)
    low = g.lower(*args)
    (check,) = [n for n in low.executable.graph.nodes if n.op.name == "_check_values"]
    assert check.args[2][0] == "index_fill.Tensor"
    for call in (f, g, g):
        if error is None:
            np.testing.assert_array_equal(call(*args).numpy(), X45 * 2)
        else:
            with pytest.raises(IndexError, match=error):
                call(*args)


def test_a_compiled_forward_with_a_backward_checks_targets_before_writing_running_statistics():
    """A compiled call in grad mode runs the forward graph cut from its joint trace (`jit.partition`). The cut
    put the target check, which no output reads, into the backward graph: a bad target then raised the gather's
    RuntimeError where eager raises torch's IndexError, after the batch norm had updated its running statistics.
    The check is the forward's now, and runs first; good targets train as eagerly."""
    jt.manual_seed(0)
    model = jt.nn.Sequential(jt.nn.Linear(3, 4), jt.nn.BatchNorm1d(4))
    twin = jt.nn.Sequential(jt.nn.Linear(3, 4), jt.nn.BatchNorm1d(4))
    twin.load_state_dict(model.state_dict())

    def loss_of(net):
        return lambda x, t: jt.nn.functional.cross_entropy(net(x), t)

    g = jt.compile(loss_of(model))
    x, good, bad = jt.tensor(X45[:, :3] * 3), jt.tensor([0, 1, 2, 3]), jt.tensor([0, 1, 9, 3])
    for _ in range(2):
        g(x, good).backward()
        loss_of(twin)(x, good).backward()
    (entry,) = g.cache.values()
    forward_ops = [n.op.name for n in entry.split.forward.graph.nodes]
    assert "_check_values" in forward_ops
    assert "_check_values" not in [n.op.name for n in entry.split.backward.graph.nodes]
    state = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    for _ in range(2):
        with pytest.raises(IndexError, match=r"^Target 9 is out of bounds\.$"):
            g(x, bad)
    assert all(np.array_equal(state[k], v.numpy()) for k, v in model.state_dict().items())
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(model[1].running_var.numpy(), twin[1].running_var.numpy(), rtol=1e-6)

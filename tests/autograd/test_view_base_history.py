"""Views whose base gains a history through an in-place op after they were made (``b = zeros(3);
v = b[1]; b.copy_(x)``): as torch, they require grad from then on and read their values from the
base's new history; views that torch never rebases (a detached tensor, the outputs of ``split``)
stay apart or raise torch's error. torch is the oracle throughout."""

import numpy as np
import pytest
import torch

import jitorch as jt


def grad_fn_name(t):
    return None if t.grad_fn is None else t.grad_fn.name()


def state(tensors):
    """What a program's tensors say about their history: requires_grad, grad_fn's name (for a view,
    AsStridedBackward0 once regenerated from its base; for a base written through a view, torch's
    CopySlices), version."""
    return [(t.requires_grad, grad_fn_name(t), t._version) for t in tensors]


def run(program):
    """``program(T, x) -> (loss, views)`` on torch and on jitorch: both views' states after the
    program and x's gradients through the loss."""
    found = []
    for T in (torch, jt):
        x = T.tensor([1.0, -2.0, 3.0], requires_grad=True)
        loss, views = program(T, x)
        seen = state(views)
        loss.backward()
        found.append((seen, x.grad.numpy().copy()))
    (want, want_grad), (got, got_grad) = found
    assert got == want
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-6)


def base_copied_after_views(T, x):
    b = T.zeros(3)
    v, w, u = b[1], b.t(), b.view(3)[1:]
    b.copy_(x)
    return v * 2 + b.sum() + u.sum() * 3 + w[0] * 5, (v, w, u, b)


def base_written_through_another_view(T, x):
    b = T.zeros(3)
    v = b[0]
    b[1:2].copy_(x[:1])
    return v * 2 + b.sum() * 3, (v, b)


def base_written_twice(T, x):
    b = T.zeros(3)
    v = b[1:]
    b.add_(x)
    b.mul_(x)
    return (v * v).sum() + b.sum(), (v, b)


def view_of_a_view_of_the_base(T, x):
    b = T.zeros(2, 3)
    v = b[1]
    w = v[1:]
    b[1].copy_(x)
    return (w * 4).sum(), (v, w, b)


def view_read_by_the_write(T, x):
    b = T.ones(3)
    v = b[:1]
    b.add_(v.expand(3) + x)  # the view is read as it was before the write, with no history then
    return (v * b).sum(), (v, b)


@pytest.mark.parametrize("program", [base_copied_after_views, base_written_through_another_view, base_written_twice,
                                     view_of_a_view_of_the_base, view_read_by_the_write],
                         ids=lambda p: p.__name__)
def test_view_of_base_without_history_requires_grad_after_inplace_on_base(program):
    run(program)


def test_seed_3000247_view_of_copied_result_differentiates_as_torch():
    def program(T, x):
        c1 = T.tensor([2], dtype=T.int64)
        v0 = T.atan2(c1, c1)
        v2 = v0[-1]
        v0.copy_(x[:1])
        return v2 * 3 + v0.sum(), (v0, v2)
    run(program)


def test_seed_3001695_empty_view_of_buffer_requires_grad_after_index_assignment():
    for T in (torch, jt):
        t0 = T.zeros(1, 4)
        x0 = T.tensor(2.0, requires_grad=True)
        v0 = t0[:-1, :]
        v0[:, 3] = x0
        assert (v0.requires_grad, t0.requires_grad, t0._version, v0.shape[0]) == (True, True, 1, 0)
        assert grad_fn_name(v0) == "AsStridedBackward0"


def test_inplace_on_view_gives_the_base_history():
    for T in (torch, jt):
        x = T.tensor([5.0], requires_grad=True)
        b = T.zeros(3)
        b[1:2].copy_(x)
        assert (b.requires_grad, b.is_leaf, b._version) == (True, False, 1)
        (b * T.tensor([1.0, 2.0, 3.0])).sum().backward()
        assert x.grad.tolist() == [2.0]


def test_detached_tensor_gains_no_history_from_inplace_on_its_source():
    for T in (torch, jt):
        b = T.zeros(3)
        d = b.detach()
        w = d[1:]
        b.copy_(T.ones(3, requires_grad=True))
        assert (d.requires_grad, w.requires_grad, d._base, d._version) == (False, False, None, 1)


def test_inplace_through_detached_tensor_gives_history_to_it_not_its_source():
    for T in (torch, jt):
        x = T.ones(3, requires_grad=True)
        b = T.zeros(3)
        d = b.detach()
        d[1:].copy_(x[1:])
        assert (b.requires_grad, d.requires_grad) == (False, True)
        leaf = T.ones(3, requires_grad=True)
        leaf.detach().copy_(x * 2)  # no write into a leaf that requires grad: its detached alias is written
        assert (leaf.grad_fn, leaf.detach().requires_grad) == (None, False)


def torch_error(program):
    with pytest.raises(RuntimeError) as e:
        program(torch)
    return str(e.value)


def split_output_written(T):
    x = T.ones(2, requires_grad=True)
    a, _ = (x * 1).split(1)
    a.mul_(2)


def split_output_of_plain_base_written_with_grad(T):
    a, _ = T.zeros(4).split([2, 2])
    a.mul_(T.ones(2, requires_grad=True))


def chunk_output_read_after_base_written(T):
    y = T.ones(4, requires_grad=True) * 1
    _, c = y.chunk(2)
    y.mul_(2)
    return c * 2


def unbind_output_of_plain_base_read_after_base_written(T):
    b = T.zeros(2, 2)
    a, _ = b.unbind(0)
    b.mul_(T.ones(2, 2, requires_grad=True))
    assert a.requires_grad
    return a * 2


def view_of_split_output_written(T):
    x = T.ones(4, requires_grad=True)
    a, _ = (x * 1).split(2)
    a[0].mul_(2)


def view_of_split_output_of_plain_base_read_after_base_written(T):
    b = T.zeros(4)
    a, _ = b.split(2)
    w = a[:1]
    b.mul_(T.ones(4, requires_grad=True))
    return w * 2


@pytest.mark.parametrize("program", [split_output_written, split_output_of_plain_base_written_with_grad,
                                     chunk_output_read_after_base_written,
                                     unbind_output_of_plain_base_read_after_base_written,
                                     view_of_split_output_written,
                                     view_of_split_output_of_plain_base_read_after_base_written],
                         ids=lambda p: p.__name__)
def test_multi_output_view_rebased_by_a_write_raises_torchs_error(program):
    with pytest.raises(RuntimeError) as e:
        program(jt)
    assert str(e.value) == torch_error(program)


def test_multi_output_view_written_without_grad_is_allowed():
    for T in (torch, jt):
        a, _ = T.zeros(4).split(2)
        a.mul_(2)
        y = T.ones(4, requires_grad=True) * 1
        c, _ = y.split(2)
        with T.no_grad():
            c.mul_(3)
        assert y.tolist() == [3.0, 3.0, 1.0, 1.0]


def test_split_and_chunk_nodes_have_torchs_names():
    for T in (torch, jt):
        x = T.ones(4, requires_grad=True)
        names = [x.split(2)[0].grad_fn.name(), x.split([1, 3])[0].grad_fn.name(), x.chunk(2)[0].grad_fn.name()]
        assert names == ["SplitBackward0", "SplitWithSizesBackward0", "SplitBackward0"]


def test_many_short_lived_views_of_a_base_are_not_all_kept():
    b = jt.zeros(8)
    keep = [b[i] for i in range(3)]
    for i in range(1000):
        b[i % 8]
    assert len(b._views) < 200
    b.copy_(jt.ones(8, requires_grad=True))
    assert all(v.requires_grad for v in keep)


def _view_then_as_strided_(T, leaf, column):
    """``v = x[:, column]``, then ``x.as_strided_`` to a geometry that leaves out some of ``v``'s elements."""
    x = leaf.clone()
    v = x[:, column:column + 1]
    x.as_strided_([3], [2], storage_offset=0)
    return (v * T.arange(1.0, 6.0, dtype=T.float64).reshape(5, 1)).sum()


@pytest.mark.parametrize("column", [0, 1])
def test_view_taken_before_as_strided_differentiates_what_it_reads_seed_7860971(column):
    """Fuzz seed 7860971: ``v0 = x1[:, 1:2]; x1.as_strided_([3], [2], ...)`` then a backward through ``v0``. The
    view's values are the elements it was made of, and jitorch's gradient is their finite differences. torch
    bumps the version on ``as_strided_`` and regenerates the view's history as an ``as_strided`` of the base in
    its new geometry, which holds storage positions 0, 2 and 4 only: the gradient of every other element the
    view reads is lost (all of it for column 1). docs/differences-from-torch.md; the fuzzer runs no gradient
    against torch's through ``as_strided_``."""
    values = np.arange(10.0).reshape(5, 2)
    grads = []
    for T in (torch, jt):
        leaf = T.tensor(values, requires_grad=True)
        _view_then_as_strided_(T, leaf, column).backward()
        grads.append(leaf.grad.numpy())
    eps, numeric = 1e-6, np.zeros(10)
    for i in range(10):
        step = np.zeros(10)
        step[i] = eps
        at = [_view_then_as_strided_(jt, jt.tensor(values + s.reshape(5, 2)), column).item() for s in (step, -step)]
        numeric[i] = (at[0] - at[1]) / (2 * eps)
    np.testing.assert_allclose(grads[1].ravel(), numeric, atol=1e-6)
    assert numeric.reshape(5, 2)[3:, column].all() and not grads[0][3:].any()

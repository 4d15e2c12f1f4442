"""The recompute pass's copies into reductions (`jitorch.ir.passes.recompute`, ``REDUCTIONS``): a reduction
that reads a permutation of a pointwise value computes the value again in its own kernel, from the leaves the
value is computed from, instead of reading it where another kernel wrote it; small values (a batch norm's
per-channel ``rsqrt(var + eps)``) are leaves that a recomputed cone reads rather than computes again."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ir.passes import recompute
from jitorch.jit.executor import KernelStep


def compiled(fn, *args):
    """The executable of ``fn``'s compiled graph for ``args``."""
    return jt.compile(fn).lower(*args).executable


def kernels(fn, *args):
    return [st.kernel.source for st in compiled(fn, *args).steps if type(st) is KernelStep]


def reduction_groups(fn, *args):
    """{reduction op name: the op names of its group, in order} of ``fn``'s compiled graph."""
    return {g.reduction.op.name: [n.op.name for n in g.nodes] for g in compiled(fn, *args).groups
            if g.kind == "reduction"}


def without_copies_into_reductions(monkeypatch):
    monkeypatch.setattr(recompute, "REDUCTIONS", False)


def gen(seed):
    return jt.Generator().manual_seed(seed)


def products(seed=0):
    g = gen(seed)
    return jt.randn(32, 8, generator=g), jt.randn(8, 16, generator=g)


def permuted_sum_and_max(a, b):
    """A pointwise value of a product, summed and maxed over a permutation of it."""
    m = (a @ b).reshape(8, 4, 16)
    v = (m - 1.5) * m
    return v.permute(2, 0, 1).sum((1, 2)), v.permute(2, 0, 1).amax((1, 2))


def test_reductions_over_a_permuted_value_compute_it_themselves(monkeypatch):
    # the value's cone, permuted, is each reduction's prologue; the two share a group (`fusion.same_reduction`, session
    # 48: before, a group each)
    (group,) = reduction_groups(permuted_sum_and_max, *products()).values()
    assert group[2:5] == ["sub", "mul", "sum"] and group[-3:] == ["sub", "mul", "amax"]
    made = kernels(permuted_sum_and_max, *products())
    assert [k.kind for k in made] == ["reduction"] and len(made[0].outputs) == 2
    without_copies_into_reductions(monkeypatch)
    made = kernels(permuted_sum_and_max, *products())
    # a pointwise kernel wrote the value for both reductions to read
    assert sorted(k.kind for k in made) == ["pointwise", "reduction"]
    assert [len(k.outputs) for k in made if k.kind == "pointwise"] == [1]


def test_copies_into_reductions_keep_max_bits_and_sums_close(monkeypatch):
    """A max is exact in any order: the same bits. A sum's kernel may reassociate (the vectoriser's lanes
    follow its loop body, which the prologue changes): within rounding of the sum without the copies."""
    new = jt.compile(permuted_sum_and_max)(*products(3))
    without_copies_into_reductions(monkeypatch)
    old = jt.compile(permuted_sum_and_max)(*products(3))
    assert jt.equal(new[1], old[1])
    np.testing.assert_allclose(new[0].numpy(), old[0].numpy(), rtol=1e-6, atol=1e-6)
    a, b = (torch.from_numpy(t.numpy()) for t in products(3))
    m = (a @ b).reshape(8, 4, 16)
    v = ((m - 1.5) * m).permute(2, 0, 1)
    np.testing.assert_allclose(new[0].numpy(), v.sum((1, 2)).numpy(), rtol=1e-5, atol=1e-5)
    assert np.array_equal(new[1].numpy(), v.amax((1, 2)).numpy())


def three_leaves(a, b):
    m = (a @ b).reshape(8, 4, 16)
    v = m * (a @ b + 1).reshape(8, 4, 16) + (a @ b * 2).reshape(8, 4, 16)
    return v.permute(2, 0, 1).sum((1, 2))


def transposed_leaf(a, b):
    m = (a @ b).reshape(8, 4, 16)
    t = (a @ b * 3).reshape(4, 8, 16).transpose(0, 1)  # (8, 4, 16) read 16 and 128 apart: another order
    return (m * t).permute(2, 0, 1).sum((1, 2))


def read_by_a_product(a, b):
    m = (a @ b).reshape(8, 4, 16)
    v = m * m
    return v.permute(2, 0, 1).sum((1, 2)), v.reshape(32, 16) @ b.t()


def returned(a, b):
    m = (a @ b).reshape(8, 4, 16)
    v = m * m
    return v.permute(2, 0, 1).sum((1, 2)), v


def over_another_shape(a, b):
    m = (a @ b).reshape(8, 4, 16)
    s = (a @ b).reshape(8, 4, 16)[:, :1].exp()  # (8, 1, 16): computed in the cone, an eighth of the value or more
    return (m * s).permute(2, 0, 1).sum((1, 2))


@pytest.mark.parametrize("fn", [three_leaves, transposed_leaf, read_by_a_product, returned, over_another_shape],
                         ids=lambda f: f.__name__)
def test_refused_cones_leave_the_reduction_reading_the_value(monkeypatch, fn):
    """Refusals: leaves of more than twice the value's bytes; a leaf of the value's size in another memory
    order; a value an external node reads or the graph returns (in memory anyway); a cone node over another
    shape than the value's, which a permuted copy cannot compute."""
    assert "mul" not in reduction_groups(fn, *products())["sum"]
    new = jt.compile(fn)(*products(1))
    without_copies_into_reductions(monkeypatch)
    old = jt.compile(fn)(*products(1))
    for x, y in zip(new if isinstance(new, tuple) else (new,), old if isinstance(old, tuple) else (old,)):
        assert jt.equal(x, y)


def batch_norm_step(x, w1, gamma, beta, w2, mean, var):
    """A convolution, training batch norm, leaky ReLU and a convolution; the gradients of every weight."""
    y = F.conv2d(F.leaky_relu(F.batch_norm(F.conv2d(x, w1, padding=1), mean, var, gamma, beta, training=True),
                              0.2), w2, padding=1)
    y.square().sum().backward()
    return w1.grad, gamma.grad, beta.grad, w2.grad


def batch_norm_args(lib, seed, dtype):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in ((4, 8, 8, 8), (16, 8, 3, 3), (16,), (16,), (4, 16, 3, 3))]
    tensors = [lib.tensor(a, dtype=getattr(lib, dtype)) for a in arrays]
    for t in tensors[1:]:
        t.requires_grad_(True)
    return tensors + [lib.zeros(16, dtype=getattr(lib, dtype)), lib.ones(16, dtype=getattr(lib, dtype))]


def full_size_writes(made):
    """How many values of the convolution's output size the kernels write."""
    return sum(1 for k in made for v in k.outputs if int(np.prod(v.type.shape)) == 4 * 16 * 8 * 8)


def test_batch_norm_statistics_and_backward_sums_read_no_written_products(monkeypatch):
    made = kernels(batch_norm_step, *batch_norm_args(jt, 0, "float32"))
    # the forward's activation and the backward's input gradient: (x - mean)^2 for the variance and the four
    # products the backward sums (and the forward's normalised input and mask they read) are computed where
    # they are summed
    assert full_size_writes(made) == 2
    stats = [k for k in made if k.kind == "reduction" and "sub" in k.ops]
    # the variance's and the backward's four sums compute their prologue; the four share one kernel (session 48)
    assert [k.ops.count("sum") for k in stats] == [1, 4]
    moved = sum(v.type.dtype.itemsize * int(np.prod(v.type.shape)) for k in made for v in k.inputs + k.outputs)
    without_copies_into_reductions(monkeypatch)
    before = kernels(batch_norm_step, *batch_norm_args(jt, 0, "float32"))
    assert full_size_writes(before) == 8  # (x - mean)^2; 5 for the sums; the activation; the input gradient
    assert max(len(k.outputs) for k in before) == 5
    assert moved < sum(v.type.dtype.itemsize * int(np.prod(v.type.shape))
                       for k in before for v in k.inputs + k.outputs)


def test_batch_norm_step_gradients_match_torch_in_float64():
    """torch (CPU) is the oracle: the compiled step's gradients in float64, seed 2."""
    got = jt.compile(batch_norm_step)(*batch_norm_args(jt, 2, "float64"))
    want = torch_batch_norm_step(*batch_norm_args(torch, 2, "float64"))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-10)


def torch_batch_norm_step(x, w1, gamma, beta, w2, mean, var):
    tf = torch.nn.functional
    y = tf.conv2d(tf.leaky_relu(tf.batch_norm(tf.conv2d(x, w1, padding=1), mean, var, gamma, beta, training=True),
                                0.2), w2, padding=1)
    y.square().sum().backward()
    return w1.grad, gamma.grad, beta.grad, w2.grad


def test_batch_norm_step_with_copies_is_close_to_without_in_float32(monkeypatch):
    new = jt.compile(batch_norm_step)(*batch_norm_args(jt, 4, "float32"))
    without_copies_into_reductions(monkeypatch)
    old = jt.compile(batch_norm_step)(*batch_norm_args(jt, 4, "float32"))
    eager = batch_norm_step(*batch_norm_args(jt, 4, "float32"))
    for a, b, c in zip(new, old, eager):
        scale = np.abs(c.numpy()).max()
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6 * scale)
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-5, atol=1e-6 * scale)


def test_forward_kernel_writes_the_activation_alone(monkeypatch):
    """The backward's readers of the normalised input and of the leaky ReLU's mask compute them again from the
    convolution's output and the per-channel statistics, which are small leaves read through views (a view of
    the computed ``rsqrt(var + eps)`` had refused the cone): the forward's kernel writes one output of the
    activation's size; without the pass, four (three the backward reads)."""
    def forward_kernel(made):
        (k,) = [k for k in made if k.kind == "pointwise" and "gt" in k.ops and "sub" in k.ops and len(k.inputs) < 8]
        return k
    assert full_size_writes([forward_kernel(kernels(batch_norm_step, *batch_norm_args(jt, 0, "float32")))]) == 1
    monkeypatch.setattr(recompute, "MAX_CONE", 0)
    assert full_size_writes([forward_kernel(kernels(batch_norm_step, *batch_norm_args(jt, 0, "float32")))]) == 4


def leaf_permuted_over_size_one_dims(a, b):
    """A leaf whose view chain permutes dims of one element (a transposed convolution's col2im view): compact."""
    m = (a @ b).reshape(1, 8, 4, 4, 1, 1, 4).permute(1, 2, 3, 6, 0, 4, 5).reshape(8, 4, 4, 4)
    return ((m - 1.5) * m).permute(3, 0, 1, 2).sum((0, 2, 3))


def test_a_leaf_permuted_over_dims_of_one_element_is_compact():
    """Its strides had been unknown (a reshape of a permuted value), which refused the cone: the batch norms
    of the DCGAN generator's backward kept their kernel writing five products."""
    a, b = jt.randn(32, 8, generator=gen(5)), jt.randn(8, 16, generator=gen(6))
    assert reduction_groups(leaf_permuted_over_size_one_dims, a, b)["sum"][-3:] == ["sub", "mul", "sum"]
    m = (torch.from_numpy(a.numpy()) @ torch.from_numpy(b.numpy())).reshape(8, 4, 4, 4)
    want = ((m - 1.5) * m).permute(3, 0, 1, 2).sum((0, 2, 3))
    np.testing.assert_allclose(jt.compile(leaf_permuted_over_size_one_dims)(a, b).numpy(), want.numpy(),
                               rtol=1e-5, atol=1e-4)


def layer_norm_step(x, w1, gamma, beta, w2):
    """A product, a layer norm and a product (a GPT block's shape): the weights' gradients."""
    y = F.layer_norm(x @ w1, (32,), gamma, beta) @ w2
    y.square().sum().backward()
    return w1.grad, gamma.grad, beta.grad, w2.grad


def test_a_small_value_computed_without_a_view_stays_in_the_cone():
    """A layer norm's ``rstd`` (one per row) read directly, not through a view, is copied with the cone, as
    before: read as a leaf instead, the backward's products split from their sum's kernel into one more kernel
    writing three values of the activation's size (GPT-4x128's step moved 139 -> 153 MB)."""
    g = gen(7)
    args = [jt.randn(6, 10, 16, generator=g)] + [jt.randn(*s, generator=g, requires_grad=True)
                                                 for s in ((16, 32), (32,), (32,), (32, 8))]
    made = kernels(layer_norm_step, *args)
    assert not [k.ops for k in made if k.kind == "pointwise" and len(k.outputs) >= 3
                and all(tuple(v.type.shape) == (6, 10, 32) for v in k.outputs)]

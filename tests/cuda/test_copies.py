"""Writes and layout ops on CUDA tensors run on the device: writes into strided views (setitem, copy_, in-place
ops), cat and stack, repeat, roll and flip through the strided copy kernel or device copies, and the
matrix-product family through the tiled matmul; against the CPU, on the fake device running the kernels."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend
from tests import support
from tests.ops.samples import copy_layout
from tests.support import tensor_and_array


def on_device_and_host(fn, *tensors):
    """``fn`` on CUDA copies of ``tensors`` (same layouts) and on the tensors; the device never waits."""
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        moved = [copy_layout(t, "cuda") for t in tensors]
        fake.copies.clear()
        got = fn(*moved)
        assert not [c for c in fake.copies if c[0] == "dtoh" or (c[0] == "htod" and not c[2])]
        got = got.cpu()
    want = fn(*tensors)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def arrays(draw, min_dims=1):
    shape = draw(support.shapes(min_dims=min_dims, max_dims=3, min_side=1, max_side=6))
    dtype = draw(st.sampled_from([jt.float32, jt.int64, jt.float16, jt.bool]))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    t, _ = tensor_and_array(support.random_array(shape, dtype, rng), draw(st.sampled_from(support.LAYOUTS)))
    return t


@settings(max_examples=15)
@given(data=st.data())
def test_writes_into_strided_views_stay_on_the_device(data):
    x = arrays(data.draw, min_dims=2)
    value = data.draw(st.sampled_from([-1, 2.5, True]))

    def fn(t):
        t = t.clone()
        t[:, ::2] = value
        t.transpose(0, 1)[0] = t.transpose(0, 1)[-1] * 1  # a column, read in place and written in place
        if t.dtype is not jt.bool:
            t.transpose(0, 1)[1:].add_(1)
        return t
    on_device_and_host(fn, x)


@settings(max_examples=12)
@given(data=st.data(), op=st.sampled_from(["cat", "stack"]))
def test_cat_and_stack_write_each_input_into_its_slice(data, op):
    x = arrays(data.draw)
    dim = data.draw(st.integers(-x.ndim, x.ndim - 1))
    other = x.to(jt.float64) if data.draw(st.booleans()) else x  # promotion on the way
    on_device_and_host(lambda a, b: getattr(jt, op)([a, b, a], dim), x, other)


@settings(max_examples=12)
@given(data=st.data())
def test_repeat_roll_and_flip_are_strided_copies(data):
    x = arrays(data.draw)
    reps = data.draw(st.lists(st.integers(1, 3), min_size=x.ndim, max_size=x.ndim + 1))
    dims = data.draw(st.lists(st.integers(0, x.ndim - 1), max_size=x.ndim, unique=True))
    shifts = data.draw(st.lists(st.integers(-7, 7), min_size=len(dims), max_size=len(dims)))
    on_device_and_host(lambda t: t.repeat(*reps), x)
    on_device_and_host(lambda t: t.roll(shifts or 3, dims), x)
    on_device_and_host(lambda t: t.flip(dims), x)


@pytest.mark.parametrize("name, fn", [
    ("mv", lambda a, b, v: a.mv(v)), ("dot", lambda a, b, v: v.dot(v)), ("vdot", lambda a, b, v: jt.vdot(v, v)),
    ("addmm", lambda a, b, v: jt.addmm(v[:2], a.t(), b, beta=0.5, alpha=2)),
    ("addmm beta 0", lambda a, b, v: jt.addmm(a.t() @ b * float("nan"), a.t(), b, beta=0)),
    ("baddbmm", lambda a, b, v: jt.baddbmm(v[:2], a.t().expand(3, 4, 5), b.expand(3, 5, 2), alpha=-1))])
def test_the_matrix_product_family_uses_the_tiled_kernel(name, fn):
    rng = np.random.default_rng(0)
    a, b, v = (jt.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((5, 4), (5, 2), (4,)))
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        got = fn(a.cuda(), b.cuda(), v.cuda()).cpu()
        assert any(launch.ops == ["matmul"] for launch in fake.launches)
    np.testing.assert_allclose(got.numpy(), fn(a, b, v).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", ["transposed", "expanded", "strided", "offset"])
def test_copies_between_and_on_devices_keep_torchs_preserve_format_layout(fake, layout):
    """``.cuda()``, ``.cpu()``, ``.to(dtype)`` and ``clone()`` lay a copy out as torch does (dense strides in
    the source's order), on either device; ``clone(memory_format=contiguous_format)`` is compact."""
    x, values = tensor_and_array(np.arange(24.0, dtype=np.float32).reshape(2, 3, 4), layout)
    on_device = x.cuda()
    for cpu, cuda in ((x.clone(), on_device), (x.to(jt.float64), on_device.to(jt.float64)),
                      (x.clone(), on_device.clone()), (x.clone(), on_device.cpu())):
        assert cuda.stride() == cpu.stride()
        np.testing.assert_array_equal(cuda.cpu().numpy(), values)
    assert on_device.clone(memory_format=jt.contiguous_format).is_contiguous()


def test_like_factories_lay_out_an_expanded_input_alike_on_both_devices(fake):
    x = jt.ones(2, 3).t().expand(2, 3, 2)
    assert jt.zeros_like(x.cuda()).stride() == (6, 1, 3)  # torch's strides
    assert jt.zeros_like(x).stride() == (6, 1, 3)
    assert jt.empty_like(x.cuda(), device="cpu").stride() == (6, 1, 3)


@pytest.mark.parametrize("fn", [lambda t: t.tril(), lambda t: t.triu(1), lambda t: t[0].t().tril(-1),
                                lambda t: (t > 0).triu(-2),
                                lambda t: jt.as_strided_scatter(t, t[0, :2, :2] * 2, (2, 2), (4, 1), 1),
                                lambda t: jt.as_strided_scatter(t.transpose(0, 2), t[0, 0, :3], (3,), (2,), 0)],
                         ids=["tril", "triu", "tril_transposed", "triu_bool", "as_strided_scatter",
                              "as_strided_scatter_transposed"])
def test_triangles_and_strided_scatters_run_on_the_device(fn):
    on_device_and_host(fn, jt.tensor(np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)))


@settings(max_examples=12)
@given(data=st.data(), op=st.sampled_from(["var", "std"]), correction=st.sampled_from([None, 0, 1, 2]),
       keepdim=st.booleans())
def test_moments_match_the_cpu(data, op, correction, keepdim):
    x = arrays(data.draw).float()
    dim = data.draw(st.sampled_from([None, 0, -1, (0, -1)]))
    on_device_and_host(lambda t: getattr(t, op)(dim, correction=correction, keepdim=keepdim), x)


@settings(max_examples=12)
@given(data=st.data(), p=st.sampled_from(["fro", 2, 1, 3.5, 0, float("inf"), -float("inf")]), keepdim=st.booleans())
def test_vector_norms_match_the_cpu(data, p, keepdim):
    x = arrays(data.draw).float()
    dim = data.draw(st.sampled_from([None, 0, -1]))
    on_device_and_host(lambda t: t.norm(p, dim, keepdim=keepdim), x)


@settings(max_examples=12)
@given(data=st.data(), op=st.sampled_from(["logsumexp", "nanmean"]), keepdim=st.booleans(),
       special=st.sampled_from([0.0, float("nan"), float("inf"), -float("inf")]))
def test_logsumexp_and_nanmean_match_the_cpu(data, op, keepdim, special):
    x = arrays(data.draw).float().clone()
    x[(0,) * x.ndim] = special
    dim = data.draw(st.sampled_from([0, -1] if op == "logsumexp" else [None, 0, -1]))
    on_device_and_host(lambda t: getattr(t, op)(dim, keepdim=keepdim), x)


@pytest.mark.parametrize("equation, shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]), ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]), ("ijk,k->ij", [(2, 3, 4), (4,)]), ("ab,cd->ac", [(2, 3), (4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (4, 5)]), ("bij,jk->bik", [(1, 3, 4), (4, 5)]), ("ii->i", [(3, 3)])])
def test_einsum_is_a_permuted_matmul_on_the_device(equation, shapes):
    rng = np.random.default_rng(len(equation))
    tensors = [jt.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        got = jt.einsum(equation, *[t.cuda() for t in tensors]).cpu()
        if len(shapes) == 2:
            assert ["matmul"] in [launch.ops for launch in fake.launches]
    want = jt.einsum(equation, *tensors)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

"""gather, index_select, scatter_add and index_add on CUDA tensors: generated kernels that read their operands
in place, run on the fake device (the emulator runs their code), against the CPU; an index out of range is
reported at the next synchronisation with the CPU's message, and the device stays usable."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitorch as jt
from jitorch.runtime.cuda_backend import use_backend
from jitorch.runtime.cuda_fake import FakeBackend
from tests import support
from tests.ops.samples import copy_layout
from tests.support import tensor_and_array

DTYPES = (jt.float32, jt.float64, jt.int64, jt.int32)


def on_device(t):
    """A CUDA copy of ``t`` with its strides and offset."""
    return copy_layout(t, "cuda")


def case(draw, vector):
    """(x, dim, index) for an index op: x in a drawn layout, an index in range (1-D along dim if ``vector``)."""
    shape = draw(support.shapes(min_dims=1, max_dims=3, min_side=1, max_side=9))
    dim = draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    dtype = draw(st.sampled_from(DTYPES))
    x, _ = tensor_and_array(support.random_array(shape, dtype, rng), draw(st.sampled_from(support.LAYOUTS)))
    if vector:
        index = jt.tensor(rng.integers(0, shape[dim], draw(st.integers(1, 12))))
    else:
        index_shape = tuple(draw(st.integers(1, n)) if d != dim else draw(st.integers(1, 12))
                            for d, n in enumerate(shape))
        index, _ = tensor_and_array(rng.integers(0, shape[dim], index_shape),
                                    draw(st.sampled_from(["contiguous", "transposed"])))
    return x, dim, index.to(draw(st.sampled_from([jt.int64, jt.int32]))) if vector else index


def check(fn, *args):
    """``fn`` on the CPU arguments and on their CUDA copies: one launch of its own kernel, equal results."""
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        moved = [on_device(a) if isinstance(a, jt.Tensor) else a for a in args]
        fake.launches.clear()
        fake.copies.clear()
        got = fn(*moved)
        launched = [launch.ops for launch in fake.launches]
        # nothing through the host (the error word's first use queues one element up)
        assert all(kind == "dtod" or kind == "htod" and non_blocking and n == 8 for kind, n, non_blocking in fake.copies)
        result = got.cpu()
    want = fn(*args)
    assert launched[-1] == [fn.__name__] and result.dtype == want.dtype and result.shape == want.shape
    np.testing.assert_allclose(result.numpy(), want.numpy(), rtol=1e-6)


def gather(x, dim, index):
    return x.gather(dim, index)


def index_select(x, dim, index):
    return x.index_select(dim, index)


def scatter_add(x, dim, index, src):
    return x.scatter_add(dim, index, src)


def index_add(x, dim, index, source, alpha):
    return x.index_add(dim, index, source, alpha=alpha)


@settings(max_examples=15)
@given(data=st.data())
def test_gather_reads_any_layout(data):
    check(gather, *case(data.draw, vector=False))


@settings(max_examples=15)
@given(data=st.data())
def test_index_select_reads_any_layout(data):
    check(index_select, *case(data.draw, vector=True))


@settings(max_examples=15)
@given(data=st.data())
def test_scatter_add_adds_every_source_element_once(data):
    x, dim, index = case(data.draw, vector=False)
    src = jt.ones(index.shape, dtype=x.dtype) * 3
    check(scatter_add, x, dim, index, src)


@settings(max_examples=15)
@given(data=st.data(), alpha=st.sampled_from([1, 2, -3]))
def test_index_add_scales_and_adds_rows(data, alpha):
    x, dim, index = case(data.draw, vector=True)
    shape = list(x.shape)
    shape[dim] = index.shape[0]
    source = jt.arange(float(np.prod(shape))).reshape(shape).to(x.dtype)
    check(index_add, x, dim, index, source, alpha)


@pytest.mark.parametrize("op, make, message", [
    ("gather", lambda x: x.gather(1, jt.tensor([[0, 9]], device=x.device)),
     "index 9 is out of bounds for dimension 1 with size 4"),
    ("gather", lambda x: x.gather(0, jt.tensor([[-1]], device=x.device)),
     "index -1 is out of bounds for dimension 0 with size 3"),
    ("index_select", lambda x: x.index_select(0, jt.tensor([3], device=x.device)),
     "INDICES element is out of DATA bounds, id=3 axis_dim=3"),
    ("scatter_add", lambda x: x.scatter_add(1, jt.tensor([[4]], device=x.device), jt.ones(1, 1, device=x.device)),
     "index 4 is out of bounds for dimension 1 with size 4"),
    ("index_add", lambda x: x.index_add(0, jt.tensor([5], device=x.device), jt.ones(1, 4, device=x.device)),
     "index 5 is out of bounds for dimension 0 with size 3"),
])
def test_an_index_out_of_range_raises_the_cpu_message_at_the_next_synchronization(fake, op, make, message):
    x = jt.zeros(3, 4, device="cuda")
    with pytest.raises(RuntimeError, match=message):
        make(x.cpu())  # the CPU's message, at once
    result = make(x)  # queued: the kernel records the error
    assert fake.launches[-1].ops == [op]
    with pytest.raises(RuntimeError, match=message + r" \(found by a kernel on cuda:0; errors in CUDA kernels are "
                                                      r"reported at the next synchronization\)"):
        result.cpu()
    assert (x + 1).sum().item() == 12.0  # reported once; the device goes on working
    del result


def test_unsupported_cases_still_run_on_the_host(fake):
    x = jt.arange(12, dtype=jt.int16, device="cuda").reshape(3, 4)
    index = jt.tensor([[0, 1]], device="cuda")
    fake.launches.clear()
    assert x.scatter_add(1, index, jt.ones(1, 2, dtype=jt.int16, device="cuda")).tolist()[0][:2] == [1, 2]
    assert all(launch.ops != ["scatter_add"] for launch in fake.launches)  # no 16-bit atomic add: the host


def test_the_graph_evaluation_of_the_fake_device_agrees_with_the_kernels():
    rng = np.random.default_rng(7)
    x, index = jt.tensor(rng.standard_normal((4, 6))), jt.tensor(rng.integers(0, 6, (3, 5)))
    results = []
    for mode in ("ptx", "graph"):
        with use_backend(FakeBackend(emulate=mode)):
            xc, ic = x.cuda(), index.cuda()
            results.append([t.cpu().numpy() for t in (xc.gather(1, ic), xc.t().index_select(0, ic[0]),
                                                      xc.scatter_add(1, ic, xc[:3, :5]),
                                                      xc.index_add(1, ic[0], xc[:, :5], alpha=2))])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_the_graph_emulating_fake_device_reports_an_index_out_of_range():
    """Where the host has no thread barriers the fake device evaluates indexing kernels with NumPy: an index out
    of range must still reach the error word, or gather silently reads zeros there."""
    x = jt.arange(6.).reshape(2, 3)
    with use_backend(FakeBackend(emulate="graph")):
        got = x.cuda().gather(1, jt.tensor([[0, 2], [1, 3]]).cuda())
        with pytest.raises(RuntimeError, match="index 3 is out of bounds for dimension 1 with size 3"):
            got.cpu()
        # reported once; the device stays usable
        np.testing.assert_array_equal(got.cpu().numpy(), [[0., 2.], [4., 0.]])
        y = jt.zeros(3).cuda().index_add(0, jt.tensor([0, -1]).cuda(), jt.ones(2).cuda())
        with pytest.raises(RuntimeError, match="index -1 is out of bounds for dimension 0 with size 3"):
            y.cpu()
        assert x.cuda().index_select(0, jt.tensor([1]).cuda()).cpu().tolist() == [[3., 4., 5.]]


def test_synchronize_reports_a_kernel_error_on_the_fake_device(fake):
    x = jt.arange(6.).reshape(2, 3).cuda()
    x.gather(1, jt.tensor([[5]]).cuda())
    with pytest.raises(RuntimeError, match="index 5 is out of bounds"):
        jt.cuda.synchronize()
    jt.cuda.synchronize()  # cleared: the device is usable

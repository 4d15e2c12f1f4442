"""gather, index_select, scatter_add and index_add on CUDA tensors: generated kernels that read their operands
in place, run on the fake device (the emulator runs their code), against the CPU; an index out of range is
reported at the next synchronisation with the CPU's message, and the device stays usable."""

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
    """``fn`` on the CPU arguments and on their CUDA copies: one launch of its own kernel (for a result the CPU
    lays out in another order, a read's kernel then a copy into that order; hypothesis 6.100 draws a
    transposed one), equal results."""
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        moved = [on_device(a) if isinstance(a, jt.Tensor) else a for a in args]
        fake.launches.clear()
        fake.copies.clear()
        got = fn(*moved)
        launched = [launch.ops for launch in fake.launches]
        # nothing through the host (the error word's first use queues its two zeros up)
        assert all(kind == "dtod" or kind == "htod" and non_blocking and n == 16
                   for kind, n, non_blocking in fake.copies)
        result = got.cpu()
    want = fn(*args)
    if launched[-1] == ["copy"] and not want.is_contiguous():
        launched.pop()  # a read kernel writes a compact result, copied into the CPU's order after it
    assert launched[-1] in ([fn.__name__.replace("_value", ".value")], [fn.__name__ + "_accumulate"])
    assert result.dtype == want.dtype and result.shape == want.shape
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


def unique_index(draw, n, shape, dim):
    """An index of ``shape`` whose entries along ``dim`` never repeat (stores into one element twice leave
    which one lands undefined on a GPU), drawn from ``range(n)``."""
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    lines = np.moveaxis(np.zeros(shape, np.int64), dim, -1)
    for point in np.ndindex(lines.shape[:-1]):
        lines[point] = rng.permutation(n)[:lines.shape[-1]]
    return jt.tensor(np.moveaxis(lines, -1, dim).copy())


@settings(max_examples=12)
@given(data=st.data(), fill=st.booleans())
def test_scatter_stores_each_source_element_or_the_value(data, fill):
    x, dim, _ = case(data.draw, vector=False)
    shape = tuple(min(n, 3) for n in x.shape)
    index = unique_index(data.draw, x.shape[dim], shape[:dim] + (min(shape[dim], x.shape[dim]),) + shape[dim + 1:],
                         dim)
    if fill:
        check(scatter_value, x, dim, index, 5)
    else:
        # a source larger than the index: only its index-shaped corner is read
        check(scatter, x, dim, index, jt.arange(float(x.numel())).reshape(x.shape).to(x.dtype))


@settings(max_examples=12)
@given(data=st.data(), op=st.sampled_from(["index_copy", "index_fill", "index", "take", "put"]))
def test_vector_indexed_stores_and_reads(data, op):
    x, dim, _ = case(data.draw, vector=True)
    n = x.shape[dim]
    positions = unique_index(data.draw, n, (data.draw(st.integers(1, n)),), 0)
    wrapped = positions - n * data.draw(st.integers(0, 1))  # negative indices, where the op takes them
    if op == "index_copy":
        shape = list(x.shape)
        shape[dim] = positions.shape[0]
        check(index_copy, x, dim, positions, jt.arange(float(np.prod(shape))).reshape(shape).to(x.dtype))
    elif op == "index_fill":
        check(index_fill, x, dim, wrapped, -2)
    elif op == "index":
        check(index, x, dim, wrapped)
    else:
        flat = unique_index(data.draw, x.numel(), (min(x.numel(), 5),), 0) - x.numel() * data.draw(st.integers(0, 1))
        if op == "take":
            check(take, x, flat)
        else:
            check(put, x, flat, jt.arange(float(flat.numel())).to(x.dtype))


@pytest.mark.parametrize("value", [-2, "tensor"])
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_index_fill_writes_its_result_in_the_cpus_layout_in_place(layout, value):
    """index_fill's result is torch's clone in preserve_format (a transposed input's strides): the device copy
    the kernel fills is made in that layout, not compacted and copied into it after the kernel (found by a
    transposed example of test_vector_indexed_stores_and_reads: its last launch was that copy)."""
    x, _ = tensor_and_array(support.random_array((2, 3), jt.float32, np.random.default_rng(0)), layout)
    fill = jt.tensor(-2.0) if value == "tensor" else value
    check(index_fill, x, 1, jt.tensor([2, 0]), fill)
    with use_backend(FakeBackend(emulate="ptx")) as fake:
        moved = on_device(x)
        fake.launches.clear()
        got = moved.index_fill(1, jt.tensor([2, 0]).to("cuda"), fill)
        assert [launch.ops for launch in fake.launches] == [["copy"], ["index_fill"]]
        assert got.stride() == x.index_fill(1, jt.tensor([2, 0]), fill).stride()


def scatter(x, dim, index, src):
    return x.scatter(dim, index, src)


def scatter_value(x, dim, index, value):
    return x.scatter(dim, index, value)


def index_copy(x, dim, index, source):
    return x.index_copy(dim, index, source)


def index_fill(x, dim, index, value):
    return x.index_fill(dim, index, value)


def index(x, dim, at):
    return x[(slice(None),) * dim + (at,)]


def take(x, at):
    return x.take(at)


def put(x, at, source):
    return x.put(at, source)


@pytest.mark.parametrize("op, make, message", [
    ("gather", lambda x: x.gather(1, jt.tensor([[0, 9]], device=x.device)),
     "index 9 is out of bounds for dimension 1 with size 4"),
    ("gather", lambda x: x.gather(0, jt.tensor([[-1]], device=x.device)),
     "index -1 is out of bounds for dimension 0 with size 3"),
    ("index_select", lambda x: x.index_select(0, jt.tensor([3], device=x.device)), "index out of range in self"),
    ("index_select", lambda x: x.index_select(1, jt.tensor([4], device=x.device)),
     "INDICES element is out of DATA bounds, id=4 axis_dim=4"),
    ("scatter_add", lambda x: x.scatter_add(1, jt.tensor([[4]], device=x.device), jt.ones(1, 1, device=x.device)),
     "index 4 is out of bounds for dimension 1 with size 4"),
    ("index_add", lambda x: x.index_add(0, jt.tensor([5], device=x.device), jt.ones(1, 4, device=x.device)),
     "index 5 is out of bounds for dimension 0 with size 3"),
    ("index", lambda x: x[:, jt.tensor([-5], device=x.device)], "index -5 is out of bounds for dimension 0 with size 4"),
    ("index_copy", lambda x: x.index_copy(0, jt.tensor([3], device=x.device), jt.ones(1, 4, device=x.device)),
     "index_copy_\\(\\): index 3 is out of bounds for dimension 0 with size 3"),
    ("take", lambda x: x.take(jt.tensor([12], device=x.device)),
     r"out of range: tried to access index 12 on a tensor of 12 elements\."),
    ("scatter.value", lambda x: x.scatter(1, jt.tensor([[4]], device=x.device), 1.0),
     "index 4 is out of bounds for dimension 1 with size 4"),
    ("index_put", lambda x: x.index_put((None, jt.tensor([4], device=x.device)), jt.tensor(1.0, device=x.device)),
     "index 4 is out of bounds for dimension 0 with size 4"),
])
def test_an_index_out_of_range_raises_the_cpu_message_at_the_next_synchronization(fake, op, make, message):
    x = jt.zeros(3, 4, device="cuda")
    with pytest.raises((RuntimeError, IndexError), match=message):
        make(x.cpu())  # the CPU's message, at once
    result = make(x)  # queued: the kernel records the error
    assert fake.launches[-1].ops == [op]
    with pytest.raises(RuntimeError, match=message + r" \(found by a kernel on cuda:0; errors in CUDA kernels are "
                                                      r"reported at the next synchronization\)"):
        result.cpu()
    assert (x + 1).sum().item() == 12.0  # reported once; the device goes on working
    del result


@pytest.mark.parametrize("dtype", [jt.bfloat16, jt.float16])
@pytest.mark.parametrize("value", [0.5, 0.1, 1000.1, -65504.0])
def test_half_precision_fill_values_are_emitted_as_the_cpu_rounds_them(fake, dtype, value):
    """A Python number stored into a bfloat16 tensor by a kernel was printed as a float constant of the 16-bit
    integer type bfloat16 is carried in (an LLVM IR parsing error). Both are the CPU's conversion of the number."""
    x = jt.arange(4.0).to(dtype)
    index = jt.tensor([2, 1])
    for op, make in (("scatter.value", lambda x, i: jt.scatter(x, 0, i, value)),
                     ("index_fill", lambda x, i: x.index_fill(0, i, value))):
        got = make(x.to("cuda"), index.to("cuda"))
        assert fake.launches[-1].ops == [op]
        np.testing.assert_array_equal(support.to_numpy(got.cpu()), support.to_numpy(make(x, index)))


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
            positions = jt.tensor([5, -6, 2], device="cuda")  # no repeats: stores land the same way everywhere
            results.append([t.cpu().numpy() for t in (xc.gather(1, ic), xc.t().index_select(0, ic[0]),
                                                      xc.scatter_add(1, ic, xc[:3, :5]),
                                                      xc.index_add(1, ic[0], xc[:, :5], alpha=2),
                                                      xc[:, positions], xc.take(positions),
                                                      xc.index_fill(1, positions, 3.0),
                                                      xc.put(positions, xc[0, :3], accumulate=True),
                                                      xc.scatter(1, positions[0::2].expand(4, 2), 1.5))])
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


def test_lists_and_cpu_index_tensors_index_a_cuda_tensor_as_in_torch(fake):
    x = jt.arange(12.0).reshape(3, 4)
    c = x.cuda()
    assert c[:, [0, 2]].cpu().tolist() == x[:, [0, 2]].tolist()
    assert c[jt.tensor([2, -1])].cpu().tolist() == x[jt.tensor([2, -1])].tolist()
    c[[0, 1]] = 5.0
    x[[0, 1]] = 5.0
    assert c.cpu().tolist() == x.tolist()


@settings(max_examples=12)
@given(data=st.data(), accumulate=st.booleans())
def test_index_put_stores_or_adds_broadcast_values(data, accumulate):
    x, dim, _ = case(data.draw, vector=True)
    n = x.shape[dim]
    positions = unique_index(data.draw, n, (data.draw(st.integers(1, n)),), 0) - n * data.draw(st.integers(0, 1))
    if accumulate:
        positions = positions.repeat(2)  # repeated positions add up
    shape = list(x.shape)
    shape[dim] = positions.shape[0]
    values = jt.arange(float(np.prod(shape[dim:]))).reshape(shape[dim:]).to(x.dtype)  # broadcast over dims < dim

    def index_put(t, at, v):
        return t.index_put((None,) * dim + (at,), v, accumulate=accumulate)
    check(index_put, x, positions, values)


def test_the_graph_emulating_fake_device_refuses_kernels_it_cannot_evaluate():
    # a sort kernel read as an indexing kernel would give garbage: it must say it needs the emulator
    with use_backend(FakeBackend(emulate="graph")):
        with pytest.raises(RuntimeError, match="runs on the kernel emulator only"):
            jt.tensor([3.0, 1.0, 2.0]).cuda().sort()


@pytest.mark.parametrize("shape", [(1, 3), (3, 4), (2, 2, 2)])
def test_nonzero_is_laid_out_column_major_as_on_the_host_and_in_torch(fake, shape):
    """torch's nonzero gives its (count, ndim) indices strides (1, count); the device gave row-major ones."""
    import torch
    values = np.arange(np.prod(shape)).reshape(shape) % 3
    got = jt.tensor(values, device="cuda").nonzero()
    want = torch.tensor(values).nonzero()
    assert got.stride() == want.stride() == jt.tensor(values).nonzero().stride()
    np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())

"""CUDA results are laid out as CPU eager lays them out (torch's TensorIterator rules, the same on both devices):
a pointwise result in its operands' memory order, copies and ``_like`` factories in their input's, whether a
one-op kernel, a compiled graph's kernel or the host computes it. And the one place where torch's own rules
differ by device: ``x[i] = t`` with a 0-d tensor ``t`` fills on the CPU but copies from a CUDA ``t``."""

import types

import numpy as np
import pytest
import torch

import jitorch as jt
from jitorch.backends.cuda import dispatch
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend
from tests.ops.test_result_layouts import RESULTS
from tests.support import MEMORY_LAYOUTS, laid_out, tensor_geometry

VALUES = np.random.default_rng(0).uniform(0.1, 0.9, (3, 1, 2)).astype(np.float32)


def permuted(lib, device=None, values=VALUES):
    """``values`` transposed in memory: shape (2, 1, 3) with strides (1, 2, 2), at storage offset 1."""
    kwargs = {} if device is None else {"device": device}
    base = lib.cat([lib.zeros(1, dtype=getattr(lib, str(values.dtype))), lib.tensor(values.reshape(-1))])
    return base.to(**kwargs)[1:].view(values.shape).permute(2, 1, 0)


def assert_like_cpu(got, want, theirs):
    """``got`` (CUDA) has ``want``'s (jitorch CPU) values, strides and offset, and those are torch's."""
    assert got.device.type == "cuda"
    assert got.stride() == want.stride() == theirs.stride()
    assert got.storage_offset() == want.storage_offset() == theirs.storage_offset() == 0
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)
    np.testing.assert_allclose(want.numpy(), theirs.numpy(), rtol=1e-5)


def test_a_pointwise_result_of_a_permuted_input_is_written_in_its_order_by_the_kernel(fake):
    """Found by the fuzzer (seed 3000125): ``T.arccos(x1)`` of a permuted x1 had strides (3, 3, 1) on CUDA,
    (1, 2, 2) on the CPU and in torch."""
    x = permuted(jt, "cuda")
    fake.launches.clear()
    fake.copies.clear()
    out = jt.arccos(x)
    (launch,) = fake.launches
    assert launch.ops == ["as_strided", "arccos"] and launch.pointers[-1] == out.data_ptr()
    assert fake.copies == []  # written in place by the kernel: nothing relaid
    assert_like_cpu(out, jt.arccos(permuted(jt)), torch.arccos(permuted(torch)))


def test_operands_of_two_orders_lay_out_the_result_as_on_the_cpu(fake):
    ones = np.ones((2, 1, 3), np.float32)
    cases = [lambda lib, x, y: x + y, lambda lib, x, y: y + x, lambda lib, x, y: lib.where(y > 0, x, y)]
    for fn in cases:
        got = fn(jt, permuted(jt, "cuda"), jt.tensor(ones, device="cuda"))
        assert_like_cpu(got, fn(jt, permuted(jt), jt.tensor(ones)), fn(torch, permuted(torch), torch.tensor(ones)))


def test_copies_fills_and_like_factories_keep_the_input_order_on_cuda(fake):
    cases = [lambda lib, x: x.clone(), lambda lib, x: lib.fill(x, 2.0), lambda lib, x: lib.zeros_like(x),
             lambda lib, x: x.to(lib.float64), lambda lib, x: lib.full_like(x, 3.0)]
    for fn in cases:
        assert_like_cpu(fn(jt, permuted(jt, "cuda")), fn(jt, permuted(jt)), fn(torch, permuted(torch)))


def test_a_result_computed_on_the_host_goes_up_in_its_layout(fake):
    """int32 ``pow`` has no device kernel: the host computes it on operands in their own layouts, so the
    result comes back laid out as CPU eager's."""
    values = np.arange(1, 7, dtype=np.int32).reshape(3, 1, 2)
    x = permuted(jt, "cuda", values)
    fake.copies.clear()
    out = x ** x
    assert [kind for kind, *_ in fake.copies] == ["dtoh", "dtoh", "htod"]
    assert_like_cpu(out, permuted(jt, None, values) ** permuted(jt, None, values),
                    permuted(torch, None, values) ** permuted(torch, None, values))


def test_an_empty_argwhere_is_column_major_as_on_the_cpu(fake):
    got, want = jt.argwhere(jt.zeros(2, 3, device="cuda") > 0), jt.argwhere(jt.zeros(2, 3) > 0)
    assert got.shape == want.shape == (0, 2) and got.stride() == want.stride() == (1, 0)


def test_a_device_result_laid_out_otherwise_is_copied_into_the_layout(fake):
    base = jt.arange(7.0, device="cuda")
    t = base[1:].view(2, 3)
    out = dispatch.laid_out(t, (1, 2))
    assert out.stride() == (1, 2) and out.storage_offset() == 0 and out.data_ptr() != base.data_ptr()
    np.testing.assert_array_equal(out.cpu().numpy(), np.arange(1.0, 7.0).reshape(2, 3))
    same = base[:6].view(2, 3)
    assert dispatch.laid_out(same, None) is same


def test_a_compiled_cuda_call_writes_eager_layouts_in_its_kernels(fake):
    def fn(x):
        y = x.abs() + 1
        return y, y.sum(1), y.exp()
    x = permuted(jt, "cuda")
    compiled = jt.compile(fn)
    compiled(x)
    fake.launches.clear()
    got = compiled(x)
    # the input compacted, then one fused kernel (the row sum with its pointwise siblings, session 47) writes y and
    # exp(y) in eager's order: nothing relaid after
    assert [launch.ops for launch in fake.launches] == [["copy"], ["abs", "add", "sum", "exp"]]
    assert fake.launches[1].pointers[-3:] == [got[0].data_ptr(), got[1].data_ptr(), got[2].data_ptr()]
    for g, w, t in zip(got, fn(permuted(jt)), fn(permuted(torch))):
        assert_like_cpu(g, w, t)


def test_the_fake_devices_graph_mode_reads_and_writes_a_kernels_layouts():
    with use_backend(FakeBackend(emulate="graph")):
        assert_like_cpu(jt.arccos(permuted(jt, "cuda")), jt.arccos(permuted(jt)), torch.arccos(permuted(torch)))
        got = jt.compile(lambda x: (x * 2).exp())(permuted(jt, "cuda"))
        assert_like_cpu(got, (permuted(jt) * 2).exp(), (permuted(torch) * 2).exp())


def _fill_from_an_overlapping_0d_view(x):
    """Found by the fuzzer (seed 3001505): ``v0 = x0[-1]; x0[::1] = v0`` on a 1-element tensor."""
    x[::1] = x[-1]
    return x


def test_setitem_of_an_overlapping_0d_cuda_tensor_is_refused_as_torchs_copy_refuses_it(fake):
    """torch's ``copy_to`` fills from a 0-d CPU value but expands a 0-d CUDA one and copies it, and ``copy_``
    refuses a source that partly overlaps the written elements (strides (0,) against (1,)): on CUDA torch
    raises where the CPU's fill checks nothing."""
    assert _fill_from_an_overlapping_0d_view(torch.tensor([1.5])).tolist() == [1.5]
    assert _fill_from_an_overlapping_0d_view(jt.tensor([1.5])).tolist() == [1.5]
    message = "refer to a single memory location"
    x = torch.tensor([1.5])
    with pytest.raises(RuntimeError, match=message):  # the copy torch makes from a CUDA value, on the CPU
        x[::1].copy_(x[-1].expand(1))
    for fn in (_fill_from_an_overlapping_0d_view, jt.compile(_fill_from_an_overlapping_0d_view)):
        x = jt.tensor([1.5], device="cuda")
        with pytest.raises(RuntimeError, match=message):
            fn(x)
        assert x.cpu().tolist() == [1.5]
    x = jt.tensor([1.5, 2.5], device="cuda")
    x[::1] = jt.tensor(4.0)  # a 0-d CPU value fills on CUDA too
    assert x.cpu().tolist() == [4.0, 4.0]


ON_CUDA = types.SimpleNamespace(tensor=lambda values: jt.tensor(values, device="cuda"))  # for `laid_out`


@pytest.mark.parametrize("layout", MEMORY_LAYOUTS)
@pytest.mark.parametrize("name", sorted(RESULTS))
def test_every_layout_rule_lays_out_cuda_results_as_the_cpus(fake, name, layout):
    """The results of tests/ops/test_result_layouts.py (torch's strides on the CPU) on CUDA: each op's layout
    rule answers for every device (advanced indexing's answered for the CPU only, fuzz seed 2270059)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 3, 4)).astype(np.float32) for _ in range(2))
    got = RESULTS[name](jt, laid_out(ON_CUDA, layout, a), jt.tensor(b, device="cuda"))
    want = RESULTS[name](jt, laid_out(jt, layout, a), jt.tensor(b))
    assert got.device.type == "cuda" and tensor_geometry(got) == tensor_geometry(want)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)


def _index_of_a_permuted_cast(lib, x):
    """Fuzz seed 2270059: ``x0.to(T.int32)[:, [0, 1]]`` of a permuted x0 had strides (2, 1, 1) on CUDA, eagerly
    and compiled, (1, 4, 8) on the CPU and in torch."""
    return x.to(lib.int32)[:, [0, 1]]


def test_advanced_indexing_of_a_permuted_tensor_keeps_the_cpus_order_on_cuda(fake):
    values = np.arange(12, dtype=np.float32).reshape(1, 3, 4)  # permuted: shape (4, 3, 1), strides (1, 4, 12)
    theirs = _index_of_a_permuted_cast(torch, permuted(torch, values=values))
    want = _index_of_a_permuted_cast(jt, permuted(jt, values=values))
    assert theirs.stride() == want.stride() == (1, 4, 8)
    for fn in (_index_of_a_permuted_cast, jt.compile(_index_of_a_permuted_cast)):
        got = fn(jt, permuted(jt, "cuda", values))
        assert got.device.type == "cuda" and got.stride() == want.stride() and got.storage_offset() == 0
        np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())

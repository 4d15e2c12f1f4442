"""Eager ops, compiled graphs and autograd on CUDA tensors, on a fake device.

The fake device records every launch and emulates it with the CPU kernels, so
these tests check which kernel each op gets (its one-op graph's, the tiled
matmul, or none: the host), with which pointers, and that results, gradients
and compiled calls agree with the CPU. The PTX of the kernels made here is
assembled with ptxas.
"""

import numpy as np
import pytest

import jitorch as jt
from jitorch.backends.cuda import copies, generated, products
from jitorch.backends.cuda.fake import FakeBackend
from jitorch.runtime.cuda_backend import use_backend
from tests.cuda.test_ptx import assert_assembles


def test_a_pointwise_op_launches_its_one_op_kernel_on_the_operands(fake):
    x, y = jt.ones(3, 4, device="cuda"), jt.arange(4.0, device="cuda")
    fake.launches.clear()  # arange's own kernel
    out = x.add(y, alpha=2)
    (launch,) = fake.launches
    assert launch.ops == ["add"] and launch.grid == (1, 256)
    assert launch.pointers == [x.data_ptr(), y.data_ptr(), out.data_ptr()]
    np.testing.assert_array_equal(out.cpu().numpy(), 1 + 2 * np.arange(4.0) * np.ones((3, 1)))


def test_kernels_are_cached_per_shape_dtype_and_scalar(fake):
    x, y, d = jt.ones(5, device="cuda"), jt.zeros(5, device="cuda"), jt.ones(5, dtype=jt.float64, device="cuda")
    x * 2.0
    size = len(generated._KERNELS)
    x * 2.0
    y * 2.0
    assert len(generated._KERNELS) == size
    x * -0.0
    d * 2.0
    assert len(generated._KERNELS) == size + 2


def test_a_strided_operand_is_read_in_place_by_the_kernel(fake):
    base = jt.arange(12.0).reshape(3, 4).cuda()
    view = base[:, 1:].t()
    fake.copies.clear()
    out = view.exp()
    assert [launch.ops for launch in fake.launches[-1:]] == [["as_strided", "exp"]] and fake.copies == []
    assert fake.launches[-1].pointers[0] == base.data_ptr() + 4  # the view's first element
    np.testing.assert_allclose(out.cpu().numpy(), np.exp(np.arange(12.0).reshape(3, 4)[:, 1:].T), rtol=1e-6)


def test_reductions_and_softmax_get_block_kernels(fake):
    x = jt.tensor(np.random.default_rng(1).standard_normal((6, 50)).astype(np.float32), device="cuda")
    s, m = x.sum(-1), x.softmax(-1)
    assert [launch.ops for launch in fake.launches[-2:]] == [["sum"], ["softmax"]]
    host = x.cpu().numpy()
    np.testing.assert_allclose(s.cpu().numpy(), host.sum(-1), rtol=1e-5, atol=1e-5)
    e = np.exp(host - host.max(-1, keepdims=True))
    np.testing.assert_allclose(m.cpu().numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)


def test_a_large_full_reduction_combines_its_partial_results_on_the_device(fake):
    values = np.random.default_rng(2).standard_normal(1 << 18).astype(np.float32)
    x = jt.tensor(values, device="cuda")
    fake.launches.clear()
    fake.copies.clear()
    top = x.amax()
    assert [launch.grid for launch in fake.launches] == [(512, 256), (1, 256)] and fake.copies == []
    assert fake.launches[1].ops == ["amax"]
    assert top.item() == values.max()
    mean = x.half().mean()
    assert fake.launches[-1].ops == ["sum", "true_divide", "_to_copy"] and mean.dtype == jt.float16
    np.testing.assert_allclose(mean.item(), values.astype(np.float16).astype(np.float64).mean(), atol=1e-3)


SPLIT = [(name, dtype) for name in ("sum", "mean", "prod", "amax", "amin", "max", "min")
         for dtype in ("float32", "float16", "int32") if not (name == "mean" and dtype == "int32")]


@pytest.mark.parametrize("name, dtype", SPLIT)
def test_split_reductions_combine_their_parts_in_a_kernel_of_the_backend_as_torch(name, dtype):
    """The parts of a split full reduction are combined by a kernel the backend builds from a graph of its own
    (it used to call jitorch.compile from the eager path). The graph mode computes the kernels' values (the
    test above runs a combining kernel's code)."""
    import torch
    rng = np.random.default_rng(5)
    values = (rng.choice([-1, 1], 1 << 18) if name == "prod" else rng.integers(-50, 50, 1 << 18)).astype(dtype)
    with use_backend(FakeBackend(emulate="graph")) as fake:
        got = getattr(jt.tensor(values, device="cuda"), name)().cpu()
    assert fake.launches[-2].grid[0] > 1 and fake.launches[-1].name.startswith(f"jitorch_combine_{name}")
    want = getattr(torch.tensor(values), name)()
    assert str(got.dtype).removeprefix("jitorch.") == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-6)


def test_cuda_implementations_are_pieces_of_their_ops_and_only_transfers_and_factories_run_unplaced():
    from jitorch.backends.cuda import dispatch, factories, products
    from jitorch.ops.registry import OPS, Pieces
    assert OPS["mm"].pieces["cuda"] == dispatch.CudaKernel(products._matmul)
    unplaced = {name for name, kernel in Pieces("cuda").items() if not kernel.placed}
    assert unplaced == {"_to_copy", "copy", "clone"} | factories.FACTORIES


def test_matmul_uses_the_tiled_kernel_with_batch_broadcasting(fake):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    out = jt.tensor(a, device="cuda") @ jt.tensor(b, device="cuda")
    assert fake.launches[-1].name.startswith("jitorch_matmul_2x5x7_7x3") and out.shape == (2, 5, 3)
    np.testing.assert_allclose(out.cpu().numpy(), a @ b, rtol=1e-5, atol=1e-5)
    v = jt.tensor(b[:, 0], device="cuda")
    np.testing.assert_allclose((jt.tensor(a[0], device="cuda") @ v).cpu().numpy(), a[0] @ b[:, 0], rtol=1e-5)


def test_ops_without_a_kernel_run_on_the_host(fake):
    x = jt.tensor([[3.0, 1.0, 3.0]], device="cuda")
    fake.launches.clear()
    fake.copies.clear()
    distinct = x.unique(dim=1)  # unique slices: not made on the device (yet)
    assert [kind for kind, _, _ in fake.copies] == ["dtoh", "htod", "htod", "htod"]  # values, inverse, counts
    assert fake.launches == [] and distinct.device.type == "cuda" and distinct.tolist() == [[1.0, 3.0]]
    d = jt.ones(2, 2, dtype=jt.float64, device="cuda") @ jt.ones(2, 2, dtype=jt.float64, device="cuda")
    assert d.tolist() == [[2.0, 2.0]] * 2 and fake.launches == []  # float64 products: on the host
    assert x.nonzero().device.type == "cuda"


def test_the_eager_kernels_assemble_for_sm_80_and_sm_90(fake):
    """One-op kernels reading strided views, casts, block reductions and the matmul (the registry's
    contiguous one-op kernels are assembled by test_ptx)."""
    known = set(generated._KERNELS) | set(products._MATMULS) | set(copies._COPIES)
    x = jt.tensor(np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6), device="cuda")
    (x.t()[1:] * 3).tanh().sum(0).amax()
    x[:, ::2].to(jt.float16).to(jt.int32) // 2
    x.softmax(-1) @ x.t().contiguous()
    made = [entry[0] for key, entry in generated._KERNELS.items() if key not in known and entry is not None]
    made += [k for table in (products._MATMULS, copies._COPIES) for key, k in table.items() if key not in known]
    assert len(made) >= 8
    assert_assembles(made)


def test_autograd_on_cuda_tensors_matches_the_cpu(fake):
    rng = np.random.default_rng(4)
    x_np, w_np = rng.standard_normal((5, 3)), rng.standard_normal((3, 2))
    grads = []
    for device in ("cpu", "cuda"):
        x = jt.tensor(x_np, dtype=jt.float32, device=device)
        w = jt.tensor(w_np, dtype=jt.float32, device=device, requires_grad=True)
        loss = ((x @ w).tanh() * jt.arange(2.0, device=device)).softmax(-1).log().mean()
        loss.backward()
        assert w.grad.device.type == device
        grads.append(w.grad.cpu().numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


def test_in_place_ops_on_cuda_keep_their_gradients(fake):
    grads = []
    for device in ("cpu", "cuda"):
        x = jt.arange(4.0, device=device, requires_grad=True)
        y = x * 2
        y.add_(1).sin_()
        y[1:3].mul_(3)
        y.sum().backward()
        grads.append(x.grad.cpu().numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)
    np.testing.assert_allclose(grads[0], [1.0806, -5.9400, 1.7020, 1.5078], rtol=1e-4)  # torch's


def test_writing_into_a_saved_result_on_cuda_raises_as_torch(fake):
    """exp_ saves its result: a later write into it makes the gradient wrong, and torch refuses."""
    for device in ("cpu", "cuda"):
        x = jt.arange(4.0, device=device, requires_grad=True)
        y = x * 2
        y.add_(1).exp_()
        y[1:3].mul_(3)
        with pytest.raises(RuntimeError, match="output 0 of Exp, is at version 3; expected version 2"):
            y.sum().backward()


def test_tensor_of_a_cuda_tensor_copies_it_on_its_device(fake):
    c = jt.tensor([1.0, 2.0], device="cuda")
    with pytest.warns(UserWarning, match="To copy construct from a tensor"):
        copy = jt.tensor(c)
    assert copy.device == c.device and copy.data_ptr() != c.data_ptr() and copy.tolist() == [1.0, 2.0]


def test_gradients_cross_devices_through_to(fake):
    w = jt.ones(3, requires_grad=True)
    (w.cuda() * jt.arange(3.0, device="cuda")).sum().backward()
    assert w.grad.device.type == "cpu" and w.grad.tolist() == [0.0, 1.0, 2.0]


def test_compiled_graphs_on_cuda_inputs_run_their_kernels(fake):
    rng = np.random.default_rng(5)
    x_np, w_np = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)

    def fn(x, w):
        h = (x @ w).relu()
        return h.sum(0), (h * 3 + 1).exp().softmax(-1)

    compiled = jt.compile(fn)
    x, w = jt.tensor(x_np, device="cuda"), jt.tensor(w_np, device="cuda")
    fake.launches.clear()
    outs = compiled(x, w)
    # the fused groups of the CPU backend, each one launch (no eager op, no copy through the host); the sum
    # computes the relu again from the product (ir/passes/recompute.py: a reduction is a barrier), so no kernel
    # writes h; the column sum takes the pointwise cluster over its input as siblings (session 47), which computes
    # the relu once for both (fusion.merge_repeats: it computed it twice)
    assert [launch.ops for launch in fake.launches] == [["matmul"], ["relu", "sum", "mul", "add", "exp"],
                                                        ["softmax"]]
    for got, want in zip(outs, fn(jt.tensor(x_np), jt.tensor(w_np))):
        assert got.device.type == "cuda"
        np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_compiled_kernel_reads_a_strided_view_an_eager_step_made_in_row_major_order(fake):
    """Fuzz seed 1000856: writing into a strided input leaves the graph an eager ``as_strided`` step whose
    view (strides [8, 2]) the next kernel read as if compact, so ``pow`` saw other elements (2 ** -0.75
    where eager has 0 ** -0.75 = inf)."""
    def fn(x):
        x[1] = 3
        return (x[0] + x[1] - 3).pow(-0.75)  # [0, 2] ** -0.75

    base = jt.arange(16, dtype=jt.int16).reshape(4, 4)
    want = fn(base.clone()[::2, ::2])
    on_device = base.to("cuda")
    compiled = jt.compile(fn)
    got = compiled(on_device[::2, ::2])
    assert any(type(step).__name__ == "EagerStep" for step in compiled.lower(on_device[::2, ::2]).executable.steps)
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-6)
    assert on_device[2].cpu().tolist() == [3, 9, 3, 11]


def test_a_compiled_training_step_on_cuda(fake):
    w = jt.zeros(3, device="cuda", requires_grad=True)
    x, y = jt.ones(4, 3, device="cuda"), jt.full((4,), 2.0, device="cuda")

    @jt.compile
    def step(x, y):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        return loss

    assert step(x, y).item() == pytest.approx(4.0)
    assert w.grad.device.type == "cuda" and w.grad.tolist() == pytest.approx([-4.0] * 3)


FACTORIES = {"zeros": (lambda x: jt.zeros(300, 7, device=x.device), True),
             "ones_like": (lambda x: jt.ones_like(x), True),
             "new_full": (lambda x: x.new_full((5, 3), -2.5), True),
             "full_int": (lambda x: jt.full((9,), 7, device=x.device), True),
             "zeros_like_transposed": (lambda x: jt.zeros_like(x.t()), True),
             "empty_like_transposed": (lambda x: jt.empty_like(x.t()), False),
             "new_empty": (lambda x: x.new_empty(0), False)}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_constant_factories_fill_device_memory_without_host_arrays(fake, name):
    make, filled = FACTORIES[name]
    x = jt.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4), device="cuda")
    fake.copies.clear()
    t = make(x)
    # one element goes up (queued), device copies do the rest; empty needs neither
    assert all(kind == "dtod" or (kind, n, non_blocking) == ("htod", t.dtype.itemsize, True)
               for kind, n, non_blocking in fake.copies)
    assert filled or not fake.copies
    expected = make(x.cpu())
    assert (t.device.type, t.shape, t.stride(), t.dtype) == ("cuda", expected.shape, expected.stride(), expected.dtype)
    if filled:
        np.testing.assert_array_equal(t.cpu().numpy(), expected.numpy())


def test_factories_from_a_cuda_tensor_can_make_cpu_tensors(fake):
    x = jt.ones(3, 4, device="cuda")
    for t in (jt.zeros_like(x, device="cpu"), x.new_full((2,), 3.0, device="cpu"), jt.empty_like(x.t(), device="cpu")):
        assert t.device.type == "cpu"
    assert jt.zeros_like(x, device="cpu").tolist() == [[0.0] * 4] * 3
    assert jt.full((4,), 2.7, dtype=jt.int32, device="cuda").tolist() == [2] * 4


def test_a_tensor_made_on_cuda_inside_a_compiled_function_is_on_cuda_0(fake):
    """A factory's device="cuda" is cuda:0 in the trace as eagerly: writing a result into it with out= was
    refused ("Expected out tensor to have device cuda:0, but got cuda"; found by the fuzzer, seed 56)."""
    def f(x):
        buffer = jt.zeros(1, 4, 5, device="cuda")
        jt.dstack([x], out=buffer)
        return buffer, buffer.device
    x = jt.randn(1, 4, 5, device="cuda")
    out, device = jt.compile(f)(x)
    assert str(device) == "cuda:0" and out.device == x.device
    assert jt.equal(out.cpu(), x.cpu())

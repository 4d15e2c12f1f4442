"""A compiled function's results live where eager's do: a graph of CUDA tensors it makes itself runs on the
device, and one whose tensors span devices runs eagerly (its kernels are built for one device; a CPU kernel
given device memory would read it as host memory)."""

import pytest

import jitorch as jt


def test_compiled_function_without_inputs_making_cuda_tensors_returns_cuda_tensors(fake):
    w = jt.ones(8, device="cuda", requires_grad=True)
    f = jt.compile(lambda: (jt.ones(8, device="cuda") * w).sum())
    out = f()
    assert out.device == jt.device("cuda:0") and out.item() == 8.0
    out.backward()  # the backward's gradient was a CPU tensor, and mul refused it
    assert w.grad.device == jt.device("cuda:0") and w.grad.tolist() == [1.0] * 8
    assert jt.compile(lambda: jt.ones(3, device="cuda") * 2)().device == jt.device("cuda:0")


@pytest.mark.parametrize("move", ["cuda", "cpu"])
def test_compiled_function_moving_tensors_between_devices_runs_eagerly_with_eagers_devices(fake, move):
    x = jt.ones(4, device="cpu" if move == "cuda" else "cuda")
    f = jt.compile(lambda t: (t.to(move) * 2).sum())
    with pytest.warns(UserWarning, match="a compiled graph runs on one device"):
        out = f(x)
    assert out.device.type == move and out.item() == 8.0

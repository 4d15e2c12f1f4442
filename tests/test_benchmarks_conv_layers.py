"""benchmarks/conv_layers.py: its layers are benchmarks/models.py's convolutions, its columns compute what they
name (jitorch's layer equals torch's on them), and a --quick run prints a row per set."""

from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from tests.support import load_script

ROOT = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    return load_script(ROOT / "conv_layers.py", "conv_layers_benchmark")


def test_the_layers_are_the_models_convolutions(bench):
    models = load_script(ROOT / "models.py", "models_benchmark_for_conv_layers")
    g, d = models.dcgan_nets(jt, 100, 64, 64)
    convs = [m for m in (*g, *d) if isinstance(m, (jt.nn.Conv2d, jt.nn.ConvTranspose2d))]
    layers = bench.LAYERS["dcgan"]
    assert [tuple(m.weight.shape) for m in convs] == [layer[3] for layer in layers]
    assert [(m.stride[0], m.padding[0], isinstance(m, jt.nn.ConvTranspose2d)) for m in convs] == \
        [(layer[4], layer[5], layer[1]) for layer in layers]
    net = models.program("mnist", jt).Net()
    assert [tuple(net.conv1.weight.shape), tuple(net.conv2.weight.shape)] == [layer[3] for layer in bench.LAYERS["cnn"]]


def test_a_layers_calls_compute_torchs_convolution(bench):
    torch = pytest.importorskip("torch")
    name, transposed, xshape, wshape, stride, padding = bench.LAYERS["dcgan"][3]
    calls = bench.layer_calls(torch, transposed, xshape, wshape, stride, padding)
    np.testing.assert_allclose(calls["jt fwd"]().numpy(), calls["torch fwd"]().numpy(), rtol=1e-4, atol=1e-5)
    assert {"gemm", "blas", "col2im"} <= set(calls) and "windows" not in calls
    np.testing.assert_allclose(calls["gemm"]().numpy(), calls["blas"](), rtol=1e-4, atol=1e-4)


def test_a_quick_run_prints_a_row_per_set(bench, capsys):
    torch = pytest.importorskip("torch")
    threads = jt.get_num_threads(), torch.get_num_threads()
    try:
        bench.main(["--quick", "--layers", "cnn"])
    finally:  # (it runs both libraries at one thread)
        jt.set_num_threads(threads[0])
        torch.set_num_threads(threads[1])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["layer", "torch", "fwd"]
    (row,) = [line for line in out if line.startswith("cnn conv1")]
    *times, pad = row.split()[2:]
    assert all(float(v) > 0 for v in times if v != "-") and times.count("-") == 1  # (col2im)
    assert float(pad) == 0  # (no padding: every window tap reads the input)

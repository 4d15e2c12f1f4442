"""benchmarks/conv_layers.py --directions: its multiply-add count, its per-direction products and calls compute what
they name, and a quick run prints a row per direction."""

from pathlib import Path

import numpy as np
import pytest

import jitorch as jt
from tests.support import load_script

ROOT = Path(__file__).parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    return load_script(ROOT / "conv_layers.py", "conv_layers_benchmark54")


def test_layer_macs_count_the_im2col_products_multiply_adds(bench):
    # dcgan's second discriminator layer: 128 filters of 64 x 4 x 4 over 8 x 8 windows of 64 images
    assert bench.layer_macs(False, (64, 64, 16, 16), (128, 64, 4, 4), 2, 1) == 128 * 1024 * 4096
    # its second generator layer: each of 4 x 4 inputs of 64 images times 256 x (128 x 4 x 4) weights
    assert bench.layer_macs(True, (64, 256, 4, 4), (256, 128, 4, 4), 2, 1) == 256 * 2048 * 1024


@pytest.mark.parametrize("layer", [("dcgan", 2), ("dcgan", 5)])
def test_the_direction_products_have_the_layers_macs(bench, layer):
    name, *shape = bench.LAYERS[layer[0]][layer[1]]
    products = bench.direction_products(*shape, jt.Generator().manual_seed(0))
    assert set(products) == set(bench.DIRECTIONS)
    shapes = {}
    for d, (fn, expected) in products.items():
        got, want = fn().numpy(), expected()
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)
        shapes[d] = want.shape
    # (rows, columns) of the forward, (sum, columns) of the input gradient, (rows, sum) of the weight gradient
    (rows, cols), (inner, cols_dx), (rows_dw, inner_dw) = (shapes[d] for d in bench.DIRECTIONS)
    assert (cols_dx, rows_dw, inner_dw) == (cols, rows, inner)
    assert rows * inner * cols == bench.layer_macs(*shape)


def test_the_direction_calls_compute_torchs_gradients(bench):
    torch = pytest.importorskip("torch")
    name, *shape = bench.LAYERS["dcgan"][4]  # (the first discriminator layer: small)
    calls = bench.direction_calls(torch, *shape)
    for d in bench.DIRECTIONS:
        got, want = calls[d]["jc"](), calls[d]["torch"]()
        want = want if d == "fwd" else want[bench.DIRECTIONS.index(d) - 1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-3)


def test_a_quick_directions_run_prints_a_row_per_direction(bench, capsys):
    torch = pytest.importorskip("torch")
    threads = jt.get_num_threads(), torch.get_num_threads()
    try:
        bench.main(["--directions", "--quick", "--layers", "cnn"])
    finally:  # (it sets both libraries' thread counts)
        jt.set_num_threads(threads[0])
        torch.set_num_threads(threads[1])
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["layer", "dir", "thr", "torch", "jc"]
    assert [line.split()[2] for line in out[1:]] == list(bench.DIRECTIONS)

"""benchmarks/conv_layers.py's compiled column computes the gradients its eager column does."""

from pathlib import Path

import numpy as np
import pytest

from tests.support import load_script

ROOT = Path(__file__).parents[1] / "benchmarks"


@pytest.mark.parametrize("layer", [("cnn", 1), ("dcgan", 2), ("dcgan", 5)])
def test_the_compiled_column_gives_eager_gradients(layer):
    torch = pytest.importorskip("torch")
    bench = load_script(ROOT / "conv_layers.py", "conv_layers_benchmark49")
    name, *shape = bench.LAYERS[layer[0]][layer[1]]
    calls = bench.layer_calls(torch, *shape)
    x_grad, w_grad = calls["jc f+b"]()
    transposed, xshape, wshape, stride, padding = shape
    assert tuple(x_grad.shape) == xshape and tuple(w_grad.shape) == wshape
    import jitorch as jt
    g = jt.Generator().manual_seed(0)  # (layer_calls' inputs: the same generator's draws)
    x, w = jt.randn(*xshape, generator=g), jt.randn(*wshape, generator=g) * 0.1
    conv = jt.nn.functional.conv_transpose2d if transposed else jt.nn.functional.conv2d
    gy = jt.randn(*conv(x, w, stride=stride, padding=padding).shape, generator=g)
    x.requires_grad_(), w.requires_grad_()
    (conv(x, w, stride=stride, padding=padding) * gy).sum().backward()
    np.testing.assert_allclose(x_grad.numpy(), x.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w_grad.numpy(), w.grad.numpy(), rtol=1e-4, atol=1e-3)

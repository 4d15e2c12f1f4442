"""Session 49: an exported program of a channels-last network saves and loads (its graph's text names the
memory format, which the parser did not read back) and computes eager's values in eager's layout."""

import numpy as np

import jitorch as jt
from jitorch import nn


def test_an_exported_channels_last_convnet_loads_and_matches_eager(tmp_path):
    jt.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)).eval()
    model.to(memory_format=jt.channels_last)

    def fn(x):
        return model(x.contiguous(memory_format=jt.channels_last))

    x = jt.randn(2, 3, 6, 6)
    program = jt.export(fn, (x,))
    program.save(tmp_path / "convnet.jitorch")
    loaded = jt.load(tmp_path / "convnet.jitorch")
    want, got = fn(x), loaded(x)
    assert want.is_contiguous(memory_format=jt.channels_last)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)

"""benchmarks/conv_layers.py's padded share and benchmarks/step_profile.py's --torch-ops (session 50)."""

from pathlib import Path

import pytest

from tests.support import load_script

ROOT = Path(__file__).parents[1] / "benchmarks"


def _ones_count(torch, transposed, xshape, wshape, stride, padding):
    """(kept pairs, all pairs) of one channel's (window, tap) pairs, counted by torch: the convolution of ones by
    ones sums, at each output, the taps that read the input (transposed: the contributions the crop keeps)."""
    h, w = xshape[2:]
    kh, kw = wshape[2:]
    ones = torch.ones(1, 1, h, w, dtype=torch.float64)
    kernel = torch.ones(1, 1, kh, kw, dtype=torch.float64)
    if transposed:
        kept = torch.nn.functional.conv_transpose2d(ones, kernel, stride=stride, padding=padding).sum()
        return kept.item(), h * w * kh * kw
    out = torch.nn.functional.conv2d(ones, kernel, stride=stride, padding=padding)
    return out.sum().item(), out.numel() * kh * kw


@pytest.mark.parametrize("layer", [("cnn", 0), ("cnn", 1)] + [("dcgan", i) for i in range(8)])
def test_padded_share_counts_the_taps_on_padding_as_torch_convolving_ones(layer):
    torch = pytest.importorskip("torch")
    bench = load_script(ROOT / "conv_layers.py", "conv_layers_benchmark50")
    name, *shape = bench.LAYERS[layer[0]][layer[1]]
    kept, pairs = _ones_count(torch, *shape)
    assert bench.padded_share(*shape) == pytest.approx(1 - kept / pairs, abs=1e-12)


def test_padded_share_of_dcgans_discriminator_middle_layers():
    bench = load_script(ROOT / "conv_layers.py", "conv_layers_benchmark50")
    # 16x16 and 8x8 inputs, 4x4 taps at stride 2 and padding 1: 2 of 32 and 2 of 16 pairs per dim on the border
    assert bench.padded_share(False, (64, 64, 16, 16), (128, 64, 4, 4), 2, 1) == 1 - (30 / 32) ** 2
    assert bench.padded_share(False, (64, 128, 8, 8), (256, 128, 4, 4), 2, 1) == 1 - (14 / 16) ** 2
    assert bench.padded_share(True, (64, 256, 4, 4), (256, 128, 4, 4), 2, 1) == 1 - (14 / 16) ** 2
    assert bench.padded_share(False, (64, 8, 26, 26), (16, 8, 3, 3), 1, 0) == 0


def test_torch_ops_lists_torch_eagers_ops_by_self_time():
    pytest.importorskip("torch")
    bench = load_script(ROOT / "step_profile.py", "step_profile_benchmark50")
    total, ops = bench.torch_ops("cnn", quick=True, steps=1, top=5)
    assert len(ops) == 5 and 0 < sum(ms for _, ms, _ in ops) <= total + 1e-9
    assert [ms for _, ms, _ in ops] == sorted((ms for _, ms, _ in ops), reverse=True)
    assert any("conv" in op for op, _, _ in ops)


def test_torch_ops_prints_the_ops_under_the_steps_total(capsys):
    pytest.importorskip("torch")
    bench = load_script(ROOT / "step_profile.py", "step_profile_benchmark50")
    bench.main(["--models", "cnn", "--quick", "--steps", "1", "--torch-ops", "--top", "3"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("cnn, torch eager (1 thread, under torch.profiler): ") and len(out) == 4

"""benchmarks/step_profile.py --phases --torch at --quick sizes: torch's step timed in the same parts as
jitorch.compile(model)'s, and the BLAS matrix products of jitorch's compiled graphs."""

from pathlib import Path

import torch

from tests.support import load_script

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "step_profile.py"


def test_torch_phases_time_its_steps_parts_and_put_the_functions_back():
    bench = load_script(SCRIPT, "step_profile_benchmark")
    before = (torch.Tensor.backward, torch.nn.utils.clip_grad_norm_, torch.optim.Optimizer.zero_grad)
    total, by = bench.torch_phase_times("gpt-1x32", quick=True, steps=2, system="torch eager")
    assert (torch.Tensor.backward, torch.nn.utils.clip_grad_norm_, torch.optim.Optimizer.zero_grad) == before
    assert list(by) == ["compiled call", "backward", "clip_grad_norm_", "optimizer step", "zero_grad", "outside"]
    # (gpt's step: its model's call, backward, clipping, AdamW's step; zero_grad(set_to_none=True) is timed too)
    assert all(by[label] > 0 for label in ("compiled call", "backward", "clip_grad_norm_", "optimizer step"))
    assert sum(ms for label, ms in by.items() if label != "outside") <= total + 1e-9


def test_product_times_sum_the_blas_products_of_a_compiled_models_graphs():
    from jitorch.ops import linalg
    from jitorch.runtime import blas_calls
    bench = load_script(SCRIPT, "step_profile_benchmark")
    before, words = linalg._product, blas_calls.run_words
    total, products = bench.product_times("gpt-1x32", quick=True, steps=2)
    assert linalg._product is before and blas_calls.run_words is words
    # gpt-1x32's forward and backward products (its linear layers, the head's; attention's own kernels aside)
    assert 0 < products < total


def test_phases_against_torch_print_both_systems_parts_side_by_side(capsys, monkeypatch):
    bench = load_script(SCRIPT, "step_profile_benchmark")
    # (the table's layout is under test, not inductor, whose compile takes a minute: the model runs as it is)
    monkeypatch.setattr(torch, "compile", lambda model, *args, **kwargs: model)
    bench.main(["--models", "gpt-1x32", "--quick", "--steps", "1", "--phases", "--torch"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpt-1x32 (1 thread), thread CPU ms per step: jitorch.compile(model) ")
    assert "torch.compile(model) " in out[0]
    rows = {line[:22].strip(): line[22:].split() for line in out[1:]}
    # both systems' parts; the graphs' own parts and the accumulation are jitorch's alone
    assert all(len(rows[label]) == 2 and "-" not in rows[label] for label in
               ("compiled call", "backward", "clip_grad_norm_", "optimizer step"))
    # (torch's products are inductor's extern kernels, which the uncompiled model calls none of)
    assert rows["products"][0] != "-" and rows["products"][1] == "-"
    assert rows["forward graph"][1] == rows["accumulate .grad"][1] == "-"

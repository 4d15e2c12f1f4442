"""jitorch.amp.GradScaler (jitorch/amp/grad_scaler.py) against torch's on the same gradients, overflowing
and NaN ones included: the scale, the growth tracker, which steps are skipped and the parameters after
each step must be torch's exactly."""

import math

import numpy as np
import pytest
import torch

import jitorch as jt

BIG = 1e38  # times any scale past 4, an inf in float32


def coefficient_rows():
    """The gradient of each step (before scaling): finite ones, and ones that overflow once scaled, or NaN."""
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal(3).astype(np.float32) for _ in range(12)]
    rows[2][1] = BIG
    rows[3][0] = np.nan
    rows[7][2] = -BIG
    return rows


def train(module, rows, n_params=1, unscale_first=False, **options):
    """Steps of SGD on ``loss = sum(p * row)`` with a scaler; per step (scale, growth tracker, parameters)."""
    params = [module.nn.Parameter(module.ones(3)) for _ in range(n_params)]
    opt = module.optim.SGD(params, lr=0.1)
    scaler = module.amp.GradScaler("cpu", **options)
    history = []
    for row in rows:
        opt.zero_grad()
        loss = sum((p * module.tensor(row)).sum() for p in params)
        scaler.scale(loss).backward()
        if unscale_first:
            scaler.unscale_(opt)
            module.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), scaler._get_growth_tracker(),
                        [p.detach().numpy().copy() for p in params]))
    return history


def assert_same_history(got, want):
    for step, ((g_scale, g_tracker, g_params), (w_scale, w_tracker, w_params)) in enumerate(zip(got, want)):
        assert (g_scale, g_tracker) == (w_scale, w_tracker), f"step {step}"
        for g, w in zip(g_params, w_params):
            np.testing.assert_array_equal(g, w, err_msg=f"step {step}")


@pytest.mark.parametrize("options", [
    dict(init_scale=2.0 ** 4, growth_interval=2),
    dict(init_scale=1000.0, growth_factor=1.7, backoff_factor=0.3, growth_interval=1),  # rounded products
    dict(init_scale=3e38, growth_interval=1),  # growing would overflow: the scale stays
])
def test_scale_and_skipped_steps_match_torch(options):
    rows = coefficient_rows()
    got, want = train(jt, rows, **options), train(torch, rows, **options)
    assert_same_history(got, want)
    skipped = [i for i in range(1, len(rows)) if np.array_equal(want[i][2][0], want[i - 1][2][0])]
    assert skipped  # the overflowing and NaN steps changed nothing


def test_unscale_then_clip_then_step_matches_torch():
    rows = coefficient_rows()
    assert_same_history(train(jt, rows, unscale_first=True, growth_interval=3),
                        train(torch, rows, unscale_first=True, growth_interval=3))


def per_optimizer_history(module):
    """Two optimizers, one whose gradients overflow: it alone skips its step, and the scale backs off."""
    a, b = module.nn.Parameter(module.ones(2)), module.nn.Parameter(module.ones(2))
    opts = [module.optim.SGD([a], lr=0.5), module.optim.SGD([b], lr=0.5)]
    scaler = module.amp.GradScaler("cpu", init_scale=8.0, growth_interval=1)
    out = []
    for coefficient in (1.0, BIG, 1.0):
        for opt in opts:
            opt.zero_grad()
        loss = (a * module.tensor([1.0, 2.0])).sum() + (b * module.tensor([coefficient, 1.0])).sum()
        scaler.scale(loss).backward()
        for opt in opts:
            scaler.step(opt)
        scaler.update()
        out.append((scaler.get_scale(), a.detach().numpy().tolist(), b.detach().numpy().tolist()))
    return out


def test_found_inf_is_per_optimizer():
    assert per_optimizer_history(jt) == per_optimizer_history(torch)


def test_state_dict_round_trip():
    scaler = jt.amp.GradScaler("cpu", init_scale=2.0 ** 4, growth_interval=2)
    p = jt.nn.Parameter(jt.ones(1))
    opt = jt.optim.SGD([p], lr=0.1)
    for coefficient in (1.0, 1.0, 1.0):
        scaler.scale((p * coefficient).sum()).backward()
        scaler.step(opt)
        scaler.update()
    state = scaler.state_dict()
    assert state == {"scale": 32.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2,
                     "_growth_tracker": 1}
    fresh = jt.amp.GradScaler("cpu")
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    assert fresh.scale(jt.ones(1)).tolist() == [32.0]
    with pytest.raises(RuntimeError, match="The source state dict is empty"):
        fresh.load_state_dict({})


def test_a_disabled_scaler_passes_everything_through():
    scaler = jt.amp.GradScaler("cpu", enabled=False)
    p = jt.nn.Parameter(jt.ones(2))
    opt = jt.optim.SGD([p], lr=1.0)
    loss = (p * 3).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert p.tolist() == [-2.0, -2.0]
    assert (scaler.get_scale(), scaler.state_dict(), scaler.is_enabled()) == (1.0, {}, False)


@pytest.mark.skipif(jt.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_the_default_cuda_scaler_without_cuda_warns_and_is_disabled():
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling"):
        assert not jt.amp.GradScaler().is_enabled()
    with pytest.warns(FutureWarning, match=r"jitorch.cuda.amp.GradScaler\(args...\)` is deprecated"), \
            pytest.warns(UserWarning, match="CUDA is not available"):
        assert not jt.cuda.amp.GradScaler().is_enabled()


def test_on_cuda_tensors():
    with jt.cuda.emulated():
        scaler = jt.amp.GradScaler()
        p = jt.nn.Parameter(jt.ones(2, device="cuda"))
        opt = jt.optim.SGD([p], lr=1.0)
        scaler.scale((p * jt.tensor([1.0, math.inf], device="cuda")).sum()).backward()
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == 2.0 ** 15 and p.cpu().tolist() == [1.0, 1.0]


def test_misuse_raises_torchs_errors():
    with pytest.raises(AssertionError, match="The growth factor must be > 1.0."):
        jt.amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(AssertionError, match="The backoff factor must be < 1.0."):
        jt.amp.GradScaler("cpu", backoff_factor=1.0)
    scaler = jt.amp.GradScaler("cpu")
    p = jt.nn.Parameter(jt.ones(2))
    opt = jt.optim.SGD([p], lr=1.0)
    with pytest.raises(AssertionError, match="Attempted update but _scale is None"):
        scaler.update()
    scaler.scale(p.sum()).backward()
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called on this optimizer"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
        scaler.step(opt, closure=lambda: None)
    half = jt.nn.Parameter(jt.ones(2, dtype=jt.float16))
    half.grad = jt.ones(2, dtype=jt.float16)
    scaler.update()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
        scaler.unscale_(jt.optim.SGD([half], lr=1.0))


def test_scale_of_several_outputs_and_a_set_scale():
    scaler = jt.amp.GradScaler("cpu", init_scale=4.0)
    a, (b, c) = scaler.scale([jt.ones(1), (jt.ones(1), jt.full((1,), 2.0))])
    assert (a.tolist(), b.tolist(), c.tolist()) == ([4.0], [4.0], [8.0])
    with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
        scaler.scale(3)
    scaler.update(new_scale=0.5)
    assert scaler.get_scale() == 0.5
    scaler.update(jt.tensor(3.0))
    assert scaler.get_scale() == 3.0

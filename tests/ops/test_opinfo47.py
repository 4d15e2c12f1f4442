"""The OpInfo sweep (tests/ops/opinfo_sweep.py) on a fixed subset of the ops training scripts use most, in
float32 and float64 with every layout, gradient, compiled and error check the sweep makes; and the sweep's own
detection of each kind of defect (a wrong value, stride, gradient, compiled result, missing error), so that
a clean subset means the checks ran. ``python -m tests.ops.opinfo_sweep --all`` sweeps every op and dtype."""

from __future__ import annotations

import functools

import pytest
import torch

import jitorch
from tests.ops import opinfo_sweep as sweep

# (OpInfo names): pointwise math, reductions, indexing/scatter/gather, losses, pooling, conv, norms, linalg.
SUBSET = (
    "add", "sub", "mul", "div", "pow", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "abs", "neg", "clamp",
    "where", "maximum", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    "sum", "mean", "amax", "argmax", "var", "std", "prod", "logsumexp", "cumsum", "softmax", "log_softmax",
    "gather", "scatter", "scatter_add", "index_select", "index_add", "take_along_dim", "masked_fill", "index_put",
    "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.l1_loss", "nn.functional.smooth_l1_loss",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.conv2d", "nn.functional.conv1d", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.group_norm", "matmul", "mm", "bmm", "linalg.vector_norm", "linalg.solve", "linalg.inv",
    "nn.functional.linear",
)
DTYPES = (torch.float32, torch.float64)
# the first samples of each generator (sample_inputs, reference_inputs) per dtype: 20 keeps the suite under 10 minutes
# on 2 cores (40 took 91 s of CPU; the whole sweep, `python -m tests.ops.opinfo_sweep --all`, takes every one)
LIMIT = 20


@functools.cache
def _ops():
    """The subset's OpInfos that jitorch's callables serve in a float dtype (not a variant whose callable is a
    wrapper of torch's, such as batch_norm.without_cudnn, nor silu.complex)."""
    return {op.full_name: op for op in sweep.ops_named(SUBSET)
            if sweep.callables(op) and any(d in op.supported_dtypes("cpu") for d in DTYPES)}


# sorted(_ops()), written out: computing it at collection imported torch's OpInfo database (2.7 s of CPU) in
# every xdist worker, which each collect the whole suite, when one runs these tests;
# test_the_names_are_the_subsets_opinfos_jitorch_serves checks the list against _ops().
NAMES = (
    "abs", "add", "amax", "argmax", "bmm", "bmm.triton_optimized", "clamp", "cumsum", "div.floor_rounding",
    "div.no_rounding_mode", "div.trunc_rounding", "exp", "gather", "index_add", "index_put", "index_select",
    "linalg.inv", "linalg.solve", "linalg.vector_norm", "log", "log_softmax", "log_softmax.with_dtype", "logsumexp",
    "masked_fill", "matmul", "maximum", "mean", "mm", "mul", "neg", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.batch_norm", "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.cross_entropy", "nn.functional.gelu",
    "nn.functional.group_norm", "nn.functional.l1_loss", "nn.functional.layer_norm", "nn.functional.linear",
    "nn.functional.max_pool2d", "nn.functional.mse_loss", "nn.functional.nll_loss", "nn.functional.relu",
    "nn.functional.silu", "nn.functional.smooth_l1_loss", "pow", "prod", "rsqrt", "scatter", "scatter_add",
    "sigmoid", "softmax", "softmax.with_dtype", "sqrt", "std", "std.unbiased", "sub", "sum", "take_along_dim",
    "tanh", "var", "var.unbiased", "where",
)


def _one(name):
    return _ops().get(name) or sweep.ops_named([name])[0]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", NAMES)
def test_subset_matches_torch(name):
    """The first LIMIT samples and reference samples of the OpInfo, in float32 and float64 and each layout,
    agree with torch: values, dtypes, shapes, strides where documented, float64 gradients, compiled = eager
    (in each sample's first layout and in one other, in turn),
    errors; float32 results outside torch's tolerances only where jitorch is at least as close to torch's
    float64 result, or within the documented float tolerance."""
    run = sweep.Sweep(dtypes=DTYPES, limit=LIMIT, compiled_rotates=True)
    run.run_op(_one(name))
    counts, bad = run.summary()
    assert counts["pass"] > 0
    assert not bad, "\n".join(f"[{o.label}] {o.why}" for o in bad[:10])


def test_the_names_are_the_subsets_opinfos_jitorch_serves():
    """NAMES, the parametrisation above, is every OpInfo of SUBSET that _ops() selects (a torch upgrade or a
    callable jitorch gains changes it)."""
    assert NAMES == tuple(sorted(_ops()))


def _detected(name, ours, **options):
    run = sweep.Sweep(dtypes=(torch.float64,), reference=False, **options)
    run.run_op(_one(name), ours=ours)
    return [o.why for o in run.outcomes if o.kind == "mismatch"]


def test_sweep_detects_a_wrong_value():
    found = _detected("exp", lambda x, **k: jitorch.exp(x) * (1 + 1e-6))
    assert found and all(w.startswith("values differ") for w in found)


def test_sweep_detects_a_pointwise_result_laid_out_otherwise_than_torchs():
    """abs of a transposed input: torch's result is transposed too (TensorIterator's memory order)."""
    found = _detected("abs", lambda x, **k: jitorch.abs(x).contiguous(), grads=False)
    assert found and all(w.startswith("strides") for w in found)


def test_sweep_detects_a_wrong_gradient():
    """sin's values with the gradient of the identity."""
    found = _detected("sin", lambda x, **k: jitorch.sin(x).detach() + (x - x.detach()))
    assert found and all(w.startswith("gradient: input 0: values differ") for w in found)


def test_sweep_detects_a_compiled_result_unlike_eager(monkeypatch):
    def miscompile(fn):
        return lambda *args: jitorch.neg(fn(*args))
    monkeypatch.setattr(jitorch, "compile", miscompile)
    found = _detected("exp", None, grads=False)
    assert found and all(w.startswith("compiled: differs from eager") for w in found)


def test_sweep_detects_a_missing_error():
    """gather's error_inputs (an index out of range, too large...) raise in torch: a callable that never
    raises fails each (the out= of another dtype by not holding the result cast, as documented)."""
    run = sweep.Sweep(dtypes=())
    run.run_op(_one("gather"), ours=lambda *a, **k: jitorch.zeros(1))
    checked = [o for o in run.outcomes if o.kind != "skip"]
    assert checked and all(o.kind == "mismatch" for o in checked)
    assert sum(o.why.startswith("no error") for o in checked) >= 2


def test_sweep_detects_an_error_raised_after_writing_its_output():
    """index_add with an index of the wrong dtype, but the input changed before the error."""
    def writes_then_raises(x, *args, **kwargs):
        x.add_(1)
        return jitorch.index_add(x, *args, **kwargs)
    run = sweep.Sweep(dtypes=())
    run.run_op(_one("index_add"), ours=writes_then_raises)
    found = [o.why for o in run.outcomes if o.kind == "mismatch"]
    assert "raised after writing a tensor argument" in found

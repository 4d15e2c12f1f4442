"""Which path the eager overhead changes of session 46 take (issue 19), and what falls back: grad mode read from
the count of threads that turned it off (`runtime.grad_mode.GRAD_OFF`), a root's views remembered in a slot
(``Tensor._views``), ``_requires_grad`` a slot set by every constructor, layer norm's kernel called from its fast
path, and `autocasts`' ``first`` serving positional calls of ``nn.functional.layer_norm`` and ``linear`` before
the decorators' frames."""

import contextlib
import sys
import threading
import types

import numpy as np
import pytest
import torch

import jitorch as jt
import jitorch.nn.functional as F
from jitorch.ops import normalization
from jitorch.runtime import grad_mode


@contextlib.contextmanager
def functions_called(names):
    """Inside, the Python functions of ``names`` that run are appended to the yielded list."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name in names:
            seen.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def test_grad_off_counts_the_threads_with_grad_mode_off():
    assert grad_mode.GRAD_OFF[0] == 0 and jt.is_grad_enabled()
    with jt.no_grad():
        assert grad_mode.GRAD_OFF[0] == 1
        with jt.no_grad():  # (nested: the thread is counted once)
            assert grad_mode.GRAD_OFF[0] == 1
            with jt.enable_grad():
                assert grad_mode.GRAD_OFF[0] == 0 and jt.is_grad_enabled()
            assert grad_mode.GRAD_OFF[0] == 1
        with jt.inference_mode():
            assert grad_mode.GRAD_OFF[0] == 1
    assert grad_mode.GRAD_OFF[0] == 0
    jt.set_grad_enabled(False)
    try:
        assert grad_mode.GRAD_OFF[0] == 1
        jt.set_grad_enabled(False)
        assert grad_mode.GRAD_OFF[0] == 1
    finally:
        jt.set_grad_enabled(True)
    assert grad_mode.GRAD_OFF[0] == 0


def test_a_view_made_in_a_thread_with_grad_off_is_marked_while_another_is_not():
    """The count is over all threads: a view made while another thread has grad mode off still reads this
    thread's flag (on: no creation meta), and the other thread's view is marked as torch's no_grad views are."""
    base = jt.zeros(4)
    off, back, made = threading.Event(), threading.Event(), {}

    def worker():
        with jt.no_grad():
            made["other"] = base[1:]
            off.set()
            back.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert off.wait(10)
        assert grad_mode.GRAD_OFF[0] == 1
        mine = base[2:]
    finally:
        back.set()
        thread.join()
    assert grad_mode.GRAD_OFF[0] == 0
    assert "_creation_meta" not in mine.__dict__
    assert made["other"].__dict__["_creation_meta"] is not None
    w = jt.ones(4, requires_grad=True)
    base.mul_(w)  # gives the root a history: its views catch up (torch: the no_grad view's grad_fn raises)
    assert mine.requires_grad and made["other"].requires_grad
    mine.sum().backward()
    assert w.grad.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_a_root_remembers_its_views_in_its_slot_and_hands_them_over():
    root = jt.zeros(3)
    assert root._views is None and "_views" not in root.__dict__
    view = root[1:]
    assert len(root._views) == 1 and root._views[0]() is view and "_views" not in root.__dict__
    root.add_(jt.ones(3, requires_grad=True))
    assert root._views is None and view.requires_grad and view.grad_fn is not None
    # a view of a tensor that requires grad, or of an integer tensor, is not remembered
    assert jt.ones(2, requires_grad=True)[1:]._base._views is None
    ints = jt.arange(3)
    ints[1:]
    assert ints._views is None


def test_requires_grad_is_a_slot_every_constructor_sets():
    assert "_requires_grad" in jt.Tensor.__slots__
    assert isinstance(vars(jt.Tensor)["_requires_grad"], types.MemberDescriptorType)  # (no class default)
    x = jt.ones(2, 2)
    made = [x, x + x, x[0], x.view(4), jt.from_numpy(np.ones(2, np.float32)), x.clone(), jt.nn.Parameter(x)]
    assert [t._requires_grad for t in made] == [False] * 6 + [True]
    assert all("_requires_grad" not in t.__dict__ for t in made)
    y = jt.ones(2).requires_grad_()
    assert y._requires_grad and (y * 2)._requires_grad and not y.detach()._requires_grad


def _layer_norm_args(shape, normalized, weight=True, bias=True, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(normalized).astype(dtype) if weight else None
    b = rng.standard_normal(normalized).astype(dtype) if bias else None
    return x, w, b


def _old_layer_norm(x, normalized, w, b, eps):
    """The layer norm `_layer_norm_fast` computed before: `_layer_norm_cpu` on the arrays, errors silenced."""
    spec = normalization._FAST_SPECS[jt.float32 if x.dtype == np.float32 else jt.float64]
    with np.errstate(all="ignore"):
        return normalization._layer_norm_cpu(spec, x, normalized, w, b, eps, True)


@pytest.mark.parametrize("shape,normalized,weight,bias,dtype", [
    ((1, 1, 128), (128,), True, True, np.float32), ((1, 32, 128), (128,), True, True, np.float32),
    ((6, 128), (128,), False, False, np.float32), ((3, 4, 33, 65), (33, 65), True, False, np.float64),
    ((2, 128), [128], False, True, np.float64)])
def test_layer_norm_of_contiguous_tensors_runs_the_kernel_at_once_with_the_old_bits(shape, normalized, weight, bias,
                                                                                     dtype):
    x, w, b = _layer_norm_args(shape, tuple(normalized), weight, bias, dtype)
    args = [jt.from_numpy(a) if a is not None else None for a in (x, w, b)]
    with functions_called({"_layer_norm_cpu", "_by_kernel", "in_float32"}) as seen:
        got = F.layer_norm(args[0], normalized, args[1], args[2], 1e-5)
    assert seen == ["_by_kernel"]  # (autocasts' first served it: no in_float32 frame, no _layer_norm_cpu)
    want = _old_layer_norm(x, tuple(normalized), w, b, 1e-5)
    assert got.shape == tuple(shape) and got.is_contiguous()
    assert got.numpy().tobytes() == want.tobytes()
    np.testing.assert_allclose(got.numpy(), torch.nn.functional.layer_norm(
        torch.from_numpy(x), tuple(normalized), *[None if a is None else torch.from_numpy(a) for a in (w, b)]).numpy(),
        rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["transposed input", "strided weight", "few elements", "no kernel"])
def test_other_layer_norms_take_layer_norm_cpu_as_before(case, monkeypatch):
    x, w, b = _layer_norm_args((4, 8, 128), (128,))
    jx, jw, jb = jt.from_numpy(x), jt.from_numpy(w), jt.from_numpy(b)
    if case == "transposed input":
        jx = jt.from_numpy(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(0, 1)
    elif case == "strided weight":
        jw = jt.from_numpy(np.repeat(w, 2))[::2]
    elif case == "few elements":
        x, jx = x[:1, :1, :64].copy(), jt.from_numpy(x[:1, :1, :64].copy())
        w, b, jw, jb = w[:64].copy(), b[:64].copy(), jt.from_numpy(w[:64].copy()), jt.from_numpy(b[:64].copy())
    else:
        monkeypatch.setattr(normalization, "LAYER_NORM_KERNEL", None)
    normalized = (x.shape[-1],)
    with functions_called({"_layer_norm_cpu"}) as seen:
        got = F.layer_norm(jx, normalized, jw, jb, 1e-5)
    assert seen == ["_layer_norm_cpu"]
    want = _old_layer_norm(jx.numpy(), normalized, jw.numpy(), jb.numpy(), 1e-5)  # (the arrays it was given)
    assert got.numpy().tobytes() == want.tobytes()


def test_the_kernel_is_asked_again_after_layer_norm_kernel_changes(monkeypatch):
    asked = []
    registered = normalization.LAYER_NORM_KERNEL

    def counting(*key):
        asked.append(key)
        return registered(*key)
    monkeypatch.setattr(normalization, "LAYER_NORM_KERNEL", counting)
    x = jt.ones(2, 128)
    for _ in range(3):
        F.layer_norm(x, (128,))
    assert asked == [("float32", False, False)]
    monkeypatch.setattr(normalization, "LAYER_NORM_KERNEL", lambda *key: None)  # (none can be built)
    with functions_called({"_normalized_rows"}) as seen:
        F.layer_norm(x, (128,))
    assert seen == ["_normalized_rows"]  # (NumPy's passes)


@pytest.mark.parametrize("call,first", [
    (lambda x, w, b: F.layer_norm(x, (8,), w, b, 1e-5), True),  # (nn.LayerNorm's call)
    (lambda x, w, b: jt.nn.LayerNorm(8)(x), True),
    (lambda x, w, b: F.layer_norm(x, (8,)), False),  # (other calls: the function)
    (lambda x, w, b: F.layer_norm(x, (8,), w, b, eps=1e-3), False),
    (lambda x, w, b: F.linear(x, w.view(1, 8).expand(3, 8), b[:3]), True),  # (nn.Linear's call)
    (lambda x, w, b: jt.nn.Linear(8, 3)(x), True),
    (lambda x, w, b: F.linear(x, w.view(1, 8)), False),
    (lambda x, w, b: F.linear(input=x, weight=w.view(1, 8)), False),
])
def test_positional_calls_are_served_before_the_decorated_function(call, first):
    x, w, b = jt.randn(2, 8), jt.randn(8), jt.randn(8)
    with jt.no_grad(), functions_called({"layer_norm", "linear", "in_float32", "_layer_norm_fast",
                                         "_linear_fast"}) as seen:
        call(x, w, b)
    if first:
        assert seen in (["_layer_norm_fast"], ["_linear_fast"])
    else:
        assert seen[0] in ("in_float32", "linear")


def test_autocast_or_a_dispatch_hook_skips_first():
    x, w = jt.randn(2, 8), jt.randn(4, 8)
    with jt.autocast("cpu", dtype=jt.bfloat16):
        with functions_called({"linear", "_linear_fast"}) as seen:
            out = F.linear(x, w, None)
    assert seen[0] == "linear" and out.dtype is jt.bfloat16
    with jt.profiler.profile() as prof:
        with functions_called({"linear", "_linear_fast"}) as seen:
            F.linear(x, w, None)
    assert seen == ["linear"] and "aten::linear" in {e.name for e in prof.events()}

"""``histogram``'s checks in torch's order, with and without ``out=``: the out tensors' dtypes (jitorch wrote a
float32 input's counts into float64 out tensors, silently), the edges' and the weight's dtypes (accepted too), an
empty edges tensor, the bin count, the range, the kernel's dtypes; and torch's autograd fallback's refusal of an
out tensor that requires grad before all of them (``histogram(halves, 3, out=...)`` raised the kernel's
NotImplementedError where torch raises the guard's RuntimeError; session 44 fuzz finding)."""

import itertools
import warnings

import pytest
import torch

import jitorch

CONDITIONS = {
    "count": ["half", "hist_dtype", "edges_dtype", "hist_int", "weight_numel", "weight_dtype", "bins_0", "range",
              "input_requires_grad", "hist_requires_grad"],
    "edges": ["half", "hist_dtype", "edges_dtype", "hist_int", "weight_numel", "weight_dtype", "bins_dtype",
              "bins_2d", "bins_empty", "input_requires_grad", "hist_requires_grad"],
}


def _call(T, form, conditions, out):
    d = lambda name: getattr(T, name)  # noqa: E731
    xd = "float16" if "half" in conditions else "float32"
    x = T.tensor([0.1, 0.5, 0.7, 0.2], dtype=d(xd)).requires_grad_("input_requires_grad" in conditions)
    kw = {}
    if "weight_numel" in conditions or "weight_dtype" in conditions:
        kw["weight"] = T.ones(3 if "weight_numel" in conditions else 4,
                              dtype=d("float64" if "weight_dtype" in conditions else xd))
    if form == "count":
        bins, n = (0 if "bins_0" in conditions else 3), 3
        if "range" in conditions:
            kw["range"] = (1.0, 0.0)
    else:
        bins = T.tensor([] if "bins_empty" in conditions else [0.0, 0.5, 0.8, 1.0],
                        dtype=d("float64" if "bins_dtype" in conditions else xd))
        if "bins_2d" in conditions:
            bins = bins.reshape(2, 2)
        n = 3
    if out:
        hd = "int64" if "hist_int" in conditions else "float64" if "hist_dtype" in conditions else xd
        hist = T.empty(n, dtype=d(hd)).requires_grad_("hist_requires_grad" in conditions and hd != "int64")
        kw["out"] = (hist, T.empty(4, dtype=d("float64" if "edges_dtype" in conditions else xd)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            hist, edges = T.histogram(x, bins, **kw)
        except (RuntimeError, NotImplementedError) as e:
            return type(e).__name__, str(e)
    return hist.tolist(), edges.tolist()


def _cases():
    """(form, conditions, out): those of the out tensors with out= alone; edges both empty and 2-D are none."""
    for form, conditions in CONDITIONS.items():
        for k in (1, 2):
            for chosen in itertools.combinations(conditions, k):
                if {"bins_empty", "bins_2d"} <= set(chosen):
                    continue
                yield form, chosen, True
                if not any(c.startswith(("hist", "edges_")) for c in chosen):
                    yield form, chosen, False


@pytest.mark.parametrize("form, conditions, out", list(_cases()))
def test_histogram_raises_torchs_first_error_or_gives_its_result(form, conditions, out):
    """Each form (a bin count, edges) with each one or two bad or notable arguments, with and without out=: torch's
    error (type and message) or torch's histogram."""
    assert _call(jitorch, form, conditions, out) == _call(torch, form, conditions, out)


def test_histogram_out_of_another_dtype_raises_before_writing():
    """A float32 input's histogram into float64 out tensors: torch's RuntimeError, the out tensors unwritten (jitorch
    wrote the counts cast)."""
    hist, edges = jitorch.full((3,), 7.0, dtype=jitorch.float64), jitorch.full((4,), 7.0, dtype=jitorch.float64)
    with pytest.raises(RuntimeError, match="input tensor and hist tensor should have the same dtype, but got input "
                                           "float and hist double"):
        jitorch.histogram(jitorch.tensor([0.1, 0.5]), 3, out=(hist, edges))
    assert hist.tolist() == [7.0] * 3 and edges.tolist() == [7.0] * 4


def test_histogram_out_requiring_grad_refused_before_the_kernels_dtype_check():
    """The autograd fallback's guard comes first: a float16 input (no kernel) into a hist that requires grad."""
    x = jitorch.tensor([0.1, 0.5], dtype=jitorch.float16)
    out = (jitorch.empty(3, dtype=jitorch.float16).requires_grad_(), jitorch.empty(4, dtype=jitorch.float16))
    with pytest.raises(RuntimeError, match=r"aten::histogram\(\): functions with out=\.\.\. arguments don't support"):
        jitorch.histogram(x, 3, out=out)
    with jitorch.no_grad(), pytest.raises(NotImplementedError, match="\"histogramdd\" not implemented for 'Half'"):
        jitorch.histogram(x, 3, out=out)

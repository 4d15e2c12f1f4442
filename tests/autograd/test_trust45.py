"""Session 45's trust findings in autograd: derivatives jitorch gave where torch has none, and composites whose
gradient by their decomposition differed from torch's at special points."""

from __future__ import annotations

import pytest
import torch

import jitorch


def _histogram_cases(T):
    x = T.tensor([0.5, -1.0, 2.0, 0.25, 1.0], dtype=T.float64, requires_grad=True)
    w = T.tensor([0.5, 1.0, 2.0, 0.25, 1.0], dtype=T.float64, requires_grad=True)
    i = T.tensor([0, 1, 1, 2, 0])
    edges = T.tensor([-1.0, 0.0, 1.0], dtype=T.float64)
    return {
        "histogram's edges": lambda: T.histogram(x, 3)[1],
        "histogram's counts of weights": lambda: T.histogram(x.detach(), 3, weight=w)[0],
        "histogram of given edges": lambda: T.histogram(x, edges)[0],
        "histc": lambda: T.histc(x, 3),
        "bincount of weights": lambda: T.bincount(i, w),
        "bincount": lambda: T.bincount(i),
        "histogramdd's counts": lambda: T.histogramdd(x.reshape(5, 1), 3)[0],
        "histogramdd's edges": lambda: T.histogramdd(x.reshape(5, 1), 3)[1][0],
        "histogramdd of given edges": lambda: T.histogramdd(x.reshape(5, 1), [edges])[0],
    }


def _outcome(fn):
    r = fn()
    node = r.grad_fn.name() if r.grad_fn is not None else None
    try:
        r.sum().backward()
        raised = None
    except Exception as e:  # (torch's type and message are the oracle)
        raised = (type(e).__name__, str(e))
    return r.requires_grad, node, raised


@pytest.mark.parametrize("case", list(_histogram_cases(torch)))
def test_histogram_results_require_grad_and_their_backward_raises_as_torchs(case):
    """A histogram's edges move with the data's range, and its counts of weights with the weights: torch has no
    derivative for them (its autograd fallback: results that require grad, a backward that raises), and jitorch
    declared them non-differentiable, so their gradients and tangents were silently 0 (transform-fuzz seed
    8470600 of ``--out-views 0.5``: the tangent of ``histogram(v).bin_edges`` 0 where central differences gave
    -2.45). histc is non-differentiable in both."""
    assert _outcome(_histogram_cases(jitorch)[case]) == _outcome(_histogram_cases(torch)[case])


@pytest.mark.parametrize("case", ["histogram's edges", "histogramdd's counts", "bincount of weights", "histc"])
def test_histogram_tangents_raise_as_torchs(case):
    """torch.func.jvp through a histogram raises "Trying to use forward AD with aten::histogram that does not support
    it."; jitorch's gave a zero tangent (seed 8470600), and a tangent through any op torch's autograd fallback serves
    raised the backward's RuntimeError ("derivative for aten::scatter is not implemented")."""
    def outcome(T):
        x = T.tensor([0.5, -1.0, 2.0, 0.25, 1.0], dtype=T.float64)
        i = T.tensor([0, 1, 1, 2, 0])
        fns = {"histogram's edges": lambda x: T.histogram(x, 3)[1],
               "histogramdd's counts": lambda x: T.histogramdd(x.reshape(5, 1), 3)[0],
               "bincount of weights": lambda x: T.bincount(i, x), "histc": lambda x: T.histc(x, 3)}
        try:
            return "ran", T.func.jvp(fns[case], (x,), (T.ones_like(x),))[1].tolist()
        except Exception as e:
            return type(e).__name__, str(e)
    assert outcome(jitorch) == outcome(torch)


def test_a_tangent_through_torchs_autograd_fallback_raises_its_forward_ad_error():
    """``scatter(..., reduce='add')``, which torch's autograd fallback serves: torch.func.jvp raises
    NotImplementedError "Trying to use forward AD with aten::scatter that does not support it."; jitorch raised its
    backward's RuntimeError."""
    def outcome(T):
        index = T.tensor([0, 1, 1, 2, 0])
        try:
            T.func.jvp(lambda x: T.zeros(3, dtype=T.float64).scatter(0, index, x, reduce="add"),
                       (T.ones(5, dtype=T.float64),), (T.ones(5, dtype=T.float64),))
        except Exception as e:
            return type(e).__name__, str(e)
        return "ran"
    assert outcome(jitorch) == outcome(torch)

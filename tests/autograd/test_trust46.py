"""Session 46's trust checks on gradients: ``dist(x, y, p=0)`` (a count of the nonzero differences) at ties,
zeros, NaN and infinities, against torch's gradient and tangent where torch defines them, and gradcheck."""

import math

import pytest
import torch

import jitorch

CASES = {
    "distinct": ([1.0, 2.0, 3.0], [0.0, 2.0, 5.0]),
    "all tied": ([1.0, -1.0], [1.0, -1.0]),
    "zeros": ([0.0, -0.0], [0.0, 0.0]),
    "NaN": ([math.nan, 1.0], [0.0, 1.0]),
    "infinities": ([math.inf, 1.0], [-math.inf, 2.0]),
}


def _leaves(L, case, which, dtype):
    a, b = CASES[case]
    x = L.tensor(a, dtype=getattr(L, dtype), requires_grad=which in ("x", "both"))
    y = L.tensor(b, dtype=getattr(L, dtype), requires_grad=which in ("y", "both"))
    return x, y


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES)
def test_dist_p0_gradient_of_self_is_torchs_none_or_zeros(case, dtype):
    """torch's norm backward for p=0 gives ``self`` no gradient (an undefined one: None, or zeros materialized);
    jitorch's is the same, with the value torch's count, at ties, zeros, NaN and infinities."""
    got = {}
    for L in (torch, jitorch):
        x, y = _leaves(L, case, "x", dtype)
        d = L.dist(x, y, p=0)
        (g,) = L.autograd.grad(d, (x,), allow_unused=True)
        d = L.dist(x, y, p=0)
        (zeros,) = L.autograd.grad(d, (x,), allow_unused=True, materialize_grads=True)
        got[L] = (d.item(), g, zeros.tolist())
    assert got[torch][0] == got[jitorch][0] and got[torch][1] is None and got[jitorch][1] is None
    assert got[jitorch][2] == got[torch][2] == [0.0] * len(CASES[case][0])


@pytest.mark.parametrize("which", ["y", "both"])
@pytest.mark.parametrize("case", CASES)
def test_dist_p0_gradient_of_other_is_zero_where_torchs_backward_raises_its_internal_error(case, which):
    """torch's backward negates ``self``'s undefined gradient for ``other`` and raises "Expected a proper Tensor but
    got None" (an internal error of its formula, docs/differences-from-torch.md); jitorch gives ``other`` no
    gradient, as ``self``: zeros materialized."""
    x, y = _leaves(torch, case, which, "float64")
    with pytest.raises(RuntimeError, match="Expected a proper Tensor but got None"):
        torch.autograd.grad(torch.dist(x, y, p=0), [t for t in (x, y) if t.requires_grad], allow_unused=True)
    x, y = _leaves(jitorch, case, which, "float64")
    leaves = [t for t in (x, y) if t.requires_grad]
    grads = jitorch.autograd.grad(jitorch.dist(x, y, p=0), leaves, allow_unused=True)
    assert all(g is None for g in grads)
    grads = jitorch.autograd.grad(jitorch.dist(x, y, p=0), leaves, allow_unused=True, materialize_grads=True)
    assert [g.tolist() for g in grads] == [[0.0] * len(CASES[case][0])] * len(leaves)


@pytest.mark.parametrize("case", CASES)
def test_dist_p0_tangent_is_torchs_zero(case):
    """torch.func.jvp of ``dist(x, y, p=0)`` is 0 whatever the tangents, as jitorch's."""
    got = []
    for L in (torch, jitorch):
        x, y = _leaves(L, case, "none", "float64")
        ones = L.ones(len(CASES[case][0]), dtype=L.float64)
        primal, tangent = L.func.jvp(lambda a, b: L.dist(a, b, p=0), (x, y), (ones, ones))
        got.append((primal.item(), tangent.item()))
    assert got[0] == got[1] and got[1][1] == 0.0


@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_dist_p0_gradcheck(which):
    """gradcheck of ``dist(x, y, p=0)`` away from ties (torch's passes for ``x`` alone), eager and compiled."""
    def make():
        return [jitorch.tensor([1.0, 2.0, 3.0], dtype=jitorch.float64, requires_grad=which in ("x", "both")),
                jitorch.tensor([1.5, 0.0, 0.5], dtype=jitorch.float64, requires_grad=which in ("y", "both"))]
    assert jitorch.autograd.gradcheck(lambda a, b: jitorch.dist(a, b, p=0), make())
    compiled = jitorch.compile(lambda a, b: jitorch.dist(a, b, p=0))
    assert jitorch.autograd.gradcheck(compiled, make())
    if which == "x":
        x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda a: torch.dist(a, torch.tensor([1.5, 0.0, 0.5], dtype=torch.float64),
                                                             p=0), (x,))

"""Forward-mode tangents of every differentiable primitive against central finite differences.

Each primitive with a derivative rule and samples (tests/ops/samples.py, float64) runs on dual tensors whose
tangents are random; its output tangents must match ``(f(x + eps t) - f(x - eps t)) / 2 eps`` to 1e-4 (an
output without a tangent must not move). Primitives whose backward has no derivative of its own raise
NotImplementedError naming it (never a wrong tangent).
"""

import warnings

import numpy as np

import jitorch as jt
import jitorch.autograd.forward_ad as fw
from jitorch.autograd.rule import RULES
from jitorch.ops import registry
from tests.ops.samples import SAMPLES, VALUES_UNDEFINED, bind, samples

# Their rules take the input as symmetric (only one triangle is read), as torch's do: their tangents are
# those of a symmetric perturbation, which a random tangent is not (tests/func/test_forward_ad.py checks them
# against torch's with symmetric tangents)
SYMMETRIC_INPUT = {"_linalg_eigh", "linalg_cholesky_ex"}
# whose backward (or an input's derivative) is not differentiable in jitorch: forward AD raises
NOT_DIFFERENTIABLE_TWICE = {"_attention", "_ctc_loss", "_rnn_layer"}
# whose derivative torch does not implement: forward AD raises torch's forward-mode error
NO_DERIVATIVE = {"geqrf", "igamma", "igammac", "special_zeta", "_unique", "_unique_consecutive"}


def _outputs(result):
    return [result] if isinstance(result, jt.Tensor) else list(result)


def _perturbed(op, args, positions, tangents, eps):
    moved = list(args)
    for i in positions:
        moved[i] = args[i] + eps * tangents[i]
    with jt.no_grad():
        return _outputs(registry.call(op, moved))


def _check(op, args, positions):
    """None if ``op``'s tangents at ``args`` match finite differences, else why not."""
    rng = np.random.default_rng(0)
    tangents = {i: jt.tensor(rng.standard_normal(tuple(args[i].shape))) for i in positions}
    try:
        base, high, low = (_perturbed(op, args, positions, tangents, e) for e in (0.0, 1e-6, -1e-6))
    except (RuntimeError, ValueError, TypeError, IndexError):
        return None
    if not all(isinstance(o, jt.Tensor) for o in base):
        return None
    with fw.dual_level():
        duals = list(args)
        for i in positions:
            duals[i] = fw.make_dual(args[i], tangents[i])
        found = [fw.unpack_dual(o).tangent for o in _outputs(registry.call(op, duals))]
    for out, tangent, h, lo in zip(base, found, high, low):
        if not out.dtype.is_floating_point:
            continue
        numeric = (h.numpy() - lo.numpy()) / 2e-6
        if tangent is None:
            if np.abs(numeric).max(initial=0) > 1e-6:
                return "no tangent, but the output moves"
        elif not np.allclose(tangent.numpy(), numeric, rtol=1e-4, atol=1e-4, equal_nan=True):
            return "differs"
    return None


def test_every_differentiable_primitive_against_finite_differences():
    checked, failures = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, op in sorted(registry.OPS.items()):
            if name not in SAMPLES or name not in RULES or op.kind == "random" or op.composite is not None \
                    or op.public_name in VALUES_UNDEFINED or name in SYMMETRIC_INPUT:
                continue
            args = bind(op, samples(op, jt.float64, 0)[0])
            positions = [i for i, is_list in op.tensor_args
                         if not is_list and isinstance(args[i], jt.Tensor) and args[i].dtype == jt.float64]
            if not positions:
                continue
            try:
                why = _check(op, args, positions)
            except NotImplementedError as e:
                assert (name in NOT_DIFFERENTIABLE_TWICE and "is not implemented" in str(e)
                        or name in NO_DERIVATIVE and str(e).startswith("Trying to use forward AD with ")), (name, e)
                continue
            if why is not None:
                failures.append((name, why))
            checked.add(name)
    assert not failures, failures
    assert len(checked) > 200

"""Every primitive op that takes tensors has a derivative rule or is declared non-differentiable."""

import jitorch  # noqa: F401  (declares every op and rule)
from jitorch.autograd.rule import NONDIFFERENTIABLE, RULES
from jitorch.ops import registry


def served_by_fallback(op):
    """torch's autograd fallback serves every call (heaviside): a backward through it raises."""
    fallback = op.attrs.get("autograd_fallback")
    return fallback is not None and fallback(None) is True


# backward-only kernels whose own backward (a double backward) raises, as torch's cuDNN RNN's, fused
# attention's and CTC loss's do (tests/nn/test_rnn.py, tests/codegen/test_attention.py and tests/nn/test_ctc_loss.py
# check the error)
FIRST_ORDER_ONLY_BACKWARDS = {"_rnn_layer_backward", "_attention_backward", "_ctc_loss_backward"}


def test_every_differentiable_op_has_a_rule():
    missing = sorted(name for name, op in registry.OPS.items()
                     if op.composite is None and op.tensor_args and name not in RULES and
                     name not in NONDIFFERENTIABLE and not served_by_fallback(op)
                     and name not in FIRST_ORDER_ONLY_BACKWARDS)
    assert not missing, f"ops with tensor inputs but no derivative rule (jitorch/autograd/rules/): {missing}"


def test_rules_name_registered_ops_only():
    assert not sorted(set(RULES) - set(registry.OPS)), "a rule names an op that does not exist"
    assert not sorted(set(RULES) & NONDIFFERENTIABLE), "an op is both differentiable and not"

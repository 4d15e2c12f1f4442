"""gradcheck and gradgradcheck of every differentiable registry op.

One parametrised test over the ops with a derivative rule (jitorch/autograd/rule.py)
and the composite ops whose results carry a gradient (their parts have rules).
Each op runs, in float64, on its samples (tests/ops/samples.py) and on
variants of them, each kind once per op, on the first sample that allows it:

- layouts: every floating input rebuilt transposed, sliced with steps, at an
  offset in a larger storage, or expanded with stride 0 (the leaf is then the
  compact tensor and the function expands it, since finite differences cannot
  move one element of a stride-0 tensor alone);
- broadcasting: one floating input shrunk to a size-1 leading dim or to 0-d,
  kept where the op accepts it and gives outputs of the same shapes (so the op
  broadcast it);
- one input at a time: only that floating input requires grad, so rules that
  compute each argument's gradient alone are exercised;
- in place: ``op_`` writing into a view of a fresh base (once per choice of
  the op's other arguments, as ``div_``'s rounding modes), so that the rule
  reads the old value of ``self`` and the base's history takes the write.

An alias (``sub``/``subtract``: one rule, schema and doc) gets its samples
only. Only floating tensors get ``requires_grad``; integer and bool tensors
(indices, masks) and Python numbers stay constants. Sample values keep away
from the points where an op has no derivative (kinks, ties, jumps), so no op
is skipped; the few calls whose derivative torch does not implement either
must raise at backward.

gradcheck compares whole Jacobians; gradgradcheck runs in torch's fast mode
(``v^T J u`` for random unit vectors, `jitorch.autograd.gradcheck`): whole
second-order Jacobians took two thirds of this file's time (an eager backward
per input and grad-output element); many rules' second derivatives are
also checked whole in tests/autograd/test_rules_*.py and test_grads44.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest

import jitorch as jt
from jitorch.autograd import gradcheck, gradgradcheck, no_grad
from jitorch.autograd.rule import NONDIFFERENTIABLE, RULES
from jitorch.ops import registry
from jitorch.runtime.pytree import tree_leaves
from tests.autograd.slots import floating, tensor_slots
from tests.ops.samples import SAMPLES, bind, samples
from tests.support import tensor_and_array

LAYOUTS = ("transposed", "strided", "offset", "expanded")
# The errors an op raises for arguments it does not accept (a variant the op does not take is dropped).
REFUSALS = (RuntimeError, IndexError, ValueError, TypeError)


# The Householder op without a derivative (torch has none for geqrf either): not checked.
HOUSEHOLDER = frozenset({"geqrf"})
# Ops of one symmetric matrix whose kernels read one triangle: checked on ``(A + A.mT) / 2``, as torch's OpInfos
# do (their rules give the gradient with respect to the symmetric matrix).
SYMMETRIC_INPUT = {"_linalg_eigh": lambda args: True, "linalg_cholesky_ex": lambda args: True,
                   "cholesky": lambda args: True, "linalg_pinv.atol_rtol_float": lambda args: args[3]}
# Ops that need invertible (full-rank) matrices: the "expanded" layout, whose rows repeat, is singular.
FULL_RANK = frozenset({"cholesky_solve", "cholesky_inverse", "lu_solve", "linalg_solve_ex", "inverse", "linalg_inv_ex",
                       "linalg_solve_triangular", "triangular_solve", "slogdet", "logdet", "det", "matrix_power",
                       "linalg_qr", "qr", "_linalg_svd", "svd", "linalg_pinv.atol_rtol_float", "pinverse",
                       "linalg_lstsq", "_linalg_lstsq", "linalg_lu_factor_ex", "lu"})


# Ops whose rule is torch's gradient with respect to something other than the op's input: ``_ctc_loss``'s is the
# gradient with respect to the logits its log-probabilities came from by log_softmax (torch's formula), checked by
# gradcheck through log_softmax in tests/nn/test_ctc_loss.py.
NOT_THE_INPUTS_DERIVATIVE = frozenset({"_ctc_loss"})
# Ops whose derivative torch does not implement at all (tests/func/test_fuzz42_tangents.py checks torch's errors)
UNIQUE = frozenset({"_unique", "unique", "_unique_consecutive", "unique_consecutive"})


# Ops whose backward is an op without a derivative of its own (the fused RNN layer's, as torch's cuDNN RNN, and
# the fused attention's, as torch's fused attention kernels): their gradgradcheck must raise.
FIRST_ORDER_ONLY = frozenset({"_rnn_layer", "_attention"})


# Composites that call one kernel checked here under its own name (torch's older spellings of torch.linalg's
# functions): like aliases, they get their samples only.
WRAPPERS = frozenset({"inverse", "qr", "svd", "cholesky", "pinverse", "linalg_lstsq", "lu", "logdet"})


def _no_derivative(op, args):
    """Calls whose gradient is not implemented: an SVD or eigendecomposition without its vectors and, as in torch, scatter with reduce= (torch's autograd fallback serves it) and zeta's,
    igamma's and igammac's in their first argument (their second argument's: tests/ops/test_special_cephes.py)."""
    fallback = op.attrs.get("autograd_fallback")
    without_vectors = op.name in ("_linalg_svd", "_linalg_eigh") and not args[2]  # (svdvals, eigvalsh compute them)
    return (without_vectors
            or fallback is not None and fallback(args)
            or op.name in ("special_zeta", "igamma", "igammac") and isinstance(args[0], jt.Tensor)
            and args[0].numel() > 0)


def _served_by_fallback(case):
    """Whether a floating output of the case has torch's autograd fallback's node (a composite whose parts it
    serves: histogramdd's kernels), whose backward raises."""
    return any(floating(o) and o.grad_fn is not None and o.grad_fn.name() == "torch::autograd::NotImplemented"
               for o in tree_leaves(case(*case.leaves)))


def _get(args, slot):
    i, j = slot
    return args[i] if j is None else args[i][j]


def _with(args, slots, tensors):
    """``args`` with the tensors at ``slots`` replaced (lists and tuples rebuilt as they were)."""
    args = [list(a) if isinstance(a, tuple) else a for a in args]
    for (i, j), t in zip(slots, tensors):
        if j is None:
            args[i] = t
        else:
            args[i] = list(args[i])
            args[i][j] = t
    return tuple(tuple(a) if isinstance(a, list) else a for a in args)


def _leaf(t):
    """(leaf, shape): ``t`` itself as a leaf, or, where ``t`` repeats elements with stride 0, its compact
    part as the leaf and ``t``'s shape to expand it back to."""
    repeated = [d for d, (n, s) in enumerate(zip(t.shape, t.stride())) if s == 0 and n > 1]
    if not repeated:
        return t.detach().requires_grad_(), None
    compact = t
    for d in repeated:
        compact = compact.narrow(d, 0, 1)
    return compact.detach().requires_grad_(), tuple(t.shape)


@dataclass
class Case:
    """One call of ``op`` whose floating inputs at ``slots`` are rebuilt from leaves."""

    label: str
    op: object
    args: tuple     # schema-ordered arguments
    slots: list     # the floating inputs that require grad
    leaves: list
    shapes: list    # per slot: the shape the leaf is expanded to, or None
    in_place: bool = False

    def __call__(self, *xs):
        inputs = [x if shape is None else x.expand(shape) for x, shape in zip(xs, self.shapes)]
        symmetric = SYMMETRIC_INPUT.get(self.op.name)
        if symmetric is not None and symmetric(self.args) and self.slots[0] == (0, None):
            inputs[0] = (inputs[0] + inputs[0].mT) / 2
        args = _with(self.args, self.slots, inputs)
        if not self.in_place:
            return registry.call(self.op, args)
        # written through a view of a fresh base: the op's node and the base's as_strided_scatter node;
        # a view op (``transpose_``) writes nothing and changes the view's geometry instead
        base = args[0].clone(memory_format=jt.contiguous_format)
        target = registry.call_inplace(self.op, (base.view(base.shape),) + args[1:])
        return base if self.op.view is None else target

    def __repr__(self):
        return f"{self.op.name} [{self.label}] slots={self.slots} inputs=" + ", ".join(
            f"{list(x.shape)}@{x.stride()}+{x.storage_offset()}" for x in self.leaves)


def _case(label, op, args, slots, in_place=False):
    made = [_leaf(_get(args, s)) for s in slots]
    return Case(label, op, args, list(slots), [leaf for leaf, _ in made], [shape for _, shape in made], in_place)


def _float_output_shapes(op, args):
    """The shapes of the op's floating outputs on ``args``, or None where it refuses them or has none."""
    try:
        with no_grad():
            outs = [o for o in tree_leaves(registry.call(op, args)) if floating(o)]
    except REFUSALS:
        return None
    return [tuple(o.shape) for o in outs] or None


def _relaid(t, layout):
    """``t``'s values (for "expanded": its first slice repeated) in new storage laid out as ``layout``."""
    return tensor_and_array(np.array(t.detach().numpy()), layout)[0]


def _shrunk(t):
    """Smaller inputs that broadcast to ``t``'s shape: (name, tensor)."""
    if t.ndim == 0 or t.numel() == 0:
        return []
    first = np.ascontiguousarray(t.detach().numpy()[:1])
    return [(name, jt.tensor(values, dtype=t.dtype)) for name, values in (("size-1", first),
                                                                        ("0-d", first.reshape(-1)[0]))]


def _layout_variants(op, args, slots):
    for layout in LAYOUTS:
        if layout == "expanded" and op.name in FULL_RANK:
            continue
        relaid = [_relaid(_get(args, s), layout) for s in slots]
        moved = any(r.stride() != _get(args, s).stride() or r.storage_offset() != _get(args, s).storage_offset()
                    for r, s in zip(relaid, slots))
        new = _with(args, slots, relaid)
        if moved and _float_output_shapes(op, new) is not None:
            yield _case(layout, op, new, slots)


def _broadcast_variants(op, args, slots, shapes):
    if sum(isinstance(v, jt.Tensor) for v in tree_leaves(args)) < 2:  # nothing to broadcast against
        return
    for k, slot in enumerate(slots):
        for form, small in _shrunk(_get(args, slot)):
            new = _with(args, [slot], [small])
            if _float_output_shapes(op, new) == shapes:
                yield _case(f"broadcast input {k} to {form}", op, new, slots)


def _alone_variants(op, args, slots):
    if len(slots) > 1:
        for k, slot in enumerate(slots):
            yield _case(f"only input {k} requires grad", op, args, [slot])


def _in_place_variants(op, args, slots):
    """``op_`` on the sample, once per choice of its other arguments (``div_``'s rounding modes)."""
    if "inplace" in op.variants and (0, None) in slots:
        options = [repr(v) for v in args[1:] if not any(isinstance(t, jt.Tensor) for t in tree_leaves(v))]
        case = _case(f"in place ({', '.join(options)})", op, args, slots, in_place=True)
        try:
            with no_grad():
                case(*case.leaves)
        except REFUSALS:  # the result does not fit in self (a broadcast, a type promotion)
            return
        yield case


def _alias_key(name):
    op = registry.OPS[name]
    definition = RULES[name].backward if name in RULES else op.composite
    return id(definition), op.doc, tuple((a.name, a.type, a.default) for a in op.schema.args)


@functools.cache
def _is_alias(name):
    """One op under a second name (``subtract`` for ``sub``): the same rule or composite, schema and doc as an
    op whose name sorts first. Its variants would check the same rule on the same layouts again."""
    key = _alias_key(name)
    return any(_alias_key(m) == key for m in registry.OPS if m < name and (m in RULES or registry.OPS[m].composite))


def _tracks(case):
    """Whether some floating output of the case requires grad (a variant may leave it none: ``reshape_as``
    with only ``other`` requiring grad)."""
    return any(floating(o) and o.requires_grad for o in tree_leaves(case(*case.leaves)))


def _cases(name):
    """(case, has a derivative) for every sample of ``name`` with floating inputs and outputs, then each kind
    of variant once, on the first sample that allows it."""
    op = registry.OPS[name]
    done = set()
    for n, sample in enumerate(samples(op, dtype=jt.float64)):
        args = bind(op, sample)
        slots = list(tensor_slots(op, args))
        shapes = _float_output_shapes(op, args)
        if not slots or shapes is None:
            continue
        case = _case(f"sample {n}", op, args, slots)
        if _no_derivative(op, args) or _served_by_fallback(case):
            yield case, False
            continue
        if name not in RULES and not _tracks(case):  # a composite's parts may cut the graph (unique)
            continue
        yield case, True
        if _is_alias(name) or name in WRAPPERS:
            continue
        for case in (*_layout_variants(op, args, slots), *_broadcast_variants(op, args, slots, shapes),
                     *_alone_variants(op, args, slots), *_in_place_variants(op, args, slots)):
            if case.label not in done and _tracks(case):
                done.add(case.label)
                case.label = f"sample {n}, {case.label}"
                yield case, True


def _cuts(name):
    """A comparison or random op: torch's zero gradient, defined rather than measured (`rules.common.cut`)."""
    return getattr(RULES[name].backward, "cuts", False) if name in RULES else False


def _differentiable(name):
    """Has a derivative rule, or is a composite whose results carry a gradient on some sample (not histogramdd's,
    whose parts torch's autograd fallback serves; a composite without samples is left to tests/ops/test_op_contract.py, which asks for them). Rules that cut the
    gradient are checked by test_ops_that_cut_the_gradient_give_zeros_written_in_place instead."""
    if name in UNIQUE:
        return False
    if name in RULES:
        # (HOUSEHOLDER's raises: tests/ops/test_decompositions.py)
        return not _cuts(name) and name not in HOUSEHOLDER and name not in NOT_THE_INPUTS_DERIVATIVE
    return (registry.OPS[name].composite is not None and name not in NONDIFFERENTIABLE and name in SAMPLES
            and any(has for _, has in _cases(name)))


NAMES = sorted(n for n in registry.OPS if _differentiable(n))


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_and_gradgradcheck(name):
    assert name in SAMPLES, f"{name} has a derivative rule but no samples in tests/ops/samples.py"
    cases = list(_cases(name))
    assert any(has for _, has in cases), f"{name}: no sample with floating inputs and outputs"
    for case, has_derivative in cases:
        if not has_derivative:
            with pytest.raises((NotImplementedError, RuntimeError), match="derivative for .* is not implemented"):
                gradcheck(case, case.leaves)
            continue
        try:
            assert gradcheck(case, case.leaves)
            if name in FIRST_ORDER_ONLY:
                with pytest.raises(NotImplementedError, match="the derivative for .* is not implemented"):
                    gradgradcheck(case, case.leaves, fast_mode=True)
            else:
                assert gradgradcheck(case, case.leaves, fast_mode=True)
        except Exception as e:
            e.add_note(f"in {case!r}")
            raise


CUTS = sorted(n for n in registry.OPS if _cuts(n))


@pytest.mark.parametrize("name", CUTS)
def test_ops_that_cut_the_gradient_give_zeros_written_in_place(name):
    """``y.ge_(w)``, ``y.uniform_()``: torch's zero gradient for ``y``'s old history and the other floating
    inputs; out of place, a floating result (a normal sample) gives its inputs zeros too."""
    op = registry.OPS[name]
    call = registry.call_inplace if "inplace" in op.variants else registry.call
    checked = 0
    for sample in samples(op, dtype=jt.float64):
        args = bind(op, sample)
        slots = list(tensor_slots(op, args))
        leaves = [_leaf(_get(args, s))[0] for s in slots]
        try:
            out = call(op, _with(args, slots, [leaf * 1 for leaf in leaves]))  # non-leaves: writable in place
        except REFUSALS:  # the result does not fit in self (a broadcast)
            continue
        assert out.requires_grad == (bool(slots) and out.dtype.is_floating_point)
        if not out.requires_grad:
            continue
        grads = jt.autograd.grad(out.sum(), leaves, allow_unused=True)
        for leaf, g in zip(leaves, grads):
            assert g is not None and g.shape == leaf.shape and not np.asarray(g).any(), f"{name}: {g}"
        checked += 1
    assert checked, f"{name}: no sample gives a floating result"

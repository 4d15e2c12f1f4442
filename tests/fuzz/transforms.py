"""The fuzzer's transform mode: each random program (`generator`) run through ``vmap``, ``jvp`` and
``vmap(grad(.))`` of ``jitorch.func`` and compared with a loop over samples and with ``torch.func``.

For a program ``f`` (its first call only: contiguous inputs, the first binding of its closure variables),
with ``SAMPLES`` samples whose input values are drawn as the program's own with other seeds:

* ``vmap``: random ``in_dims`` (an int, negative or not, or None: that input is shared by every sample) and
  ``out_dims``. ``vmap(f)`` must give what ``f`` gives on each sample, stacked at ``out_dims``, and write into
  the batched inputs what ``f`` writes into each sample; it must also give, write and raise what
  ``torch.func.vmap`` does on the same program (outputs, inputs, captured tensors after the call). The
  comparison with the loop takes the fuzzer's tolerance (`oracle.TOLERANCE`) rather than bits: a batching
  rule runs one op on all samples, and a reduction or product over the larger physical tensor may sum in
  another order (its vector lanes, BLAS's blocking) than the same op on one sample. `Outcome.inexact` counts
  the float outputs that were not bit for bit those of the loop.
* ``jvp``: tangents for the float inputs (the others closed over): primal and tangent outputs against
  ``torch.func.jvp`` (where they differ, against ``torch.autograd.functional.jvp``: torch's reverse formulas);
  where torch has no forward derivative for an op, the tangents of a program whose float inputs are all float64
  against central finite differences.
* ``vmap(grad(loss))`` (programs the gradient run takes: `generator.grad_loss` of the outputs): per-sample
  gradients of the float inputs against a loop of ``grad`` and against torch's ``vmap(grad(loss))``; where
  torch's differ, against ``torch.autograd.grad`` on each sample (`_torch_autograd`).

Where torch's vmap differs from jitorch's (other than by one of vmap's own errors or in captured tensors),
torch's per-sample loop is the oracle (`_torch_loop_agrees`): torch's batching rules are wrong for some ops.
A program whose meaning depends on the samples' layout (a write through ``x.ravel()`` of an input mapped at a
dim other than 0: torch's sample is strided there, jitorch's compact; `_layout_dependent`) is judged by the loop
alone in the vmap mode.

Where torch raises and jitorch does not, jitorch's result must still be the loop's: torch's vmap refuses some
programs that have a meaning (`TORCH_LIMITS`: ops without a batching rule whose fallback cannot run); an
error torch raises for a program that has none (an in-place write of batched values into an unbatched tensor,
reading a batched value) must be raised by jitorch too, with the same exception type.
"""

from __future__ import annotations

import contextlib
import random
import re
import warnings
import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

import jitorch
from jitorch.ops.registry import OPS

from .bessel_oracle import float64_bessel
from .generator import grad_loss, torch_gradient_untrusted
from .old_values import reads_old_values
from .oracle import TOLERANCE, TORCH_TOLERANCE, Mismatch, _worst, compare_output, record_value, tolerances
from .program import FLOAT_DTYPES, Instance, make_tensor

SAMPLES = 3
# torch.func refusals of programs that have a meaning (jitorch runs them by its per-sample fallback);
# torch.func's grad transforms refuse in-place writes into captured tensors.
TORCH_LIMITS = ("Batching rule not implemented", "fallback path doesn't work", "does not support it",
                "not implemented", "NYI", "vmap: We do not yet support", "not supported with vmap",
                "We cannot support this", "dynamic shape", "would mutate a captured Tensor",
                # torch's own assert where forward AD meets an in-place op on an integer base (the integer
                # tensors torch lets require grad, docs/differences-from-torch.md; seed 7870121), and its
                # functorch wrappers' internal failures under jvp (seeds 7872468, 7872936)
                "INTERNAL ASSERT FAILED", "Cannot access data pointer of Tensor that doesn't have storage",
                "Expected a proper Tensor but got None",
                # (and ``matmul`` of 3-D operands into an ``out=`` tensor, whose wrapper it cannot resize: seed
                # 8200271; a batch of matrices by a matrix, which torch folds into an mm writing a view of ``o``:
                # seed 8300898)
                "Cannot access storage of TensorWrapper",
                # torch's forward formula of atan2 negates its other operand, which it refuses for a bool one (an
                # operand eager atan2 takes: seed 7881044)
                "Negation, the `-` operator, on a bool tensor is not supported",
                # its forward (and backward) formula of pow subtracts 1 from the exponent, which it refuses for a
                # bool one (an exponent eager pow takes: seeds 7990257, 7993309, 7994203, 7994822, 7998673, 8001477,
                # 8004508, 8302179); its forward formula of logcumsumexp takes the max over a dim of size 0, which
                # refuses (seeds 7993021, 8003646); the zero tangent its sgn gives a 0-dim tensor is a ZeroTensor,
                # which an in-place op on the result then refuses to write (seed 7990074)
                "Subtraction, the `-` operator, with a bool tensor is not supported",
                "max(): Expected reduction dim 0 to have non-zero size", "ZeroTensors are immutable",
                # its float32 tangent of a half type's var/std with no degrees of freedom (`_primal_dtype_tangents`)
                # meeting the primal's half type in a product of a later op's formula (``T.cov(x.std([]))``: 8202766)
                "expected m1 and m2 to have the same dtype",
                # torch's forward formulas giving a tangent of another size than their result, which its forward AD
                # then refuses (seeds 7882265: lu_unpack with unpack_data=False; 7886590: triangular_solve)
                "Trying to set a forward gradient that has a different size",
                # torch's forward AD gives ``sgn``'s 0-d result an immutable zero tangent, which an in-place op on the
                # result then refuses (``v = x.sgn(); v.fill_(3)``: seed 7887190)
                "ZeroTensors are immutable",
                # (also where torch's own forward formula reshaped a tangent: an in-place view op on a result whose
                # tangent is its operand's, `TORCH_WRONG_TANGENT`: seed 7892174)
                )
# Refusals of torch's vmap alone: a boolean mask of a dim of size 0 indexing the tensor it was made of
# (``v[v > 2]``, where each sample's call runs: seeds 7840848, 7870115; tests/func/test_vmap_fuzz_regressions.py),
# ``view`` of a sample that is compact where its batched tensor is not (jitorch's batched tensors are laid out as
# compact samples, docs/differences-from-torch.md; seed 7870973), a copy of a sample into itself (``v[:, -1] = x``
# with ``v`` a view of all of ``x``: eagerly an allowed exact overlap; under torch's vmap, with the batch
# dimension not in front, a partial one it refuses: seed 7873821), ``select_scatter`` of a source of another dtype
# (eagerly cast; torch's batching rule scatters, which refuses: seed 7890743), ``median`` of an empty sample (eagerly
# NaN; torch's rule reduces a dim of size 0, which refuses: seed 7891294), ``slice_scatter`` with a negative start
# (torch's rule takes it past the batch dim: seed 7893879; tests/func/test_fuzz42_tangents.py).
# In vmap modes jitorch's result is judged by the per-sample loop.
VMAP_LIMITS = ("does not match the shape of the indexed tensor", "view size is not compatible with input tensor",
               "some elements of the input tensor and the written-to tensor refer to a single memory location",
               "scatter(): Expected self.dtype to be equal to src.dtype",
               "median(): Expected reduction dim", "index -1 is out of bounds for dimension")
# Statements whose result torch's vmap gets wrong without an error, by tag and a pattern of the statement (None:
# every one): its fallback for ``as_strided_`` leaves the batched tensor's geometry as it was (seed 7870731;
# tests/func/test_vmap_fuzz_regressions.py); its rule for ``argmax``/``argmin``/``aminmax`` with ``keepdim=True`` and
# no dim gives each sample the shape [1] where its call gives all dims of size 1 (seeds 7873003,
# tests/func/test_fuzz42_tangents.py; 7898675, where a later index of the result raised IndexError,
# tests/func/test_fuzz43_vmap.py). Programs with one are compared with the loop alone.
_NO_DIM_KEPT = re.compile(r"(?:arg(?:max|min)|aminmax)\((?:[^,()]+, )?keepdim=True\)")
TORCH_VMAP_WRONG = {"as_strided_": None, "argmax": _NO_DIM_KEPT, "argmin": _NO_DIM_KEPT, "aminmax": _NO_DIM_KEPT}
MODES = ("vmap", "jvp", "vmap-grad")
# torch.func.jvp's errors from a tangent of another dtype than its primal's, which its forward AD then meets in an op
# that refuses mixed dtypes: its tangent of a 0-d float32 tensor times (or divided by) a Python float is float64
# (``T.true_divide(x, -1.5)``), and ``v[index] = y`` with ``y``'s float32 tangent then refuses (seed 8471859 of
# ``--out-views 0.5``). jitorch's tangents have their primals' dtypes (docs/func.md); such programs are judged by
# torch's reverse formulas (`_torch_reverse_jvp`), whose tangents have them too.
TORCH_TANGENT_DTYPE = ("Index put requires the source and destination dtypes match",)


@dataclass
class Outcome:
    """Mismatches found; which checks ran; float outputs equal to the loop's only within tolerance."""

    mismatches: list = field(default_factory=list)
    ran: dict = field(default_factory=dict)
    inexact: int = 0


@dataclass
class Run:
    outputs: list = field(default_factory=list)   # oracle.Output records
    inputs: list = field(default_factory=list)    # the (physical) inputs after the call
    state: dict = field(default_factory=dict)     # captured tensors after the call
    error: str = ""
    error_type: str = ""
    overlaps: int = 0  # torch's calls that read memory they wrote (`old_values.OldValues`)


def _flatten(out):
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _flatten(item)]
    return [out]


def _library(name):
    return torch if name == "torch" else jitorch


def _func(T):
    return torch.func if T is torch else jitorch.func


def _sample(T, program, b):
    """The inputs of sample ``b`` (contiguous)."""
    return [make_tensor(T, d, "cpu", seed_offset=b)[0] for d in program.inputs]


def _batched(T, program, in_dims):
    """The physical inputs: each batched input's samples stacked at its in_dim; sample 0 where None."""
    samples = [_sample(T, program, b) for b in range(SAMPLES)]
    out = []
    for i, d in enumerate(in_dims):
        out.append(samples[0][i].clone() if d is None else T.stack([s[i] for s in samples], dim=d))
    return out


def _effective(in_dims, b):
    return [b if d is not None else 0 for d in in_dims]


def _record(T, inst, result, inputs, error=None):
    run = Run()
    if error is not None:
        run.error, run.error_type = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", \
            type(error).__name__
        return run
    owners = [(t.untyped_storage().data_ptr(), ("input", i)) for i, t in enumerate(inputs) if t.numel()]
    run.outputs = [record_value(T, v, owners) for v in _flatten(result)]
    run.inputs = [record_value(T, t, []) for t in inputs]
    run.state = {name: record_value(T, t, []) for name, t in inst.state().items()}
    return run


def _call(T, program, wrap, inputs, modes=True):
    """Run ``wrap(fn)(*inputs)`` on a fresh instance: the Run record; torch's run under `OldValues` and
    `bessel_oracle.Float64Bessel` (its float32 ``i0`` is an ulp off, which a discontinuity after it magnifies: seed
    7998041) unless ``modes`` is False."""
    inst = Instance(program, T)
    fn, _ = inst.build()
    bases = [t.view_as(t) for t in inputs]  # (an in-place view op, as ``as_strided_``, changes the input's shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = reads_old_values(T) if modes else contextlib.nullcontext()
        try:
            with mode, float64_bessel(T) if modes else contextlib.nullcontext():
                result = wrap(fn)(*inputs)
        except Exception as e:  # the record says which error; the comparison decides whether it is one
            return _record(T, inst, None, bases, e)
    run = _record(T, inst, result, bases)
    run.overlaps = getattr(mode, "overlaps", 0)
    return run


def tensor_outputs(T, program):
    """Positions of the program's flattened outputs that are tensors (torch.func maps only tensors), or None
    when the program fails on sample 0."""
    inst = Instance(program, T)
    fn, _ = inst.build()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            leaves = _flatten(fn(*_sample(T, program, 0)))
    except Exception:
        return None
    return [i for i, v in enumerate(leaves) if isinstance(v, T.Tensor)], leaves


def _selecting(fn, keep):
    def selected(*xs):
        leaves = _flatten(fn(*xs))
        return tuple(leaves[i] for i in keep)
    return selected


def _compare(found, mode, reference, got, want, table, what="", copied=()):
    """Compare two Runs' outputs and inputs; append Mismatches. ``copied``: inputs jitorch's vmap maps
    through a copy (docs/func.md), whose views torch's results may be and jitorch's are not."""
    for kind, g, w in (("output", got.outputs, want.outputs), ("input", got.inputs, want.inputs)):
        if len(g) != len(w):
            found.append(Mismatch(mode, reference, what, f"{kind}s", f"{len(g)} vs {len(w)}"))
            continue
        for j, (a, b) in enumerate(zip(g, w)):
            for diff, detail in compare_output(a, b, table, strides=False):
                if diff == "alias" and kind == "output" and (reference in ("loop", "torch.autograd") or (
                        a.alias is None and b.alias in {("input", i) for i in copied})):
                    continue  # the loop stacks its outputs into new memory; torch.autograd's runs on copies
                found.append(Mismatch(mode, reference, what, f"{kind} {j} {diff}", detail))


# torch's forward formula of logcumsumexp takes the max over its dim, which refuses a dim of size 0 whichever it is
# (dim 0: seeds 7993021, 8003646; dim 1: seed 8482778 of ``--namespaced``)
TORCH_LIMIT_PATTERNS = (re.compile(r"max\(\): Expected reduction dim \d+ to have non-zero size"),)


def _limit(run, mode):
    limits = TORCH_LIMITS + VMAP_LIMITS if mode.startswith("vmap") else TORCH_LIMITS
    return any(s in run.error for s in limits) or any(p.search(run.error) for p in TORCH_LIMIT_PATTERNS)


def _errors(found, mode, got, want):
    """Both raised, only one raised, or neither: whether to go on comparing values."""
    if got.error and want.error:
        if got.error_type != want.error_type and not _limit(want, mode):
            found.append(Mismatch(mode, "torch", "", "error type", f"{got.error} vs {want.error}"))
        return False
    if got.error:
        found.append(Mismatch(mode, "torch", "", "error", f"{got.error} (torch ran)"))
        return False
    if want.error and not _limit(want, mode):
        found.append(Mismatch(mode, "torch", "", "no error", f"torch raised {want.error}"))
        return False
    return not want.error


def _mapped(T, fn, in_dims, out_dims):
    """``vmap(fn, in_dims, out_dims)``; torch's with out_dims 0 and its results' dims moved after: its
    ``out_dims`` mishandle an output that no sample's value reaches (a non-zero one raises, a negative one on
    an empty tensor gives a wrong shape or crashes the process)."""
    if T is jitorch:
        return jitorch.func.vmap(fn, tuple(in_dims), tuple(out_dims))

    def moved(*xs):
        outs = torch.func.vmap(fn, tuple(in_dims))(*xs)
        return tuple(o.movedim(0, d) for o, d in zip(outs, out_dims))
    return moved


def _stacked(T, runs, dims):
    """The loop's Run: per-sample outputs stacked at ``dims`` (per output)."""
    out = Run()
    for j in range(len(runs[0].outputs)):
        values = [r.outputs[j] for r in runs]
        first = values[0]
        stack = np.stack([v.values for v in values], axis=dims[j] % (len(first.shape) + 1))
        out.outputs.append(type(first)("tensor", first.dtype, stack.shape, stack))
    return out


def check_vmap(program, rng, outcome):
    kept = tensor_outputs(jitorch, program)
    if kept is None or not kept[0] or not program.inputs:
        return
    keep, leaves = kept
    in_dims = [None if rng.random() < 0.25 else rng.randint(-(len(d.shape) + 1), len(d.shape))
               for d in program.inputs]
    if all(d is None for d in in_dims):
        in_dims[0] = 0
    out_dims = [rng.randint(-(leaves[i].dim() + 1), leaves[i].dim()) for i in keep]
    outcome.ran["vmap"] = outcome.ran.get("vmap", 0) + 1
    loop = []
    for b in range(SAMPLES):
        inputs = [_sample(jitorch, program, e)[i] for i, e in enumerate(_effective(in_dims, b))]
        loop.append(_call(jitorch, program, lambda fn: _selecting(fn, keep), inputs))
        if loop[-1].error:
            return  # the program has no meaning on these values
    runs = {}
    for name in ("jitorch", "torch"):
        T = _library(name)
        inputs = _batched(T, program, in_dims)
        runs[name] = _call(T, program, lambda fn: _mapped(T, _selecting(fn, keep), in_dims, out_dims), inputs)
    got, want = runs["jitorch"], runs["torch"]
    found = outcome.mismatches
    n = len(found)
    copied = [i for i, (d, decl) in enumerate(zip(in_dims, program.inputs))
              if d is not None and d % (len(decl.shape) + 1)]
    written = None if got.error else [_stacked_input(loop, i, d, got.inputs[i]) for i, d in enumerate(in_dims)]
    # (an error of jitorch's where the loop ran is one whatever torch's vmap does)
    torch_wrong = any(_torch_vmap_wrong(st) for st in program.body) or (
        copied and written is not None and _layout_dependent(program, in_dims, keep, loop, written))
    if not torch_wrong:
        differ = _against_torch(got, want, copied)
        if not (differ and written is not None and _torch_loop_agrees(program, in_dims, keep, out_dims, got, want,
                                                                       differ)):
            found.extend(differ)
    if got.error:
        return
    stacked = _stacked(jitorch, loop, out_dims)
    _compare(found, "vmap", "loop", got, Run(outputs=stacked.outputs, inputs=written), TOLERANCE)
    if len(found) == n:
        outcome.inexact += sum(a.kind == "tensor" and a.values.dtype.kind == "f" and b.values.shape == a.values.shape
                               and not np.array_equal(a.values, b.values, equal_nan=True)
                               for a, b in zip(got.outputs, stacked.outputs))


def _against_torch(got, want, copied):
    """The Mismatches of jitorch's vmap Run against torch's: errors, outputs, inputs, captured state."""
    differ = []
    if not _errors(differ, "vmap", got, want):
        return differ
    _compare(differ, "vmap", "torch", got, want, TORCH_TOLERANCE, copied=copied)
    if got.state.keys() == want.state.keys():
        for name in got.state:
            if got.state[name].kind.startswith("unreadable") and want.state[name].kind.startswith("unreadable"):
                continue  # a batched tensor the call stored, read after the vmap: neither library can
            for diff, detail in compare_output(got.state[name], want.state[name], TORCH_TOLERANCE, False):
                differ.append(Mismatch("vmap", "torch", "", f"state {name} {diff}", detail))
    return differ


def _torch_loop_agrees(program, in_dims, keep, out_dims, got, want, differ):
    """Whether torch's own per-sample loop (eager torch on each sample, stacked) gives jitorch's vmap outputs and
    inputs, where torch's vmap differed (``differ``, no captured state among them) with an error that is not one
    of vmap's own (reading a batched value, writing one into an unbatched tensor), or none. Then torch's vmap is
    no oracle for the program: its batching rules for ``clamp``/``where`` promote a batched 0-dim operand as one
    with dimensions (float32 where each sample's result is float64, seed 7880456); ``aminmax`` without ``dim``
    drops a dimension (seed 7880116; docs/differences-from-torch.md)."""
    if any(m.what.startswith("state") for m in differ) or "vmap" in want.error:
        return False
    loop = []
    for b in range(SAMPLES):
        inputs = [_sample(torch, program, e)[i] for i, e in enumerate(_effective(in_dims, b))]
        loop.append(_call(torch, program, lambda fn: _selecting(fn, keep), inputs))
        if loop[-1].error:
            return False
    stacked = Run(outputs=_stacked(torch, loop, out_dims).outputs,
                  inputs=[_stacked_input(loop, i, d, got.inputs[i]) for i, d in enumerate(in_dims)])
    disagree = []
    _compare(disagree, "vmap", "loop", got, stacked, TORCH_TOLERANCE)
    return not disagree


def _layout_dependent(program, in_dims, keep, loop, written):
    """Whether the program gives or writes other values on samples that are views of the batched inputs (strided
    where an input is mapped at a dimension other than 0, as torch's vmap sees them) than on compact samples (as
    ``loop`` and jitorch's vmap see them; ``written``: the batched inputs as the loop leaves them): ``x.ravel()``
    or ``x.contiguous()`` of a strided sample is a copy, of a compact one the sample itself, so writes through it
    reach the input in one case only (seeds 7875053, 7875220; docs/differences-from-torch.md). Then torch's vmap
    is no oracle; the loop stays one."""
    physical = _batched(jitorch, program, in_dims)
    found = []
    for b in range(SAMPLES):
        inputs = [_sample(jitorch, program, 0)[i] if d is None else p.select(d, b)
                  for i, (d, p) in enumerate(zip(in_dims, physical))]
        run = _call(jitorch, program, lambda fn: _selecting(fn, keep), inputs)
        if run.error:
            return True
        _compare(found, "vmap", "loop", Run(outputs=run.outputs), Run(outputs=loop[b].outputs), TOLERANCE)
    _compare(found, "vmap", "loop", Run(inputs=[record_value(jitorch, p, []) if d is not None else w for p, d, w in
                                                zip(physical, in_dims, written)]), Run(inputs=written), TOLERANCE)
    return bool(found)


def _torch_vmap_wrong(stmt):
    """Whether torch's vmap gets the statement wrong (`TORCH_VMAP_WRONG`)."""
    if stmt.tag not in TORCH_VMAP_WRONG:
        return False
    pattern = TORCH_VMAP_WRONG[stmt.tag]
    return pattern is None or any(pattern.search(line) for line in stmt.lines)



def _stacked_input(loop, i, dim, got):
    """Input ``i`` after the loop, as the batched call's physical input should be (sample 0's for None)."""
    if dim is None:
        return got if any(r.inputs[i].values.tolist() != loop[0].inputs[i].values.tolist() for r in loop) \
            else loop[0].inputs[i]
    first = loop[0].inputs[i]
    stack = np.stack([r.inputs[i].values for r in loop], axis=dim % (len(first.shape) + 1))
    return type(first)("tensor", first.dtype, stack.shape, stack)


def float_split(program):
    floats = [i for i, d in enumerate(program.inputs) if d.is_float]
    return floats, [i for i in range(len(program.inputs)) if i not in floats]


def _closing(fn, program, fixed, floats):
    """``fn`` as a function of the float inputs, the others fixed."""
    def of_floats(*xs):
        args = list(fixed)
        for i, x in zip(floats, xs):
            args[i] = x
        return fn(*args)
    return of_floats


def jvp_run(T, program, keep, floats, zero=False):
    """``jvp`` of the program's ``keep`` outputs at sample 0 along the float inputs' sample 100 (along zeros where
    ``zero``): the Run (primal outputs, then tangents)."""
    inputs = _sample(T, program, 0)
    tangents = tuple(T.zeros_like(t) if zero else t for t in (_sample(T, program, 100)[i] for i in floats))
    return _call(T, program, lambda fn: lambda *xs: _func(T).jvp(
        _closing(_selecting(fn, keep), program, xs, floats), tuple(xs[i] for i in floats), tangents), inputs)


def _tangent_tolerances(program):
    """The tolerances of tangents and gradients against torch's: four times `oracle.tolerances`, whose float64
    is as loose as the narrowest float data the program holds (a float16 input's tangent, an ulp from torch's
    there, widened into a float64 output: seed 8000179)."""
    return {k: 4 * v for k, v in tolerances(program, True).items()}


def check_jvp(program, outcome):
    floats, _ = float_split(program)
    kept = tensor_outputs(jitorch, program)
    if not floats or kept is None or not kept[0]:
        return
    keep = kept[0]
    outcome.ran["jvp"] = outcome.ran.get("jvp", 0) + 1
    got, want = (jvp_run(_library(name), program, keep, floats) for name in ("jitorch", "torch"))
    found = outcome.mismatches
    if not got.error and any(e in want.error for e in TORCH_TANGENT_DTYPE):
        want = _torch_reverse_jvp(program, keep, floats)
        if not want.error:
            _compare(found, "jvp", "torch.autograd", Run(outputs=got.outputs),
                     Run(outputs=_primal_dtype_tangents(want).outputs), _tangent_tolerances(program))
            return
    if not got.error and (want.error and _limit(want, "jvp") or _torch_tangent_wrong(program, want)):
        finite_differences(program, keep, floats, got, found)
        return
    table = _tangent_tolerances(program)
    differ = []
    if _errors(differ, "jvp", got, want):
        _compare(differ, "jvp", "torch", got, _primal_dtype_tangents(want), table)
    if differ and not got.error and not want.error:
        reverse = _torch_reverse_jvp(program, keep, floats)
        if reverse.error:  # (torch's reverse mode refuses where its forward formula ran: seed 7884625)
            differ = [] if _tangents_differ_only(got, want, differ, _nan_primal_zero_tangent) else differ
        else:
            # (the outputs alone: torch's functional jvp runs on copies of the inputs, so the inputs the program
            # writes are judged by torch.func's run above; seed 7992798)
            second = []
            _compare(second, "jvp", "torch.autograd", Run(outputs=got.outputs),
                     Run(outputs=_primal_dtype_tangents(reverse).outputs), table)
            # (each output judged alone: one may take torch's forward formula's convention, another its reverse
            # formula's, as ``nanmedian`` of all NaN beside ``logit`` of a structurally zero tangent: seed 8102107)
            reversed_too = {tuple(m.what.split()[:2]) for m in second}
            differ = [m for m in differ if m.what.startswith("input") or tuple(m.what.split()[:2]) in reversed_too]
    if differ and _holds_sgn(program) and _tangents_differ_only(got, want, differ, _zero_tensor_of_sgn):
        differ = []
    found.extend(differ)


def _holds_sgn(program):
    return any(s.tag.removesuffix("_").removesuffix("(out)") == "sgn" for s in program.body)


def _nan_primal_zero_tangent(primal, got, want):
    """A NaN result's tangent follows the reverse rule in jitorch (docs/differences-from-torch.md, "A tangent at a kink
    follows the reverse rule"), 0, and torch's forward formula gives NaN."""
    return np.isnan(primal) & (got == 0) & np.isnan(want)


def _zero_tensor_of_sgn(primal, got, want):
    """torch.func's tangent of ``sgn`` of one element is a ZeroTensor, which stays 0 through a later op's infinite
    derivative (``x.sgn().asin_()``: 0 * inf), where jitorch's zero tangent gives NaN there, as torch's own for two
    elements (docs/differences-from-torch.md; seeds 8443740, 8480719 of ``--out-views 0.5``)."""
    return np.isnan(got) & (want == 0)


def _tangents_differ_only(got, want, differ, where):
    """Whether jitorch's jvp Run differs from torch.func's (``differ``) only in tangents, and there only at elements
    where ``where(primal, jitorch's tangent, torch's)`` holds. With `_nan_primal_zero_tangent`, the judge where torch's
    reverse-mode jvp raises (its ``clamp`` with two tensor bounds whose result broadcasts beyond ``self``: "output
    with shape [3, 5] doesn't match the broadcast shape [1, 3, 5]"; seed 7884625, ``x.sqrt_()`` of negative elements,
    then ``x.clip(x, y)``)."""
    half = len(got.outputs) // 2
    if any(not re.fullmatch(r"output (\d+) values", m.what) or int(m.what.split()[1]) < half for m in differ):
        return False
    for primal, g, w in zip(got.outputs[:half], got.outputs[half:], want.outputs[half:]):
        if g.kind != "tensor":
            continue
        a, b = g.values.astype(np.float64), w.values.astype(np.float64)
        off = ~np.isclose(a, b, equal_nan=True)
        if not where(primal.values[off].astype(np.float64), a[off], b[off]).all():
            return False
    return True


def _torch_reverse_jvp(program, keep, floats):
    """`jvp_run`'s Run by ``torch.autograd.functional.jvp``: the tangents from torch's reverse-mode formulas (the
    double-vjp trick, as jitorch's forward mode computes them), the oracle where torch.func.jvp's differ. torch's
    forward and reverse formulas take other sides of a kink: ``fmax(x, y)`` at ``x == y`` gives ``y``'s tangent
    forward and ``x`` the gradient backward (seed 7883129; docs/differences-from-torch.md). Run outside `OldValues`
    (under a dispatch mode torch's autograd takes other formulas) on copies of the inputs (the program may write
    them; torch's functional jvp differentiates leaves). Its backward saves copies (`_copy`): a program may write
    a tensor after an op saved it, which torch's forward AD and jitorch's take, and its backward refuses (seeds
    7990252, 7993453, 8007855, 8008311: ``v.fix_()`` after ``v / x``). (Not
    ``torch.autograd.graph.allow_mutation_on_saved_tensors``, a dispatch mode.)"""
    inputs = _sample(torch, program, 0)
    tangents = tuple(_sample(torch, program, 100)[i] for i in floats)

    def wrap(fn):
        def tangent_run(*xs):
            f = _closing(_selecting(fn, keep), program, xs, floats)
            every = []

            def floating(*v):  # (torch's functional jvp differentiates float outputs only; the others' are zeros)
                every[:] = f(*(t.clone() for t in v))
                return tuple(o for o in every if o.is_floating_point())
            with torch.autograd.graph.saved_tensors_hooks(_copy, _as_is):
                found = iter(torch.autograd.functional.jvp(floating, tuple(xs[i] for i in floats), tangents)[1])
            return tuple(every), tuple(next(found) if o.is_floating_point() else torch.zeros_like(o) for o in every)
        return tangent_run
    return _call(torch, program, wrap, inputs, modes=False)


def _copy(t):
    """A saved tensor as `_torch_reverse_jvp`'s backward keeps it: its values when saved, with its history."""
    return t.clone()


def _as_is(t):
    return t


_TENSOR_REF = re.compile(r"(?:[vxc]\d|M\.t\d|T\.)")  # a program's tensor, not a number or scalar variable


def _call_arguments(line, start):
    """The top-level arguments of the call whose ``(`` is at ``line[start]``."""
    found, depth, begin = [], 0, start + 1
    for i, ch in enumerate(line[start:], start):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if depth == 1 and ch == "," or depth == 0:
            found.append(line[begin:i].strip())
            begin = i + 1
        if depth == 0:
            break
    return [a for a in found if a]


def _operands(line, names):
    """The arguments after ``self`` (keywords' values, ``out=`` left out) of the call of ``names`` (a regex
    alternation) in ``line``, or None."""
    call = re.search(rf"(T\.)?(?:{names})_?\(", line)
    if call is None:
        return None
    args = [a for a in _call_arguments(line, call.end() - 1) if not a.startswith("out=")][1 if call.group(1) else 0:]
    return [a.split("=", 1)[-1] for a in args]


def _one_tensor_bound(line):
    """Whether the ``clamp``/``clip`` call of ``line`` has a tensor bound and no other (torch's ``clamp.Tensor``
    with a None bound)."""
    given = [b for b in _operands(line, "clamp|clip") or () if b != "None"]
    return len(given) == 1 and bool(_TENSOR_REF.match(given[0]))


def _scalar_other(line):
    """Whether the ``fmod``/``remainder`` call of ``line`` takes a number (torch's ``.Scalar`` overload)."""
    others = _operands(line, "fmod|remainder")
    return bool(others) and not _TENSOR_REF.match(others[0])


# Statements whose torch tangent alone is wrong, by tag and a test of the statement's line (None: every call): torch
# 2.13's forward AD of ``scatter_reduce(..., 'prod')`` gives its result no tangent (seed 7875998); its ``frac``
# and its ``fmod``/``remainder`` by a number pass their operand's tangent on as the result's, the same tensor, so
# an in-place op on the result writes the operand's tangent (seed 7890199; seed 7892174, where ``unsqueeze_``
# reshaped it and torch raised); its in-place logical ops keep their target's tangent where the values they
# write (0 and 1) have none (seed 7892288); its ``clamp``/``clip`` with one tensor bound takes, at a tie with the
# bound, the bound's tangent, where its backward and its other forms take the input's (seed 7891085), and its
# ``fmax`` at a tie takes ``other``'s, where its backward gives ``self`` the gradient (seed 7893400).
# docs/differences-from-torch.md.
TORCH_WRONG_TANGENT = {"scatter_reduce": lambda line: "'prod'" in line, "frac": None, "fmod": _scalar_other,
                       "remainder": _scalar_other, "logical_and": None,
                       "logical_or": None, "logical_xor": None, "logical_not": None, "clamp": _one_tensor_bound,
                       "clip": _one_tensor_bound, "fmax": None}


def _torch_tangent_wrong(program, run):
    """Whether torch's tangents are no oracle for the program: a statement whose torch derivative is no oracle
    (`generator.torch_gradient_untrusted`: wrong, as torch's cholesky_inverse jvp, seed 7870101; wrong by an
    integer operand, as atan2's, which squares it in its dtype or negates a bool, seed 7875982; topk's among
    ties, whose tangent is the element torch's kernel happened to pick, seed 7875047), a statement of
    `TORCH_WRONG_TANGENT`, or an in-place op that read memory it wrote (``x.lerp_(c, x)``: torch's forward
    formula reads ``x``'s tangent after writing it, seed 7870177; docs/differences-from-torch.md)."""
    return run.overlaps > 0 or any(torch_gradient_untrusted(s.tag) or _wrong_tangent(s) for s in program.body)


def _wrong_tangent(stmt):
    tag = stmt.tag.removesuffix("_").removesuffix("(out)")
    if tag not in TORCH_WRONG_TANGENT:
        return False
    judge = TORCH_WRONG_TANGENT[tag]
    return judge is None or any(judge(line) for line in stmt.lines)


def _primal_dtype_tangents(run):
    """``run`` with each tangent recorded in its primal's dtype. torch's tangent of a tensor that had none
    and took an in-place copy of another dtype's is the source's tangent as is (a float64 primal with a
    float32 tangent, seed 7840174; a float32 primal with a bfloat16 tangent, seed 7883356), and its var/std of a
    half type with no degrees of freedom has a float32 NaN tangent (seed 7890531); jitorch's has the primal's
    dtype (docs/func.md). The values are the same: every float32 is a float64, and the narrower dtype's tolerance
    takes the rounding to it."""
    half = len(run.outputs) // 2
    primals, tangents = run.outputs[:half], run.outputs[half:]
    return dataclasses.replace(run, outputs=primals + [
        dataclasses.replace(t, dtype=p.dtype) if p.kind == t.kind == "tensor" and p.dtype in FLOAT_DTYPES
        and t.dtype in FLOAT_DTYPES else t for p, t in zip(primals, tangents)])


# Statements no tangent flows through (Python values), and dtypes whose rounding swamps a step of 1e-6
NO_TANGENT = ("item", "tolist")
NARROW = ("float16", "bfloat16", "float32", ".half()", ".float()")


def _float64_throughout(program):
    """Whether finite differences are an oracle for the program's tangents: float64 tensors throughout (seeds
    7870409, 7871973: float32 and float16 intermediates) and no values through Python (``tolist``, seed
    7870861)."""
    decls = [d for d in (*program.inputs, *program.captured) if d.is_float]
    return all(d.dtype == "float64" for d in decls) and not any(
        s.tag in NO_TANGENT or any(n in line for line in s.lines for n in NARROW) for s in program.body)


def _of_itself(line):
    """Whether the ``nextafter`` call of ``line`` steps a tensor towards itself (``x.nextafter(x)``)."""
    call = re.search(r"(?:T\.nextafter_?\(([^,()]+), |([\w.]+)\.nextafter_?\()([^,()]+)\)", line)
    return call is not None and (call.group(1) or call.group(2)) == call.group(3)


# Statements whose derivative is a convention central differences do not see, by tag and a test of the line:
# ``nextafter(x, x)`` is ``x``, whose differences are ``x``'s tangent; torch's derivative of nextafter is 0 where
# ``self == other`` (forward and reverse), and jitorch's is torch's (seeds 7997322, 8003963;
# docs/differences-from-torch.md).
FD_BLIND = {"nextafter": _of_itself}
# Functions declared nondifferentiable whose results are floats of float operands (pointwise, promoting integers to
# float), which take no tangent in torch and in jitorch, where central differences see the function's slope:
# torch's ``special.hermite_polynomial_h`` and the other special functions it gives no derivative
# (``T.special.hermite_polynomial_h(x0, 1.5)``: 0 against 0.75, seed 8410191 of ``--namespaced``,
# tests/func/test_fuzz44_transforms.py). (Those of integer or bool results, argmax or isnan, meet no float64 output.)
NONDIFFERENTIABLE = {op.public_name for op in OPS.values()
                     if "nondifferentiable" in op.pieces and op.attrs.get("promotion") == "int_to_float"}


def _fd_blind(program):
    tags = [s.tag.removesuffix("_").removesuffix("(out)") for s in program.body]
    return any(tag in NONDIFFERENTIABLE for tag in tags) or any(
        tag in FD_BLIND and any(FD_BLIND[tag](line) for line in s.lines) for tag, s in zip(tags, program.body))


def _decided(value):
    """What a value of the program decided: a tensor's shape and, not of a float dtype, its values; a Python int's
    or bool's value; nothing of a Python float."""
    if isinstance(value, jitorch.Tensor):
        return tuple(value.shape), None if value.is_floating_point() else value.tolist()
    if isinstance(value, (tuple, list)):
        return [_decided(v) for v in value]
    return value if isinstance(value, (bool, int)) else None


def _decisions(program, inputs):
    """`_decided` of each of the program's local variables after a call on ``inputs``."""
    fn, _ = Instance(program, jitorch).build(probe=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = fn(*inputs)
    return {name: _decided(v) for name, v in found.items()}


def _outputs_at(program, keep, floats, step):
    """The kept outputs' values with the float inputs moved ``step`` along the tangents of sample 100 (None for
    an output not of float64) and what the program decided there (`_decisions`), or None where the program
    raises."""
    tangents = [_sample(jitorch, program, 100)[i] for i in floats]
    inputs = _sample(jitorch, program, 0)
    for i, t in zip(floats, tangents):
        inputs[i] = inputs[i] + step * t
    run = _call(jitorch, program, lambda fn: _selecting(fn, keep), [t.clone() for t in inputs])
    if run.error:
        return None
    return [o.values if o.dtype == "float64" else None for o in run.outputs], _decisions(program, inputs)


def _close_differences(a, b, rtol=1e-4):
    return np.allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.nanmax(np.abs(b), initial=0))), equal_nan=True)


def finite_differences(program, keep, floats, got, found, eps=1e-6):
    """Tangents against central differences at ``eps`` (where torch's are no oracle), for programs in float64
    throughout. An element is judged where the difference is finite (seed 7870928) and the one-sided
    differences at ``100 eps`` agree with it (not at a kink: ``relu`` at 0, seed 7870984). Not judged: a program
    that decides otherwise at any of the steps than at the point (a mask, a shape, an integer: where ``x0 != 0``
    selects an element that is 0 at the point, the selection moves the other elements' tangents without changing
    a value, seed 8008279), a statement of `FD_BLIND` or of `NONDIFFERENTIABLE`, and an element whose tangent is NaN
    along zero tangents too (an infinite derivative times a zero tangent, ``sqrt`` of a constant 0: torch.func.jvp's
    forward formulas give NaN there, as jitorch's, where the differences see a constant; seeds 8001568, 8003644,
    8006090, 7897283)."""
    if not _float64_throughout(program) or _fd_blind(program):
        return
    at = {step: _outputs_at(program, keep, floats, step) for step in (eps, -eps, 100 * eps, 0.0, -100 * eps)}
    if any(v is None for v in at.values()) or any(v[1] != at[0.0][1] for v in at.values()):
        return
    at = {step: v[0] for step, v in at.items()}
    half = len(got.outputs) // 2
    along_zero = None
    for j, tangent in enumerate(got.outputs[half:]):
        if at[0.0][j] is None or any(v[j].shape != tangent.values.shape for v in at.values()):
            continue  # (a shape that depends on the values: a boolean mask's selection, seed 7872815)
        fd = (at[eps][j] - at[-eps][j]) / (2 * eps)
        sides = [(at[100 * eps][j] - at[0.0][j]) / (100 * eps), (at[0.0][j] - at[-100 * eps][j]) / (100 * eps)]
        with np.errstate(invalid="ignore"):
            judged = np.isfinite(fd) & np.all([np.isclose(d, fd, rtol=1e-2, atol=1e-2) for d in sides], axis=0)
        if (judged & np.isnan(tangent.values)).any():
            along_zero = along_zero or jvp_run(jitorch, program, keep, floats, zero=True)
            if not along_zero.error:
                judged &= ~(np.isnan(tangent.values) & np.isnan(along_zero.outputs[half + j].values))
        if not _close_differences(tangent.values[judged], fd[judged]):
            found.append(Mismatch("jvp", "finite differences", "", f"tangent {j} values", _worst(tangent.values, fd)))


# Ops whose torch gradient raises "modified by an inplace operation" from torch's own in-place writes (its vander
# writes its powers into its result: seed 8104007, docs/differences-from-torch.md), so that a program calling one
# has no gradient run against torch (`generator.grad_valid`): vmap(grad) runs it against jitorch's loop and central
# differences (`gradient_differences`).
TORCH_NOT_DIFFERENTIABLE = ("vander",)


def _torch_not_differentiable(program):
    return any(s.tag.removesuffix("_") in TORCH_NOT_DIFFERENTIABLE for s in program.body)


def check_vmap_grad(program, outcome):
    floats, _ = float_split(program)
    torchless = not program.grad and _torch_not_differentiable(program)
    if not (program.grad or torchless) or not floats:
        return
    outcome.ran["vmap-grad"] = outcome.ran.get("vmap-grad", 0) + 1

    def loss_of(T, fn, fixed):
        def loss(*xs):
            total = grad_loss(T, _flatten(_closing(fn, program, fixed, floats)(*xs)))
            return total if total is not None else T.zeros((), dtype=T.float64)
        return loss

    argnums = tuple(range(len(floats)))
    loop = []
    for b in range(SAMPLES):
        # (the other inputs as vmap's run fixes them, at sample 0; seed 7870588 compared other integer inputs)
        inputs = [x if i in floats else fixed for i, (x, fixed) in
                  enumerate(zip(_sample(jitorch, program, b), _sample(jitorch, program, 0)))]
        loop.append(_call(jitorch, program, lambda fn: lambda *xs: jitorch.func.grad(
            loss_of(jitorch, fn, xs), argnums)(*(xs[i] for i in floats)), inputs))
        if loop[-1].error:
            return
    runs = {}
    for name in ("jitorch",) if torchless else ("jitorch", "torch"):
        T = _library(name)
        fixed = _sample(T, program, 0)
        inputs = _batched(T, program, [0 if i in floats else None for i in range(len(program.inputs))])
        runs[name] = _call(T, program, lambda fn: lambda *xs: _func(T).vmap(_func(T).grad(
            loss_of(T, fn, fixed), argnums))(*(xs[i] for i in floats)), inputs)
    got, want = runs["jitorch"], runs.get("torch")
    found = outcome.mismatches
    if torchless:
        if not got.error:
            gradient_differences(program, floats, loss_of, got, found)
            _compare(found, "vmap-grad", "loop", Run(outputs=got.outputs),
                     _stacked(jitorch, loop, [0] * len(floats)), TOLERANCE)
        return
    table = _tangent_tolerances(program)
    differ = []
    torch_own = _torch_differentiation_refused(program, floats, want, loss_of)
    if torch_own:
        if got.error and not (torch_own == "unknown" and any(e in got.error for e in _JITORCH_VMAP_REFUSALS)):
            found.append(Mismatch("vmap-grad", "loop", "", "error", f"{got.error} (the loop ran)"))
        elif not got.error:  # torch's oracles are then central differences and its autograd on each sample
            gradient_differences(program, floats, loss_of, got, found)
            autograd = _torch_autograd(program, floats)
            if autograd is not None:
                _compare(found, "vmap-grad", "torch.autograd", Run(outputs=got.outputs), autograd, table)
    elif _errors(differ, "vmap-grad", got, want):
        _compare(differ, "vmap-grad", "torch", Run(outputs=got.outputs), Run(outputs=want.outputs), table)
    if differ and not got.error and "vmap" not in want.error:
        autograd = _torch_autograd(program, floats)
        if autograd is not None:
            second = []
            _compare(second, "vmap-grad", "torch.autograd", Run(outputs=got.outputs), autograd, table)
            differ = differ if second and not _torch_gradient_inexact(program, floats, loss_of, got, found) else []
    found.extend(differ)
    if not got.error:
        _compare(found, "vmap-grad", "loop", Run(outputs=got.outputs), _stacked(jitorch, loop, [0] * len(floats)),
                 TOLERANCE)


def gradient_differences(program, floats, loss_of, got, found, eps=1e-6, sample=0):
    """Sample ``sample``'s gradients (``got``: vmap(grad)'s) against central differences of the loss along
    sample 100's values, ``sum(grad * d)`` being the loss's derivative along ``d``: the oracle where torch's
    gradients are none (`_torch_differentiation_refused`: torch's ``vander`` is not differentiable, seed 8104007;
    the loop alone is jitorch's own) or wrong (`_torch_gradient_inexact`). For programs in float64 throughout,
    judged as `finite_differences` judges tangents: where the difference is finite, the one-sided ones at
    ``100 eps`` agree with it, and the program decides alike at every step. Whether it judged."""
    if not _float64_throughout(program) or _fd_blind(program):
        return False
    point = _sample(jitorch, program, sample)
    direction = [_sample(jitorch, program, 100)[i] for i in floats]

    def loss_at(step):
        inputs = [t.clone() for t in point]
        for i, d in zip(floats, direction):
            inputs[i] = (inputs[i] + step * d).requires_grad_()  # (`grad_loss` sums the outputs requiring grad)
        run = _call(jitorch, program, lambda fn: lambda *xs: loss_of(jitorch, fn, point)(*(xs[i] for i in floats)),
                    [t.clone() for t in inputs])
        return None if run.error else (float(run.outputs[0].values), _decisions(program, inputs))

    at = {step: loss_at(step) for step in (eps, -eps, 100 * eps, 0.0, -100 * eps)}
    if any(v is None for v in at.values()) or any(v[1] != at[0.0][1] for v in at.values()):
        return False
    loss = {step: v[0] for step, v in at.items()}
    fd = (loss[eps] - loss[-eps]) / (2 * eps)
    sides = [(loss[100 * eps] - loss[0.0]) / (100 * eps), (loss[0.0] - loss[-100 * eps]) / (100 * eps)]
    if not (np.isfinite(fd) and np.allclose(sides, fd, rtol=1e-2, atol=1e-2)):
        return False
    along = sum(float((g.values[sample] * d.numpy()).sum()) for g, d in zip(got.outputs, direction))
    if not _close_differences(np.array(along), np.array(fd)):
        found.append(Mismatch("vmap-grad", "finite differences", "", "gradient along a direction", f"{along} vs {fd}"))
    return True


# Ops whose torch gradient loses accuracy on some inputs: ``matrix_exp``'s block exponential under a gradient far
# larger than the matrix (docs/differences-from-torch.md; transform fuzz seed 8409257).
TORCH_INEXACT_GRADIENT = ("matrix_exp",)


def _torch_gradient_inexact(program, floats, loss_of, got, found):
    """Whether jitorch's vmap(grad) (``got``), which torch.func's and torch.autograd's gradients both differ from,
    is the right one: the program calls an op of `TORCH_INEXACT_GRADIENT` and central differences judge every
    sample's gradient (`gradient_differences`, which adds what they find to ``found``)."""
    if not any(s.tag.removesuffix("_") in TORCH_INEXACT_GRADIENT for s in program.body):
        return False
    before = len(found)
    judged = all([gradient_differences(program, floats, loss_of, got, found, sample=b) for b in range(SAMPLES)])
    return judged and len(found) == before


# torch's vmap errors for an in-place write of batched values into an unbatched tensor and for reading a batched
# value (``item()``, data-dependent control flow)
_VMAP_INPLACE = "vmap: inplace arithmetic(self, *extra_args) is not possible"
_VMAP_DATA_DEPENDENT = "vmap: It looks like you're either (1) calling .item() on a Tensor"
_VMAP_REFUSALS = (_VMAP_INPLACE, _VMAP_DATA_DEPENDENT)
# jitorch's vmap refuses a read of a batched value in words of its own (torch's differ by the read: ``.item()``,
# ``bool()``, and under grad one message for both), so its refusals are found by its own words (seed 8200120:
# ``v1.min().item()`` of a batched ``v1`` raised it under vmap(grad), where torch's plain vmap stopped at
# column_stack's missing batching rule first)
_JITORCH_VMAP_REFUSALS = (_VMAP_INPLACE, "vmap: It looks like you're reading the values of a batched Tensor")


def _torch_differentiation_refused(program, floats, want, loss_of):
    """Whether torch's vmap(grad) raised its in-place error (`_VMAP_INPLACE`) or its data-dependent one
    (`_VMAP_DATA_DEPENDENT`) where its plain vmap of the same loss, on the same batched inputs, runs: then no
    statement of the program raised it but torch's own differentiation (its ``vander`` writes its powers in place
    into a tensor the grad level leaves unbatched, seed 8002504; its backward of an in-place op on an empty view,
    seed 7893180; its backward of ``scatter_reduce`` with ``'prod'`` asks whether the source holds a zero, seed
    8400167; docs/differences-from-torch.md). The program's own writes and reads raise alike under both. Where the
    plain vmap stops at one of torch's vmap limits first (a write through a boolean mask, seed 8302801), torch
    cannot tell which it is: "unknown", and jitorch may raise the same error (its own writes, seed 7840036) or
    run, judged by the others."""
    if not any(e in want.error for e in _VMAP_REFUSALS):
        return False
    fixed = _sample(torch, program, 0)
    inputs = _batched(torch, program, [0 if i in floats else None for i in range(len(program.inputs))])
    plain = _call(torch, program, lambda fn: lambda *xs: torch.func.vmap(loss_of(torch, fn, fixed))(
        *(xs[i] for i in floats)), inputs)
    return True if not plain.error else "unknown" if _limit(plain, "vmap") else False


def _torch_autograd(program, floats):
    """The per-sample gradients of `check_vmap_grad`'s loss by torch's own autograd (``torch.autograd.grad`` on
    each sample), stacked; None where a sample raises. The oracle where torch.func's differ: torch.func's
    ``grad`` takes other backward formulas than ``torch.autograd`` for some ops (a full ``median``/``nanmedian``/
    ``max``'s gradient is ``mask * g`` there, which spreads a NaN ``g`` over every element; torch.autograd's fills
    the selected element alone: seed 7873440, docs/differences-from-torch.md), and torch's vmap(grad) raises for
    some programs its loop runs (``select_scatter`` of a source of another dtype: seed 7881001)."""
    def per_sample(fn):
        def gradients(*xs):
            leaves = [xs[i].detach().requires_grad_() for i in floats]
            args = list(xs)
            for i, leaf in zip(floats, leaves):
                args[i] = leaf.clone()  # (not the leaf: the program may write its inputs)
            total = grad_loss(torch, _flatten(fn(*args)))
            if total is None:
                return tuple(torch.zeros_like(leaf) for leaf in leaves)
            return torch.autograd.grad(total, leaves, allow_unused=True, materialize_grads=True)
        return gradients

    runs = []
    for b in range(SAMPLES):
        inputs = [x if i in floats else fixed for i, (x, fixed) in
                  enumerate(zip(_sample(torch, program, b), _sample(torch, program, 0)))]
        # (outside `OldValues`: under any dispatch mode torch's autograd takes torch.func's formulas)
        runs.append(_call(torch, program, per_sample, inputs, modes=False))
        if runs[-1].error:
            return None
    return _stacked(torch, runs, [0] * len(floats))


def check(program):
    """Run ``program`` through the transforms: an `Outcome`."""
    outcome = Outcome()
    rng = random.Random(program.seed * 7 + 1)
    for step in (lambda: check_vmap(program, rng, outcome), lambda: check_jvp(program, outcome),
                 lambda: check_vmap_grad(program, outcome)):
        try:
            step()
        except Exception as e:  # the harness's own failure on a program is a finding too
            outcome.mismatches.append(Mismatch("harness", "", "", "crash", f"{type(e).__name__}: {e}"))
    return outcome


def main(argv=None):
    """``python -m tests.fuzz.transforms --minutes 10 --start 7840000``: programs from consecutive seeds
    through the transforms until the time is up; prints each failing seed with its mismatches."""
    import argparse
    import time

    from .generator import generate, op_table

    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.transforms", description=main.__doc__)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--start", type=int, default=7_840_000, help="the first seed")
    parser.add_argument("--namespaced", action="store_true",
                        help="also draw the ops called in a namespace (torch.special's)")
    parser.add_argument("--out-views", type=float, default=0.0,
                        help="the share of out= statements writing a variable, a view or a buffer to resize")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    table = op_table(args.namespaced)
    started, seed, programs, failing, ran, inexact = time.time(), args.start, 0, 0, {}, 0
    while time.time() - started < 60 * args.minutes:
        program, _ = generate(seed, table=table, out_views=args.out_views)
        outcome = check(program)
        programs += 1
        inexact += outcome.inexact
        for k, n in outcome.ran.items():
            ran[k] = ran.get(k, 0) + n
        if outcome.mismatches:
            failing += 1
            print(f"seed {seed}: " + "; ".join(str(m)[:300] for m in outcome.mismatches[:3]), flush=True)
        seed += 1
        if programs % 50 == 0:
            print(f"{programs} programs, up to seed {seed - 1}, {failing} failing", flush=True)
    print(f"{programs} programs (seeds {args.start}-{seed - 1}), checks run {ran}, {failing} failing, "
          f"{inexact} float outputs of vmap within tolerance of the loop but not bit for bit", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
